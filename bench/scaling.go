package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"
)

// changeScript adds about mb MB (10^6 bytes) under dir as files of 1 MB:
// base64 of /dev/urandom, so text that compresses to about 3/4.
func changeScript(dir string, mb int) string {
	return fmt.Sprintf(`mkdir -p %[1]s && head -c %[2]d /dev/urandom | base64 -w 76 | split -b 1000000 -a 4 - %[1]s/f && du -sb %[1]s | cut -f1`,
		dir, mb*1000000/77*57)
}

// scalingPoint is one measured save + lazy restore.
type scalingPoint struct {
	axis       string
	changeMB   int
	extraMB    int // extra layers saved before the change
	extraSaves int
	gen        time.Duration
	save       saveRow
	rr         restoreRun
}

// runScaling is the scaling scenario: save and lazy restore of a change of
// 10, 100 and 500 MB on the base image, and of a 100 MB change on images
// with 200 and 600 MB of extra layers (one and three earlier saves of 200
// MB); the 100 MB change on the base is the 0 MB point of that axis.
func runScaling(ctx context.Context, b *bed, out io.Writer) error {
	started := time.Now()
	const fixedChange = 100
	type spec struct {
		axis     string
		changeMB int
		extraMB  int
	}
	specs := []spec{
		{"change size", 10, 0}, {"change size", fixedChange, 0}, {"change size", 500, 0},
		{"image size", fixedChange, 200}, {"image size", fixedChange, 600},
	}
	var pts []scalingPoint
	for i, s := range specs {
		p := fmt.Sprintf("scale-%d-chg%d-img%d", i, s.changeMB, s.extraMB)
		if err := b.project(ctx, p, "estargz"); err != nil {
			return err
		}
		pt := scalingPoint{axis: s.axis, changeMB: s.changeMB, extraMB: s.extraMB}
		for k := 0; k < s.extraMB/200; k++ {
			logf("scaling: %s: extra layer %d (200 MB)", p, k+1)
			if _, _, _, err := b.makeVersion(ctx, p, changeScript(fmt.Sprintf("/data/extra%d", k), 200), "extra 200 MB"); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			pt.extraSaves++
		}
		logf("scaling: %s: change of %d MB", p, s.changeMB)
		_, gen, res, err := b.makeVersion(ctx, p, changeScript("/data/change", s.changeMB), fmt.Sprintf("change %d MB", s.changeMB))
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		pt.gen = gen
		pt.save = saveRow{Res: res}
		if pt.rr, err = b.coldRestore(ctx, p, res.Version, []string{"cat /data/change/faaaa | cksum"}); err != nil {
			return fmt.Errorf("%s restore: %w", p, err)
		}
		pts = append(pts, pt)
	}

	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "eStargz projects on the Debian base. A change is `%s` (shown for %d MB; N MB of base64 text in 1 MB files, compresses to about 3/4) made in an instance and saved through the API; "+
		"the saved version is then restored once on a fresh joining node (lazy, stargz snapshotter) and the first command is `cat /data/change/faaaa | cksum` (one 1 MB file of the change). "+
		"Image size: before the %d MB change, 200 MB changes were saved as versions one after the other (one instance each), so the restored image has that many more eStargz layers. "+
		"One run per point; the image-size 0 MB point is the change-size %d MB row.\n\n",
		oneLine(changeScript("/data/change", fixedChange), 200), fixedChange, fixedChange, fixedChange)
	var cells [][]string
	for _, pt := range pts {
		r := pt.save.Res
		cells = append(cells, []string{pt.axis, fmt.Sprint(pt.changeMB), fmt.Sprintf("%d (%d layers)", pt.extraMB, pt.extraSaves),
			ms(r.FreezeMS), ms(r.EncodeMS), ms(r.PushMS), ms(r.TotalMS), megabytes(r.LayerBytes),
			megabytes(pt.rr.ImageBytes), fmt.Sprintf("%d of %d", pt.rr.LazyLayers, pt.rr.Layers),
			seconds(pt.rr.Create), seconds(pt.rr.Cmds[0]), seconds(pt.rr.firstCommand()), megabytes(pt.rr.Fetched)})
	}
	mdTable(&w, []string{"axis", "change MB", "extra MB", "freeze window", "encode", "push", "save total", "layer MB",
		"image MB", "lazy layers", "create", "first command", "time to first command", "fetched MB"}, 1, cells)
	fmt.Fprintln(&w)
	for _, pt := range pts {
		fmt.Fprintf(&w, "- %s, change %d MB on +%d MB: generated in %s; snapshotter %s.\n", pt.axis, pt.changeMB, pt.extraMB, seconds(pt.gen), pt.rr.Snapshotter)
	}
	fmt.Fprintln(&w, "- save total: from the save request to the version committed (freeze, spool, encode, push, commit). fetched MB: as in the restore table (the gzip base layer counts whole).")
	fmt.Fprintf(&w, "- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err := out.Write(w.Bytes())
	return err
}
