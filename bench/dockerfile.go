package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
)

// dockerfileBenchSteps are the ten steps of the dockerfile scenario, as
// shell commands: each writes and digests a few MB, as a small compile
// step would. The last is the one changed.
func dockerfileBenchSteps(last string) []string {
	steps := []string{}
	for i := 1; i <= 9; i++ {
		steps = append(steps, fmt.Sprintf("mkdir -p /opt/s%d && dd if=/dev/urandom of=/opt/s%d/blob bs=1M count=4 2>/dev/null && sha256sum /opt/s%d/blob > /opt/s%d/sum", i, i, i, i))
	}
	return append(steps, last)
}

// dockerfileOf is a Dockerfile running steps on the base; RUN_ID makes
// each run's first build a first one (BuildKit's cache is the node's).
func dockerfileOf(steps []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "FROM %s\nARG RUN_ID\n", baseImage)
	for _, s := range steps {
		fmt.Fprintf(&b, "RUN %s\n", s)
	}
	return b.String()
}

// specOf is envd's own spec of the same steps.
func specOf(steps []string, runID string) types.BuildRequest {
	req := types.BuildRequest{Env: map[string]string{"RUN_ID": runID}}
	for _, s := range steps {
		req.Run = append(req.Run, types.BuildStep{Args: []string{s}, Shell: true})
	}
	return req
}

// runDockerfileBench is the dockerfile scenario (issue 29): a ten-step
// Dockerfile built by BuildKit, then built again unchanged, then with its
// last line changed; and envd's own spec of the same steps, the same three
// builds. cfg.runs rounds, each with a RUN_ID of its own.
func runDockerfileBench(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	started := time.Now()
	load0 := loadAvg()
	b, err := busyboxBed(ctx, cfg, "dockerfile")
	defer b.closeInto(&rErr)
	if err != nil {
		return err
	}
	kinds := []string{"first build", "unchanged rebuild", "last line changed"}
	times := map[string]map[string][]time.Duration{"Dockerfile (BuildKit)": {}, "envd spec": {}}
	cachedSteps, cachedChanged := []int{}, []int{}
	for r := 0; r < cfg.runs; r++ {
		runID := fmt.Sprint(time.Now().UnixNano())
		for _, side := range []string{"Dockerfile (BuildKit)", "envd spec"} {
			p := fmt.Sprintf("df-%d-%d", r, len(times[side]["first build"]))
			if side == "envd spec" {
				p = "spec-" + p
			}
			if err := b.project(ctx, p, "estargz"); err != nil {
				return err
			}
			for i, kind := range kinds {
				last := "echo one > /opt/last"
				if i == 2 {
					last = "echo two > /opt/last"
				}
				steps := dockerfileBenchSteps(last)
				req := specOf(steps, runID)
				if side != "envd spec" {
					req = types.BuildRequest{Dockerfile: &types.DockerfileBuild{Content: dockerfileOf(steps), Args: map[string]string{"RUN_ID": runID}}}
				}
				t := time.Now()
				op, err := b.c.Build(ctx, p, req)
				if err != nil {
					return fmt.Errorf("%s %s: %w", side, kind, err)
				}
				if op, err = b.c.WaitOperation(ctx, op.ID, nil); err != nil {
					return err
				}
				d := time.Since(t)
				if op.State != types.OpSucceeded {
					return fmt.Errorf("%s %s: %+v", side, kind, op.Error)
				}
				times[side][kind] = append(times[side][kind], d)
				if side != "envd spec" && i > 0 {
					var log bytes.Buffer
					if _, err := b.c.OperationLogs(ctx, op.ID, &log); err != nil {
						return err
					}
					n := strings.Count(log.String(), " CACHED\n")
					if i == 1 {
						cachedSteps = append(cachedSteps, n)
					} else {
						cachedChanged = append(cachedChanged, n)
					}
				}
				var res types.BuildResult
				if err := json.Unmarshal(op.Result, &res); err != nil {
					return err
				}
				logf("dockerfile: %s, %s: %s (version %d, cached %v)", side, kind, seconds(d), res.Version, res.Cached)
			}
		}
	}
	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "Load average (1, 5, 15 min) before: %s; after: %s.\n\n", load0, loadAvg())
	fmt.Fprintf(&w, "Busybox base; a Dockerfile of 10 RUN steps (9 write and digest 4 MB each, the last writes a line), built by the node's BuildKit, then again unchanged, then with the last line changed; and envd's own spec with the same 10 steps as run steps, the same three builds. %d rounds, each with a build argument (an env entry in the spec) of its own so that its first build is one. Times: the build request to the operation's end (push, commit, no validation).\n\n", cfg.runs)
	var cells [][]string
	for _, side := range []string{"Dockerfile (BuildKit)", "envd spec"} {
		row := []string{side}
		for _, k := range kinds {
			row = append(row, seconds(median(times[side][k])))
		}
		row = append(row, ratioX(median(times[side]["unchanged rebuild"]), median(times[side]["first build"])),
			ratioX(median(times[side]["last line changed"]), median(times[side]["first build"])))
		cells = append(cells, row)
	}
	mdTable(&w, []string{"build", "first p50", "unchanged p50", "last line changed p50", "unchanged / first", "changed / first"}, 1, cells)
	fmt.Fprintf(&w, "\n- BuildKit's CACHED steps in the unchanged rebuilds: %v (of 10 RUN steps).\n", cachedSteps)
	met := "not met"
	if u, f := median(times["Dockerfile (BuildKit)"]["unchanged rebuild"]), median(times["Dockerfile (BuildKit)"]["first build"]); u > 0 && u*10 <= f {
		met = "met"
	}
	fmt.Fprintf(&w, "- Target (unchanged Dockerfile rebuild at most 10%% of the first build): %s in this run.\n", met)
	only := "met"
	for _, n := range cachedChanged {
		if n != 9 {
			only = "not met"
		}
	}
	fmt.Fprintf(&w, "- BuildKit's CACHED steps in the builds with the last line changed: %v; target (only the changed step runs again: 9 of 10 CACHED): %s.\n", cachedChanged, only)
	fmt.Fprintf(&w, "- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err = out.Write(w.Bytes())
	return err
}
