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
	"github.com/envd-dev/envd/envd/node"
)

// benchDiskLimit is the writable-layer limit of the limited variants: the
// default of `envd up`.
const benchDiskLimit = 10 << 30

// runDiskLimit is the disklimit scenario: the cost of the writable-layer
// size limit (a per-instance ext4 image, runtime/disklimit.go) against a
// plain upper dir, in one run. Save: the same change, made in one instance
// per variant (the plain one on the primary node, the limited one on a
// joining node with a default disk limit), saved -runs times each,
// alternating. Lazy restore: one version restored -runs times on fresh
// joining nodes with and without the limit, alternating; time to first
// command is create (lazy mount + mkfs + start) plus a first command that
// reads a file of the change.
func runDiskLimit(ctx context.Context, b *bed, out io.Writer) (rErr error) {
	started := time.Now()
	script := smallFilesScript("/data/small", 10000, 7) + " && " + bigFileScript("/data/big.bin", 1)
	readCmd := "cat /data/small/00/f00000.txt | cksum"

	dir := filepath.Join(b.dir, "disk-limited")
	ln, err := node.Start(ctx, node.Config{DataDir: dir, DSN: b.primary.DSN(), Registry: b.primary.RegistryAddr(),
		DefaultTTL: 2 * time.Hour, Logger: b.log, DefaultLimits: types.Limits{DiskBytes: benchDiskLimit}})
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
		defer cancel()
		if ln != nil {
			ln.Shutdown(sctx)
		}
		if err := removeDataDir(dir); err != nil {
			rErr = errors.Join(rErr, err)
		}
	}()
	if err != nil {
		return fmt.Errorf("start the limited node: %w", err)
	}
	if err := ln.Runtime().DiskLimitErr(); err != nil {
		return err
	}
	lc, err := envdclient.New(ln.URL, ln.Token)
	if err != nil {
		return err
	}

	type variant struct {
		name    string
		c       *envdclient.Client
		project string
		id      string
		saves   []types.SaveResult
		limits  types.Limits
		rr      []restoreRun
		genOut  string
	}
	vs := []*variant{
		{name: "plain upper dir", c: b.c, project: "dl-plain"},
		{name: "ext4 image (10 GiB limit)", c: lc, project: "dl-image", limits: types.Limits{DiskBytes: benchDiskLimit}},
	}
	for _, v := range vs {
		if err := b.project(ctx, v.project, "estargz"); err != nil {
			return err
		}
		in, err := v.c.CreateInstance(ctx, v.project, types.CreateInstanceRequest{TTL: "2h"})
		if err != nil {
			return fmt.Errorf("instance of %s: %w", v.project, err)
		}
		defer b.remove(context.WithoutCancel(ctx), v.c, in.ID)
		v.id = in.ID
		if v.genOut, err = sh(ctx, v.c, in.ID, script); err != nil {
			return err
		}
		logf("disklimit: %s: change made (%s)", v.name, oneLine(v.genOut, 60))
	}
	if u, err := ln.Runtime().DiskUsage(vs[1].id); err != nil || u.LimitBytes != benchDiskLimit {
		return fmt.Errorf("the limited instance has no disk image (%+v, %v)", u, err)
	}

	for i := 0; i < b.cfg.runs; i++ {
		order := []*variant{vs[0], vs[1]}
		if i%2 == 1 {
			order = []*variant{vs[1], vs[0]}
		}
		for _, v := range order {
			res, err := b.saveWith(ctx, v.c, v.id, fmt.Sprintf("run %d", i+1))
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			v.saves = append(v.saves, res)
		}
	}
	version := vs[0].saves[len(vs[0].saves)-1].Version
	for i := 0; i < b.cfg.runs; i++ {
		order := []*variant{vs[0], vs[1]}
		if i%2 == 1 {
			order = []*variant{vs[1], vs[0]}
		}
		for _, v := range order {
			r, err := b.coldRestoreWith(ctx, vs[0].project, version, []string{readCmd}, false, v.limits)
			if err != nil {
				return fmt.Errorf("%s restore: %w", v.name, err)
			}
			v.rr = append(v.rr, r)
		}
	}

	type med struct{ total, spool, freeze, create, first, ttfc time.Duration }
	meds := make([]med, len(vs))
	for j, v := range vs {
		var to, sp, fr, cr, fi, tt []int64
		for _, s := range v.saves {
			to, sp, fr = append(to, s.TotalMS), append(sp, s.SpoolMS), append(fr, s.FreezeMS)
		}
		for _, r := range v.rr {
			cr, fi, tt = append(cr, int64(r.Create)), append(fi, int64(r.Cmds[0])), append(tt, int64(r.firstCommand()))
		}
		ms := func(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
		meds[j] = med{ms(medianInt(to)), ms(medianInt(sp)), ms(medianInt(fr)),
			time.Duration(medianInt(cr)), time.Duration(medianInt(fi)), time.Duration(medianInt(tt))}
	}

	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "Change (the same in both variants, one instance each, made once): `%s` (output `%s`).\n\n", oneLine(script, 160), oneLine(vs[0].genOut, 60))
	fmt.Fprintf(&w, "Save: each instance saved %d times (eStargz), alternating which goes first; every save re-reads the whole upper dir (warm page cache). "+
		"Plain: the primary node, layer in the stargz snapshotter's directory. Image: a joining node with `DefaultLimits.DiskBytes` = 10 GiB, "+
		"layer on a sparse ext4 image loop-mounted (direct IO, discard) over the snapshot's directory.\n\n", b.cfg.runs)
	fmt.Fprintf(&w, "Lazy restore: version %d of %s restored %d times per variant on fresh joining nodes with and without the limit, alternating; "+
		"first command `%s`.\n\n", version, vs[0].project, b.cfg.runs, readCmd)
	var cells [][]string
	for j, v := range vs {
		m := meds[j]
		cells = append(cells, []string{v.name, seconds(m.freeze), seconds(m.spool), seconds(m.total),
			seconds(m.create), seconds(m.first), seconds(m.ttfc)})
	}
	p, l := meds[0], meds[1]
	cells = append(cells, []string{"ratio image / plain", rat(l.freeze, p.freeze), rat(l.spool, p.spool), rat(l.total, p.total),
		rat(l.create, p.create), rat(l.first, p.first), rat(l.ttfc, p.ttfc)})
	mdTable(&w, []string{"writable layer", "save freeze window", "save spool", "save total", "restore create", "first command", "time to first command"}, 1, cells)
	fmt.Fprintln(&w)
	fmt.Fprintf(&w, "- Medians of %d runs each. Save columns are the save operation's result fields; restore create is CreateInstance (lazy mount, and for the image mkfs.ext4 + loop mount, then start).\n", b.cfg.runs)
	for _, v := range vs {
		var tt []string
		for _, r := range v.rr {
			tt = append(tt, seconds(r.firstCommand()))
		}
		var st []string
		for _, s := range v.saves {
			st = append(st, ms(s.TotalMS))
		}
		fmt.Fprintf(&w, "- %s: save totals %v; times to first command %v.\n", v.name, st, tt)
	}
	fmt.Fprintf(&w, "- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err = out.Write(w.Bytes())
	return err
}

// rat formats a/b as "1.03×"; "—" when either is unknown.
func rat(a, b time.Duration) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a.Seconds()/b.Seconds())
}

// saveWith saves the instance through client c and waits for the result.
func (b *bed) saveWith(ctx context.Context, c *envdclient.Client, id, msg string) (types.SaveResult, error) {
	var res types.SaveResult
	if b.cfg.prefault {
		if _, err := prefault(b.dir, 512<<20); err != nil {
			return res, err
		}
	}
	op, err := c.Save(ctx, id, types.SaveRequest{Message: msg}, "")
	if err != nil {
		return res, fmt.Errorf("save %s: %w", id, err)
	}
	op, err = c.WaitOperation(ctx, op.ID, nil)
	if err != nil {
		return res, fmt.Errorf("wait for save %s: %w", op.ID, err)
	}
	if op.State != types.OpSucceeded {
		return res, fmt.Errorf("save operation %s of %s: %s: %+v", op.ID, id, op.State, op.Error)
	}
	if err := json.Unmarshal(op.Result, &res); err != nil {
		return res, fmt.Errorf("save result: %w", err)
	}
	logf("saved %s -> %s v%d: freeze %s, spool %s, encode %s, push %s, total %s, layer %s MB",
		id, res.Project, res.Version, ms(res.FreezeMS), ms(res.SpoolMS), ms(res.EncodeMS), ms(res.PushMS), ms(res.TotalMS), megabytes(res.LayerBytes))
	return res, nil
}
