package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/envd-dev/envd/api/types"
	envdclient "github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
)

// runResumeLazy is the resume-lazy scenario (issue 25, item 6): for
// each size, a gVisor instance counting in a shell loop and holding that
// many MiB of random bytes in a process (tac) is checkpointed with its memory, removed, and its
// checkpoint resumed cfg.runs times on each of two joining nodes, one
// pulling the memory image whole before the restore (full), one restoring
// at once from the image served as it is read (lazy); sides alternated.
// Timed: the resume request to the first answer of an exec in it. Both
// nodes pulled the version's layers in an untimed resume first; the memory
// image is never local on them (each resume fetches it from the registry
// anew). -registry-rtt puts a delay in front of the registry for both.
func runResumeLazy(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	started := time.Now()
	load0 := loadAvg()
	const project = "resumelazy"
	b, err := gvisorBed(ctx, cfg, project)
	defer b.closeInto(&rErr)
	if err != nil {
		return err
	}
	nodeCred, _ := b.primary.RegistryCredentialFiles()
	regAddr, err := b.joinRegistry()
	if err != nil {
		return err
	}
	clients := map[string]*envdclient.Client{}
	for _, mode := range []string{envd.MemoryRestoreFull, envd.MemoryRestoreLazy} {
		dir := filepath.Join(b.dir, "resume-"+mode)
		jn, err := node.Start(ctx, node.Config{DataDir: dir, DSN: b.primary.DSN(), Registry: regAddr, RegistryCredentialFile: nodeCred,
			DefaultTTL: 2 * time.Hour, Logger: b.log, RuntimeClass: "gvisor", MemoryRestore: mode, Placement: envd.PlacementLocal})
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
			defer cancel()
			if jn != nil {
				jn.Shutdown(sctx)
			}
			if err := removeDataDir(dir); err != nil {
				rErr = errors.Join(rErr, err)
			}
		}()
		if err != nil {
			return fmt.Errorf("start the %s node: %w", mode, err)
		}
		if clients[mode], err = envdclient.New(jn.URL, jn.Token); err != nil {
			return err
		}
	}
	// resume resumes checkpoint cp on mode's node and returns the time to
	// the first answer of an exec.
	resume := func(mode string, cp int) (time.Duration, error) {
		c := clients[mode]
		start := time.Now()
		in, err := c.CreateInstance(ctx, project, types.CreateInstanceRequest{Checkpoint: cp, TTL: "1h"})
		if err != nil {
			return 0, fmt.Errorf("resume on the %s node: %w", mode, err)
		}
		defer b.remove(context.WithoutCancel(ctx), c, in.ID)
		n, err := sh(ctx, c, in.ID, "cat /root/count")
		took := time.Since(start)
		if err != nil {
			return 0, err
		}
		if n == "" {
			return 0, fmt.Errorf("resume on the %s node: the counter is gone", mode)
		}
		return took, nil
	}
	type row struct {
		mib        int
		imageBytes int64
		full, lazy []time.Duration
		failed     map[string]int // resumes that failed, per side
	}
	var rows []row
	for _, mib := range cfg.resumeMiB {
		in, err := b.c.CreateInstance(ctx, project, types.CreateInstanceRequest{TTL: "2h"})
		if err != nil {
			return err
		}
		// The bytes are written before the counter starts, and the
		// counter has counted before the checkpoint.
		// tac holds its whole input in memory until the input ends,
		// which the sleep holds off: N MiB resident in a process (the
		// instance's /dev/shm is a 64 MiB tmpfs).
		script := fmt.Sprintf(`((dd if=/dev/urandom bs=1M count=%d 2>/dev/null; echo; echo filled > /root/filled; sleep 100000) | tac >/dev/null) </dev/null >/dev/null 2>&1 &
while [ ! -e /root/filled ]; do sleep 0.1; done
(i=0; while :; do i=$((i+1)); echo $i > /root/count.tmp; mv /root/count.tmp /root/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 &
while [ ! -s /root/count ]; do sleep 0.1; done`, mib)
		if _, err := sh(ctx, b.c, in.ID, script); err != nil {
			b.remove(context.WithoutCancel(ctx), b.c, in.ID)
			return err
		}
		op, err := b.c.Checkpoint(ctx, in.ID, types.CheckpointRequest{Message: fmt.Sprintf("%d MiB", mib), Memory: true})
		if err == nil {
			op, err = b.c.WaitOperation(ctx, op.ID, nil)
		}
		b.remove(context.WithoutCancel(ctx), b.c, in.ID)
		if err != nil {
			return err
		}
		if op.State != types.OpSucceeded {
			return fmt.Errorf("checkpoint of %d MiB: %+v", mib, op.Error)
		}
		var res types.CheckpointResult
		if err := json.Unmarshal(op.Result, &res); err != nil {
			return err
		}
		cp := res.Checkpoint
		r := row{mib: mib, failed: map[string]int{}}
		if cp.Memory != nil {
			r.imageBytes = cp.Memory.Bytes
		}
		if len(rows) == 0 {
			// The version's layers onto both nodes, untimed.
			for _, mode := range []string{envd.MemoryRestoreFull, envd.MemoryRestoreLazy} {
				if _, err := resume(mode, cp.ID); err != nil {
					return err
				}
			}
		}
		for i := 0; i < max(b.cfg.runs, 1); i++ {
			sides := []string{envd.MemoryRestoreFull, envd.MemoryRestoreLazy}
			if i%2 == 1 {
				sides = []string{envd.MemoryRestoreLazy, envd.MemoryRestoreFull}
			}
			for _, mode := range sides {
				d, err := resume(mode, cp.ID)
				if err != nil {
					// Counted and shown: on a machine this busy a resume
					// of either side may fail; the others still say
					// something.
					r.failed[mode]++
					logf("%d MiB round %d %s: failed: %v", mib, i+1, mode, err)
					continue
				}
				if mode == envd.MemoryRestoreFull {
					r.full = append(r.full, d)
				} else {
					r.lazy = append(r.lazy, d)
				}
				logf("%d MiB round %d %s: first answer %s", mib, i+1, mode, seconds(d))
			}
		}
		rows = append(rows, r)
	}
	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "Load average (1, 5, 15 min) before: %s; after: %s.\n\n", load0, loadAvg())
	fmt.Fprintf(&w, "Busybox base, project of class gvisor; the instance counts in a shell loop and holds N MiB of random bytes in a process (tac reading them, sandbox memory). Checkpointed with memory, removed, resumed %d time(s) per side on two joining nodes (memory restore full: pull whole, then restore; lazy: restore at once from a FUSE file of the registry's chunks, runsc --background), sides alternated; timed from the resume request to the first answer of an exec. Both nodes hold the version's layers; the memory image is fetched from the registry at every resume.\n\n", max(b.cfg.runs, 1))
	var cells [][]string
	for _, r := range rows {
		cells = append(cells, []string{fmt.Sprintf("%d MiB", r.mib), megabytes(r.imageBytes),
			fmt.Sprintf("%s (%d)", seconds(median(r.full)), len(r.full)), fmt.Sprintf("%s (%d)", seconds(median(r.lazy)), len(r.lazy)),
			ratioX(median(r.lazy), median(r.full)), fmt.Sprintf("%d / %d", r.failed[envd.MemoryRestoreFull], r.failed[envd.MemoryRestoreLazy])})
	}
	mdTable(&w, []string{"resident", "memory image MB", "full pull p50 (n)", "lazy p50 (n)", "lazy / full", "failed full / lazy"}, 1, cells)
	fmt.Fprintf(&w, "\n- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err = out.Write(w.Bytes())
	return err
}
