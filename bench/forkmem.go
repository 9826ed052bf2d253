package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"
	envdclient "github.com/envd-dev/envd/client"
)

// forkCopies is how many instances the fork-memory scenario starts at once
// (issue 25's target: a fork into 4, all answering within 2 s).
const forkCopies = 4

// forkSide is one side of the fork-memory scenario: its samples.
type forkSide struct {
	op, all []time.Duration // the operation (or the creates) and request to all answering
}

// runForkMemory is the fork-memory scenario (issue 25, item 4): a gVisor
// instance of a busybox project counting in a shell loop is forked with
// its memory into 4 (one checkpoint with memory, 4 instances restored from
// it), timed from the request to the moment all 4 have answered an exec;
// against a cold start of 4 instances (4 concurrent creates) from the fork's
// version, timed the same way. An untimed first fork makes that version;
// then cfg.runs rounds, the sides alternated.
func runForkMemory(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	started := time.Now()
	load0 := loadAvg()
	const project = "forkmem"
	b, err := gvisorBed(ctx, cfg, project)
	defer b.closeInto(&rErr)
	if err != nil {
		return err
	}
	orig, err := b.c.CreateInstance(ctx, project, types.CreateInstanceRequest{TTL: "2h"})
	if err != nil {
		return err
	}
	defer b.remove(context.WithoutCancel(ctx), b.c, orig.ID)
	if _, err := sh(ctx, b.c, orig.ID, `(i=0; while :; do i=$((i+1)); echo $i > /root/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 &`); err != nil {
		return err
	}
	fork, cold := &forkSide{}, &forkSide{}
	var freezes, memBytes []int64
	var forks [][]string // the copies of each timed fork
	// forkOnce forks orig into forkCopies and returns the copies and the
	// fork's version.
	forkOnce := func() ([]string, int, error) {
		op, err := b.c.Fork(ctx, orig.ID, types.ForkRequest{Memory: true, Count: forkCopies, TTL: "1h"}, "")
		if err != nil {
			return nil, 0, err
		}
		if op, err = b.c.WaitOperation(ctx, op.ID, nil); err != nil {
			return nil, 0, err
		}
		if op.State != types.OpSucceeded {
			return nil, 0, fmt.Errorf("fork %s: %+v", op.ID, op.Error)
		}
		var res types.ForkResult
		if err := json.Unmarshal(op.Result, &res); err != nil {
			return nil, 0, err
		}
		var ids []string
		for _, in := range res.Instances {
			ids = append(ids, in.ID)
		}
		if cp, err := b.c.GetCheckpoint(ctx, project, res.Checkpoint); err == nil && cp.Memory != nil {
			freezes = append(freezes, cp.FreezeMS)
			memBytes = append(memBytes, cp.Memory.Bytes)
		}
		return ids, res.Version, nil
	}
	// A first fork, not timed: the image's first pulls, and the version
	// the cold side starts from.
	ids, version, err := forkOnce()
	if err != nil {
		return err
	}
	b.removeAll(ctx, ids)
	for r := 0; r < max(cfg.runs, 1); r++ {
		sides := []string{"fork", "cold"}
		if r%2 == 1 {
			sides = []string{"cold", "fork"}
		}
		for _, side := range sides {
			start := time.Now()
			var ids []string
			var err error
			s := fork
			if side == "fork" {
				ids, _, err = forkOnce()
				forks = append(forks, ids)
			} else {
				s = cold
				var ins []types.Instance
				ins, err = createN(ctx, b.c, project, version, forkCopies)
				for _, in := range ins {
					ids = append(ids, in.ID)
				}
			}
			opTime := time.Since(start)
			if err == nil {
				err = execAll(ctx, b.c, ids)
			}
			all := time.Since(start)
			b.removeAll(ctx, ids)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, side, err)
			}
			s.op, s.all = append(s.op, opTime), append(s.all, all)
			logf("round %d %s: operation %s, all %d answered %s", r+1, side, seconds(opTime), forkCopies, seconds(all))
		}
	}
	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "Load average (1, 5, 15 min) before: %s; after: %s.\n\n", load0, loadAvg())
	fmt.Fprintf(&w, "Busybox base, project of class gvisor; the original instance counts in a shell loop (state in memory). Fork: `POST .../fork {memory: true, count: %d}` (one checkpoint with memory, then %d instances restored from it on the node), timed from the request to the operation's end and to all %d copies answering `exec true`. Cold: %d concurrent creates from the fork's version (a fresh init each), timed the same way. A first fork (not timed) makes the version; then %d round(s), sides alternated.\n\n",
		forkCopies, forkCopies, forkCopies, forkCopies, max(cfg.runs, 1))
	var cells [][]string
	for _, s := range []struct {
		name string
		side *forkSide
	}{{fmt.Sprintf("fork with memory into %d", forkCopies), fork}, {fmt.Sprintf("cold start of %d from the version", forkCopies), cold}} {
		cells = append(cells, []string{s.name, fmt.Sprint(len(s.side.all)), seconds(median(s.side.op)), seconds(median(s.side.all)), seconds(percentile(s.side.all, 1))})
	}
	mdTable(&w, []string{"side", "rounds", "operation / creates p50", "request to all answering p50", "max"}, 1, cells)
	forkCopySteps(&w, forks)
	if len(freezes) > 0 {
		fmt.Fprintf(&w, "\n- The fork's checkpoint: freeze %d ms (median), memory image %s MB.\n", medianInt(freezes), megabytes(medianInt(memBytes)))
	}
	fmt.Fprintf(&w, "- fork / cold, request to all answering: %s.\n", ratioX(median(fork.all), median(cold.all)))
	met := "not met"
	if median(fork.all) <= 2*time.Second {
		met = "met"
	}
	fmt.Fprintf(&w, "- Target (a fork into 4, all answering within 2 s): %s in this run.\n", met)
	fmt.Fprintf(&w, "- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err = out.Write(w.Bytes())
	return err
}

// createN starts n instances of project's version concurrently.
func createN(ctx context.Context, c *envdclient.Client, project string, version, n int) ([]types.Instance, error) {
	ins := make([]types.Instance, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ins[i], errs[i] = c.CreateInstance(ctx, project, types.CreateInstanceRequest{Version: version, TTL: "1h"})
		})
	}
	wg.Wait()
	var out []types.Instance
	for i, in := range ins {
		if errs[i] == nil {
			out = append(out, in)
		}
	}
	return out, errors.Join(errs...)
}

// execAll runs `true` in every instance at once and returns when all have
// answered.
func execAll(ctx context.Context, c *envdclient.Client, ids []string) error {
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() { _, errs[i] = sh(ctx, c, id, "true") })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// removeAll removes instances ids.
func (b *bed) removeAll(ctx context.Context, ids []string) {
	for _, id := range ids {
		b.remove(context.WithoutCancel(ctx), b.c, id)
	}
}
