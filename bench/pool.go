package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/envd-dev/envd/api/types"
)

// runPool is the pool scenario (issue 15, item 2): `up` of a busybox
// version to a Running instance and to its first command's answer, from a
// project with a warm pool of 3 and from one without, alternated
// (cfg.runs × 10 rounds); after each pooled claim the pool is given time to
// refill, as a user's next `up` would.
func runPool(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	started := time.Now()
	b, err := busyboxBed(ctx, cfg, "pool")
	defer func() {
		if cerr := b.close(); cerr != nil {
			rErr = errors.Join(rErr, cerr)
		}
	}()
	if err != nil {
		return err
	}
	for _, p := range []string{"pooled", "cold"} {
		if err := b.project(ctx, p, "estargz"); err != nil {
			return err
		}
	}
	if _, err := b.c.SetProjectPool(ctx, "pooled", types.PoolSetting{Size: 3}); err != nil {
		return err
	}
	time.Sleep(10 * time.Second) // the first fill
	type side struct {
		running, first []time.Duration
		claimed        int
	}
	sides := map[string]*side{"pooled": {}, "cold": {}}
	rounds := cfg.runs * 10
	for r := 0; r < rounds; r++ {
		order := []string{"pooled", "cold"}
		if r%2 == 1 {
			order = []string{"cold", "pooled"}
		}
		for _, p := range order {
			s := sides[p]
			start := time.Now()
			in, err := b.c.CreateInstance(ctx, p, types.CreateInstanceRequest{TTL: "1h"})
			if err != nil {
				return err
			}
			s.running = append(s.running, time.Since(start))
			if _, err := sh(ctx, b.c, in.ID, "true"); err != nil {
				return err
			}
			s.first = append(s.first, time.Since(start))
			if in.Message == "claimed from the pool" {
				s.claimed++
			}
			b.remove(ctx, b.c, in.ID)
		}
		time.Sleep(3 * time.Second) // the pool refills (every 2 s, and after each claim)
	}
	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "Busybox base; project `pooled` with `pool: {size: 3}`, project `cold` without. %d rounds, the two alternated; each: `up` (Go client, TTL 1h), then `exec true`, then `rm`, then 3 s for the pool to refill.\n\n", rounds)
	var cells [][]string
	for _, p := range []string{"pooled", "cold"} {
		s := sides[p]
		cells = append(cells, []string{p, fmt.Sprintf("%d of %d", s.claimed, len(s.running)),
			fmt.Sprintf("%.0f ms", float64(median(s.running))/1e6), fmt.Sprintf("%.0f ms", float64(percentile(s.running, 0.99))/1e6),
			fmt.Sprintf("%.0f ms", float64(median(s.first))/1e6), fmt.Sprintf("%.0f ms", float64(percentile(s.first, 0.99))/1e6)})
	}
	mdTable(&w, []string{"project", "claimed from the pool", "up to Running p50", "p99", "up to first command p50", "p99"}, 1, cells)
	fmt.Fprintf(&w, "\n- up to first command, cold / pooled (p50): %s.\n", ratio(median(sides["cold"].first), median(sides["pooled"].first)))
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
