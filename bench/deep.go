package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/envd-dev/envd/envd/node"
)

// deepRow is one project's measurements in the deep scenario.
type deepRow struct {
	side         string
	saves        int // saves in the project's history
	layers       int // layers of the current version when measured
	squashWait   time.Duration
	history      time.Duration // making the history
	push, total  []time.Duration
	create, cmd1 []time.Duration
}

// runDeep is the deep scenario: on a busybox base, projects with a 3-save
// and a cfg.deepSaves history (one instance per save, so each save adds a
// layer), on a node that squashes versions deeper than
// node.DefaultSquashAfter and on one that does not. Measured on each
// project's current version: saves of a one-file change (cfg.runs from one
// instance, so the depth stays) and cold lazy restores on a joining node
// (cfg.runs) with `cat /home/f1` as the first command.
func runDeep(ctx context.Context, cfg config, out io.Writer) error {
	started := time.Now()
	sides := []struct {
		name   string
		squash int
	}{{"no squash", 0}, {fmt.Sprintf("squash past %d layers", node.DefaultSquashAfter), node.DefaultSquashAfter}}
	var rows []deepRow
	for i, side := range sides {
		c := cfg
		c.squashAfter = side.squash
		r, err := deepSide(ctx, c, fmt.Sprintf("deep-%d", i), side.name)
		if err != nil {
			return fmt.Errorf("%s: %w", side.name, err)
		}
		rows = append(rows, r...)
	}

	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "Busybox base (1 layer). A history of N saves: N times `up`, write `/home/fN`, save, `rm`, each save one more layer. "+
		"Then on the current version: %d saves of a one-file change from one instance (repeated saves replace their layer, so the depth stays) and %d cold lazy restores on a joining node, first command `cat /home/f1`. Medians.\n\n", cfg.runs, cfg.runs)
	var cells [][]string
	for _, r := range rows {
		cells = append(cells, []string{r.side, fmt.Sprint(r.saves), fmt.Sprint(r.layers), seconds(r.history), seconds(r.squashWait),
			seconds(median(r.push)), seconds(median(r.total)), seconds(median(r.create)), seconds(median(r.create) + median(r.cmd1))})
	}
	mdTable(&w, []string{"node", "saves in history", "layers when measured", "history made in", "squash caught up after",
		"save push + verify", "save total", "restore create", "time to first command"}, 1, cells)
	fmt.Fprintln(&w)
	for i := 0; i+1 < len(rows); i += 2 {
		shallow, deep := rows[i], rows[i+1]
		fmt.Fprintf(&w, "- %s: %d saves against 3: save total %s, time to first command %s (ratio deep/shallow; 1.0× = flat).\n", deep.side, deep.saves,
			ratio(median(deep.total), median(shallow.total)), ratio(median(deep.create)+median(deep.cmd1), median(shallow.create)+median(shallow.cmd1)))
	}
	fmt.Fprintf(&w, "- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err := out.Write(w.Bytes())
	return err
}

// deepSide runs one node's half of the deep scenario.
func deepSide(ctx context.Context, cfg config, dir, side string) (rows []deepRow, rErr error) {
	b, err := busyboxBed(ctx, cfg, dir)
	defer b.closeInto(&rErr)
	if err != nil {
		return nil, err
	}
	for _, n := range []int{3, cfg.deepSaves} {
		p := fmt.Sprintf("deep-%d", n)
		if err := b.project(ctx, p, "estargz"); err != nil {
			return nil, err
		}
		r := deepRow{side: side, saves: n}
		start := time.Now()
		for i := 1; i <= n; i++ {
			if _, _, _, err := b.makeVersion(ctx, p, fmt.Sprintf("echo %d > /home/f%d", i, i), fmt.Sprintf("save %d", i)); err != nil {
				return nil, fmt.Errorf("%s save %d: %w", p, i, err)
			}
			if i%50 == 0 {
				logf("deep: %s: %s: %d saves", side, p, i)
			}
		}
		r.history = time.Since(start)
		// The squash runs in the background: measure once it caught up.
		start = time.Now()
		for {
			proj, err := b.c.GetProject(ctx, p)
			if err != nil {
				return nil, err
			}
			v, err := b.c.GetVersion(ctx, p, proj.Current)
			if err != nil {
				return nil, err
			}
			r.layers = v.Layers
			if cfg.squashAfter == 0 || v.Layers <= cfg.squashAfter+1 {
				break
			}
			if time.Since(start) > 10*time.Minute {
				return nil, fmt.Errorf("%s: version %d still has %d layers after %s", p, v.Number, v.Layers, time.Since(start))
			}
			time.Sleep(time.Second)
		}
		r.squashWait = time.Since(start)
		if cfg.squashAfter == 0 {
			r.squashWait = 0
		}

		in, err := b.up(ctx, p, 0)
		if err != nil {
			return nil, err
		}
		for i := 0; i < cfg.runs; i++ {
			if _, err := sh(ctx, b.c, in.ID, fmt.Sprintf("echo run %d > /home/change", i)); err != nil {
				return nil, err
			}
			res, err := b.save(ctx, in.ID, fmt.Sprintf("measured save %d", i))
			if err != nil {
				return nil, err
			}
			r.push = append(r.push, time.Duration(res.PushMS)*time.Millisecond)
			r.total = append(r.total, time.Duration(res.TotalMS)*time.Millisecond)
		}
		b.remove(ctx, b.c, in.ID)
		proj, err := b.c.GetProject(ctx, p)
		if err != nil {
			return nil, err
		}
		for i := 0; i < cfg.runs; i++ {
			rr, err := b.coldRestore(ctx, p, proj.Current, []string{"cat /home/f1"})
			if err != nil {
				return nil, err
			}
			r.create = append(r.create, rr.Create)
			r.cmd1 = append(r.cmd1, rr.Cmds[0])
		}
		logf("deep: %s: %s: %d layers, save total %s, first command %s", side, p, r.layers, seconds(median(r.total)), seconds(median(r.create)+median(r.cmd1)))
		rows = append(rows, r)
	}
	return rows, nil
}
