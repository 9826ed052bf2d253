package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/envd-dev/envd/api/types"
)

// The sides of the pool scenario.
const (
	poolRunning = "pooled (kept running)"
	poolPaused  = "pooled, paused variant"
	poolCold    = "cold (no pool)"
)

// poolSide is one side of the pool scenario: its samples.
type poolSide struct {
	running, first, exec1, exec2 []time.Duration
	claimed                      int
}

// runPool is the pool scenario (issue 15, item 2): `up` of a busybox
// version to a Running instance and to its first command's answer, from a
// project with a warm pool of 4 and from one without (cfg.runs × 10
// rounds, the sides' order rotated every round). The paused variant is
// measured, not a mode of envd: it claims from the same pool, pauses the
// claimed task (untimed) and times the resume a claim of a paused pooled
// instance would add. After each round the pool gets 3 s to refill, as a
// user's next `up` would.
func runPool(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	started := time.Now()
	load0 := loadAvg()
	b, err := busyboxBed(ctx, cfg, "pool")
	defer b.closeInto(&rErr)
	if err != nil {
		return err
	}
	for _, p := range []string{"pooled", "cold"} {
		if err := b.project(ctx, p, "estargz"); err != nil {
			return err
		}
	}
	const poolSize = 4
	if _, err := b.c.SetProjectPool(ctx, "pooled", types.PoolSetting{Size: poolSize}); err != nil {
		return err
	}
	time.Sleep(15 * time.Second) // the first fill
	names := []string{poolRunning, poolPaused, poolCold}
	sides := map[string]*poolSide{}
	for _, n := range names {
		sides[n] = &poolSide{}
	}
	rt := b.primary.Runtime()
	rounds := cfg.runs * 10
	for r := 0; r < rounds; r++ {
		for i := range names {
			name := names[(r+i)%len(names)]
			s := sides[name]
			project := "pooled"
			if name == poolCold {
				project = "cold"
			}
			start := time.Now()
			in, err := b.c.CreateInstance(ctx, project, types.CreateInstanceRequest{TTL: "1h"})
			if err != nil {
				return err
			}
			running := time.Since(start)
			if name == poolPaused {
				if err := rt.Pause(ctx, in.ID); err != nil {
					return err
				}
				t := time.Now()
				if err := rt.Resume(ctx, in.ID); err != nil {
					return err
				}
				running += time.Since(t)
				start = time.Now().Add(-running)
			}
			s.running = append(s.running, running)
			if _, err := sh(ctx, b.c, in.ID, "true"); err != nil {
				return err
			}
			first := time.Since(start)
			s.first = append(s.first, first)
			s.exec1 = append(s.exec1, first-running)
			t := time.Now()
			if _, err := sh(ctx, b.c, in.ID, "true"); err != nil {
				return err
			}
			s.exec2 = append(s.exec2, time.Since(t))
			if in.Message == "claimed from the pool" {
				s.claimed++
			}
			b.remove(ctx, b.c, in.ID)
		}
		time.Sleep(3 * time.Second) // the pool refills (1 s after the last claim)
	}
	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "Load average (1, 5, 15 min) before: %s; after: %s.\n\n", load0, loadAvg())
	fmt.Fprintf(&w, "Busybox base; project `pooled` with `pool: {size: %d}`, project `cold` without. %d rounds, the sides' order rotated every round; each: `up` (Go client, TTL 1h), then a buffered `exec sh -c true` twice, then `rm`; 3 s after each round for the pool to refill. The paused variant claims from the same pool, pauses the task (untimed) and resumes it (timed, added to up to Running): what a pool kept paused would add to a claim.\n\n", poolSize, rounds)
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/1e6) }
	var cells [][]string
	for _, n := range names {
		s := sides[n]
		cells = append(cells, []string{n, fmt.Sprintf("%d of %d", s.claimed, len(s.running)),
			ms(median(s.running)), ms(percentile(s.running, 0.99)),
			ms(median(s.first)), ms(percentile(s.first, 0.99)),
			ms(median(s.exec1)), ms(median(s.exec2))})
	}
	mdTable(&w, []string{"side", "claimed from the pool", "up to Running p50", "p99", "up to first command p50", "p99", "first exec p50", "second exec p50"}, 1, cells)
	fmt.Fprintf(&w, "\n- up to first command p50, cold / pooled: %s; paused variant / pooled: %s.\n",
		ratioX(median(sides[poolCold].first), median(sides[poolRunning].first)),
		ratioX(median(sides[poolPaused].first), median(sides[poolRunning].first)))
	met := "not met"
	if median(sides[poolRunning].first) < 100*time.Millisecond {
		met = "met"
	}
	fmt.Fprintf(&w, "- Target (pooled `up` to the first command's answer, p50 under 100 ms): %s in this run.\n", met)
	fmt.Fprintf(&w, "- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err = out.Write(w.Bytes())
	return err
}

// busyboxBed starts a bed (a primary node) on a busybox base made from
// Debian's busybox-static, with its data under cfg.work/name; the caller
// closes it (also on error).
func busyboxBed(ctx context.Context, cfg config, name string) (*bed, error) {
	rootfs := filepath.Join(cfg.work, "rootfs-busybox")
	if o, err := exec.CommandContext(ctx, "bash", "scripts/busybox-rootfs.sh", rootfs).CombinedOutput(); err != nil {
		return &bed{dir: filepath.Join(cfg.work, name, "nodes")}, fmt.Errorf("busybox rootfs (run from the repository's root): %v: %s", err, o)
	}
	cfg.rootfs, cfg.work = rootfs, filepath.Join(cfg.work, name)
	return startBed(ctx, cfg)
}
