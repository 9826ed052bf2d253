package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"
)

// Running-state scenarios of issue 25 (checkpoint-memory, resume-memory;
// fork-memory is forkmem.go) and what they read of the node: the steps
// of a capture's freeze from the checkpoint operation's events, the steps
// of a start from the node's "started instance" debug record (startSteps).

// startSteps holds the steps of every instance start the bed's nodes
// logged ("started instance", envd/lifecycle), by instance id.
var startSteps = &stepLog{byID: map[string]map[string]int64{}}

type stepLog struct {
	mu   sync.Mutex
	byID map[string]map[string]int64
}

func (l *stepLog) get(id string) map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byID[id]
}

// stepHandler passes records to next at its level and keeps the steps of
// "started instance" records (logged at debug) whatever the level.
type stepHandler struct{ next slog.Handler }

func (h stepHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h stepHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "started instance" {
		var id string
		steps := map[string]int64{}
		r.Attrs(func(a slog.Attr) bool {
			switch v := a.Value.Resolve(); {
			case a.Key == "instance":
				id = v.String()
			case strings.HasSuffix(a.Key, "_ms") && v.Kind() == slog.KindInt64:
				steps[strings.TrimSuffix(a.Key, "_ms")] = v.Int64()
			}
			return true
		})
		if id != "" {
			startSteps.mu.Lock()
			startSteps.byID[id] = steps
			startSteps.mu.Unlock()
		}
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h stepHandler) WithAttrs(as []slog.Attr) slog.Handler { return stepHandler{h.next.WithAttrs(as)} }
func (h stepHandler) WithGroup(name string) slog.Handler    { return stepHandler{h.next.WithGroup(name)} }

// msD is a step in milliseconds as a duration.
func msD(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// memCheckpointMiB is the resident memory the checkpoint-memory scenario
// gives its instance (issue 25: a checkpoint of 256 MiB resident).
const memCheckpointMiB = 256

// freezeSample is one memory checkpoint: its operation's total and the
// freeze's steps, from its events.
type freezeSample struct {
	total                                          time.Duration
	freeze, pause, rootfs, volumes, engine, resume time.Duration
	push                                           time.Duration
	bytes, newBytes                                int64
}

// gvisorBed is the memory scenarios' bed: a busybox bed (its node, dir
// and base named name) with a project of the same name on class gvisor.
// The bed is returned with an error too, for the caller's deferred close.
func gvisorBed(ctx context.Context, cfg config, name string) (*bed, error) {
	b, err := busyboxBed(ctx, cfg, name)
	if err != nil {
		return b, err
	}
	_, err = b.c.CreateProject(ctx, types.CreateProjectRequest{Name: name, Base: baseImage, RuntimeClass: "gvisor"})
	return b, err
}

// runCheckpointMemory is the checkpoint-memory scenario (issue 25: the
// freeze of an instance with 256 MiB resident at most 1 s, and the time to
// a ready checkpoint): a gVisor instance whose process holds 256 MiB of
// random bytes (busybox sort reading them from a pipe kept open, so it
// never ends and keeps every line) is checkpointed with its memory
// cfg.runs times; each row is one checkpoint, the freeze divided into its
// steps (the "spooled" and "memory" events).
func runCheckpointMemory(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	started := time.Now()
	load0 := loadAvg()
	const project = "ckmem"
	b, err := gvisorBed(ctx, cfg, project)
	defer b.closeInto(&rErr)
	if err != nil {
		return err
	}
	in, err := b.c.CreateInstance(ctx, project, types.CreateInstanceRequest{TTL: "2h"})
	if err != nil {
		return err
	}
	defer b.remove(context.WithoutCancel(ctx), b.c, in.ID)
	rss, err := holdMemory(ctx, b, in.ID, memCheckpointMiB)
	if err != nil {
		return err
	}
	logf("instance %s holds %d MiB resident (sort's VmRSS)", in.ID, rss>>10)
	var samples []freezeSample
	for r := 0; r < max(cfg.runs, 1); r++ {
		s, err := b.memoryCheckpoint(ctx, in.ID)
		if err != nil {
			return fmt.Errorf("checkpoint %d: %w", r+1, err)
		}
		samples = append(samples, s)
		logf("checkpoint %d: freeze %s (engine %s), ready %s", r+1, seconds(s.freeze), seconds(s.engine), seconds(s.total))
	}
	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "Load average (1, 5, 15 min) before: %s; after: %s.\n\n", load0, loadAvg())
	fmt.Fprintf(&w, "Busybox base, project of class gvisor, no volumes; in the instance, busybox `sort` reads %d MiB of random bytes from a pipe kept open, so it holds them (VmRSS %d MiB). %d checkpoint(s) with memory, one after the other, the instance running on. Freeze: from the pause to the resume; its steps: pause (the freezer), the rootfs's frozen pass, the volumes' freeze, runsc's checkpoint (memory image written), resume. Ready: the request to the operation's end (rootfs layer and memory image pushed, row committed).\n\n",
		memCheckpointMiB, rss>>10, len(samples))
	var cells [][]string
	row := func(name string, s freezeSample) []string {
		return []string{name, seconds(s.freeze), ms3(s.pause), ms3(s.rootfs), ms3(s.volumes), ms3(s.engine), ms3(s.resume),
			megabytes(s.bytes), megabytes(s.newBytes), seconds(s.push), seconds(s.total)}
	}
	for i, s := range samples {
		cells = append(cells, row(fmt.Sprint(i+1), s))
	}
	med := func(f func(freezeSample) time.Duration) time.Duration {
		var ds []time.Duration
		for _, s := range samples {
			ds = append(ds, f(s))
		}
		return median(ds)
	}
	medInt := func(f func(freezeSample) int64) int64 {
		var ns []int64
		for _, s := range samples {
			ns = append(ns, f(s))
		}
		return medianInt(ns)
	}
	m := freezeSample{
		freeze: med(func(s freezeSample) time.Duration { return s.freeze }), pause: med(func(s freezeSample) time.Duration { return s.pause }),
		rootfs: med(func(s freezeSample) time.Duration { return s.rootfs }), volumes: med(func(s freezeSample) time.Duration { return s.volumes }),
		engine: med(func(s freezeSample) time.Duration { return s.engine }), resume: med(func(s freezeSample) time.Duration { return s.resume }),
		push: med(func(s freezeSample) time.Duration { return s.push }), total: med(func(s freezeSample) time.Duration { return s.total }),
		bytes: medInt(func(s freezeSample) int64 { return s.bytes }), newBytes: medInt(func(s freezeSample) int64 { return s.newBytes }),
	}
	cells = append(cells, row("median", m))
	mdTable(&w, []string{"checkpoint", "freeze", "pause", "rootfs pass", "volumes", "runsc checkpoint", "resume", "image MB", "new MB", "memory push", "ready"}, 1, cells)
	met := "not met"
	if m.freeze <= time.Second {
		met = "met"
	}
	fmt.Fprintf(&w, "\n- Target (freeze at most 1 s): %s in this run (median %s).\n", met, seconds(m.freeze))
	fmt.Fprintf(&w, "- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err = out.Write(w.Bytes())
	return err
}

// ms3 formats d in milliseconds.
func ms3(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + " ms" }

// holdMemory starts, in instance id, a process holding mib MiB of random
// bytes resident (busybox sort, whose input pipe never ends) and returns
// its VmRSS in KiB once it holds them all.
func holdMemory(ctx context.Context, b *bed, id string, mib int) (int64, error) {
	if _, err := sh(ctx, b.c, id, fmt.Sprintf(`(head -c %d /dev/urandom; exec sleep 2147483647) </dev/null 2>/dev/null | sort >/dev/null 2>&1 &`, mib<<20)); err != nil {
		return 0, err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		outp, err := sh(ctx, b.c, id, `for p in $(pidof sort); do sed -n 's/^VmRSS:[^0-9]*\([0-9]*\).*/\1/p' /proc/$p/status; done`)
		if err != nil {
			return 0, err
		}
		if kb, err := strconv.ParseInt(strings.TrimSpace(outp), 10, 64); err == nil && kb >= int64(mib)<<10 {
			return kb, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("instance %s: sort holds %q KiB, not %d MiB, after 10 minutes", id, strings.TrimSpace(outp), mib)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// memoryCheckpoint checkpoints instance id with its memory and reads the
// freeze's steps from the operation's events.
func (b *bed) memoryCheckpoint(ctx context.Context, id string) (freezeSample, error) {
	var s freezeSample
	start := time.Now()
	op, err := b.c.Checkpoint(ctx, id, types.CheckpointRequest{Memory: true})
	if err != nil {
		return s, err
	}
	if op, err = b.c.WaitOperation(ctx, op.ID, nil); err != nil {
		return s, err
	}
	s.total = time.Since(start)
	if op.State != types.OpSucceeded {
		return s, fmt.Errorf("checkpoint %s: %+v", op.ID, op.Error)
	}
	evs, err := b.c.OperationEvents(ctx, op.ID, 0)
	if err != nil {
		return s, err
	}
	var sawMemory bool
	for _, ev := range evs {
		if ev.Type != "memory" {
			continue
		}
		raw := map[string]int64{}
		var m map[string]any
		if err := json.Unmarshal(ev.Data, &m); err != nil {
			return s, fmt.Errorf("memory event: %w", err)
		}
		for k, v := range m {
			if f, ok := v.(float64); ok {
				raw[k] = int64(f)
			}
		}
		s.freeze, s.pause, s.rootfs = msD(raw["freeze_ms"]), msD(raw["pause_ms"]), msD(raw["rootfs_frozen_ms"])
		s.volumes, s.engine, s.resume, s.push = msD(raw["volumes_frozen_ms"]), msD(raw["memory_freeze_ms"]), msD(raw["resume_ms"]), msD(raw["push_ms"])
		s.bytes, s.newBytes = raw["bytes"], raw["new_bytes"]
		sawMemory = true
	}
	if !sawMemory {
		return s, fmt.Errorf("checkpoint %s: no memory event", op.ID)
	}
	return s, nil
}

// devServer is the resume-memory scenario's dev server: a start that does
// work before it answers (a stand-in for a build: the MD5 of %d MiB drawn
// from /dev/urandom, written as its page), then busybox httpd on port
// 8080. A cold start pays that work; a resume continues the server.
const devServer = `mkdir -p /root/www && head -c %d /dev/urandom | md5sum | cut -d' ' -f1 > /root/www/index.html && exec httpd -f -p 8080 -h /root/www`

// devServerMiB is the dev server's start work.
const devServerMiB = 64

// resumeSide is one side of the resume-memory scenario.
type resumeSide struct {
	create, answer []time.Duration    // the create call, the request to the first answer
	steps          []map[string]int64 // the node's steps of each start
}

// runResumeMemory is the resume-memory scenario (issue 25: resume on the
// same node to a dev server's first answer within 0.5 s, against a cold
// start plus the server's own start): a gVisor instance runs devServer and
// is checkpointed with its memory; then, alternated, cfg.runs rounds of
// (a) a resume of that checkpoint on the same node (the node's local copy
// of the image), (b) the same resume with the local copy set aside (the
// image pulled from the registry) and (c) a cold start of the checkpoint's
// version and the server's start; each timed from the request to the
// first 200 through the node's port proxy.
func runResumeMemory(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	started := time.Now()
	load0 := loadAvg()
	const project = "resumemem"
	b, err := gvisorBed(ctx, cfg, project)
	defer b.closeInto(&rErr)
	if err != nil {
		return err
	}
	orig, err := b.c.CreateInstance(ctx, project, types.CreateInstanceRequest{TTL: "2h"})
	if err != nil {
		return err
	}
	serverCmd := fmt.Sprintf(`(`+devServer+`) </dev/null >/dev/null 2>&1 &`, devServerMiB<<20)
	if _, err := sh(ctx, b.c, orig.ID, serverCmd); err != nil {
		return err
	}
	if _, err := b.firstAnswer(ctx, orig.ID, time.Now()); err != nil {
		b.remove(context.WithoutCancel(ctx), b.c, orig.ID)
		return err
	}
	op, err := b.c.Checkpoint(ctx, orig.ID, types.CheckpointRequest{Memory: true})
	if err == nil {
		op, err = b.c.WaitOperation(ctx, op.ID, nil)
	}
	b.remove(context.WithoutCancel(ctx), b.c, orig.ID)
	if err != nil {
		return err
	}
	if op.State != types.OpSucceeded {
		return fmt.Errorf("checkpoint %s: %+v", op.ID, op.Error)
	}
	var res types.CheckpointResult
	if err := json.Unmarshal(op.Result, &res); err != nil {
		return err
	}
	cp := res.Checkpoint
	if cp.Memory == nil {
		return fmt.Errorf("checkpoint %d has no memory image", cp.ID)
	}
	cache := filepath.Join(b.dir, "primary", "work", "memory-cache")
	entry := filepath.Join(cache, strings.ReplaceAll(cp.Memory.Image[strings.LastIndex(cp.Memory.Image, "@")+1:], ":", "-"))
	if _, err := os.Stat(entry); err != nil {
		return fmt.Errorf("the node kept no local copy of memory image %s: %w", cp.Memory.Image, err)
	}
	aside := filepath.Join(cache, ".bench-aside")
	local, pulled, cold := &resumeSide{}, &resumeSide{}, &resumeSide{}
	round := func(side string) error {
		s := map[string]*resumeSide{"local": local, "registry": pulled, "cold": cold}[side]
		if side == "registry" {
			if err := os.Rename(entry, aside); err != nil {
				return err
			}
			defer os.Rename(aside, entry)
		}
		start := time.Now()
		req := types.CreateInstanceRequest{Checkpoint: cp.ID, TTL: "1h"}
		if side == "cold" {
			req = types.CreateInstanceRequest{Version: cp.Version, TTL: "1h"}
		}
		in, err := b.c.CreateInstance(ctx, project, req)
		if err != nil {
			return err
		}
		defer b.remove(context.WithoutCancel(ctx), b.c, in.ID)
		created := time.Since(start)
		if side == "cold" {
			if _, err := sh(ctx, b.c, in.ID, serverCmd); err != nil {
				return err
			}
		}
		answered, err := b.firstAnswer(ctx, in.ID, start)
		if err != nil {
			return err
		}
		s.create, s.answer = append(s.create, created), append(s.answer, answered)
		s.steps = append(s.steps, startSteps.get(in.ID))
		logf("%s: created %s, first answer %s", side, seconds(created), seconds(answered))
		return nil
	}
	// An untimed resume first: the version's image and the first start's
	// costs of the node.
	if err := round("local"); err != nil {
		return err
	}
	*local = resumeSide{}
	orders := [][]string{{"local", "registry", "cold"}, {"cold", "local", "registry"}, {"registry", "cold", "local"}}
	for r := 0; r < max(cfg.runs, 1); r++ {
		for _, side := range orders[r%len(orders)] {
			if err := round(side); err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, side, err)
			}
		}
	}
	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "Load average (1, 5, 15 min) before: %s; after: %s.\n\n", load0, loadAvg())
	fmt.Fprintf(&w, "Busybox base, project of class gvisor. The dev server: `%s` (its start: the MD5 of %d MiB from /dev/urandom, then busybox httpd). Checkpoint %d with memory (image %s MB) of an instance running it; then %d round(s), order rotated: resume of the checkpoint on the same node from the node's local copy of the image; the same resume with the local copy set aside (the image pulled from the registry); a cold start of the checkpoint's version plus the server's start. Timed from the create request to the first 200 of GET / on port 8080 through the node's port proxy (polled every 10 ms). Steps: the node's own (medians): memory image made local, the rest of the provisioning (volumes, version image, files), container (snapshot, spec), network, task creation, task start (runsc's restore of a memory image happens here: the runc shim restores at the start).\n\n",
		fmt.Sprintf(devServer, devServerMiB<<20), devServerMiB, cp.ID, megabytes(cp.Memory.Bytes), max(cfg.runs, 1))
	var cells [][]string
	for _, x := range []struct {
		name string
		s    *resumeSide
	}{{"resume, local copy", local}, {"resume, pulled from the registry", pulled}, {"cold start + server start", cold}} {
		step := func(k string) string {
			var ds []time.Duration
			for _, st := range x.s.steps {
				if v, ok := st[k]; ok {
					ds = append(ds, msD(v))
				}
			}
			if len(ds) == 0 {
				return "—"
			}
			return ms3(median(ds))
		}
		cells = append(cells, []string{x.name, fmt.Sprint(len(x.s.answer)), step("memory"), step("other"), step("container"), step("network"),
			step("task"), step("start"), seconds(median(x.s.create)), seconds(median(x.s.answer)), seconds(percentile(x.s.answer, 1))})
	}
	mdTable(&w, []string{"side", "rounds", "memory image", "other", "container", "network", "task create", "task start (restore)", "create call p50", "first answer p50", "max"}, 1, cells)
	met := "not met"
	if median(local.answer) <= 500*time.Millisecond {
		met = "met"
	}
	fmt.Fprintf(&w, "\n- Target (same-node resume to the first answer within 0.5 s): %s in this run (median %s; cold start + server start %s, %s).\n",
		met, seconds(median(local.answer)), seconds(median(cold.answer)), ratioX(median(cold.answer), median(local.answer)))
	fmt.Fprintf(&w, "- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err = out.Write(w.Bytes())
	return err
}

// firstAnswer polls GET / of port 8080 of instance id through the node's
// port proxy every 10 ms until a 200 and returns the time since start.
func (b *bed) firstAnswer(ctx context.Context, id string, start time.Time) (time.Duration, error) {
	deadline := time.Now().Add(2 * time.Minute)
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.primary.URL+"/v1/instances/"+id+"/ports/8080/", nil)
		if err != nil {
			return 0, err
		}
		req.Header.Set("Authorization", "Bearer "+b.primary.Token)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Since(start), nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(body))
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("instance %s: no answer on port 8080 within 2 minutes (last: %s)", id, last)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// forkCopySteps writes the fork-memory scenario's per-copy table: the
// node's steps of each copy's start, the copies of each fork ordered by
// their provisioning time, medians over the forks.
func forkCopySteps(w io.Writer, forks [][]string) {
	if len(forks) == 0 {
		return
	}
	keys := []string{"other", "container", "network", "task", "start", "warm", "provision"}
	byRank := make([]map[string][]time.Duration, forkCopies)
	for i := range byRank {
		byRank[i] = map[string][]time.Duration{}
	}
	for _, ids := range forks {
		var steps []map[string]int64
		for _, id := range ids {
			if st := startSteps.get(id); st != nil {
				steps = append(steps, st)
			}
		}
		slices.SortFunc(steps, func(a, b map[string]int64) int { return int(a["provision"] - b["provision"]) })
		for i, st := range steps {
			if i >= forkCopies {
				break
			}
			for _, k := range keys {
				byRank[i][k] = append(byRank[i][k], msD(st[k]))
			}
		}
	}
	var cells [][]string
	for i, m := range byRank {
		row := []string{fmt.Sprintf("copy %d", i+1)}
		for _, k := range keys {
			row = append(row, ms3(median(m[k])))
		}
		cells = append(cells, row)
	}
	fmt.Fprintf(w, "\nPer copy of the fork (the node's steps of each copy's start; the copies of each fork ordered by provisioning time, medians over %d fork(s)): other (volumes, version image, files), container (snapshot, spec), network, task creation, task start (runsc's restore of the local image), warm; provision is the start to Running.\n\n", len(forks))
	mdTable(w, []string{"copy", "other", "container", "network", "task create", "task start (restore)", "warm", "provision"}, 1, cells)
}
