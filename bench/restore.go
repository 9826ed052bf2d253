package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
)

const (
	dotVersionCmd = "dot -V"
	renderCmd     = "echo 'digraph{a->b}' | dot -Tpng > /tmp/g.png && wc -c < /tmp/g.png"
)

// restoreVariant is one way of restoring the Graphviz version.
type restoreVariant struct {
	name        string
	compression string
	project     string
	full        bool   // restore on a node without the lazy snapshotter
	base        string // image name or repo@digest
	install     time.Duration
	save        types.SaveResult
	runs        []restoreRun
}

// runRestore is the restore scenario: the Graphviz change saved in an
// eStargz project (lazy restore) and a zstd one (overlayfs, full pull), each
// restored -runs times on a fresh joining node.
func runRestore(ctx context.Context, b *bed, out io.Writer) error {
	started := time.Now()
	vs := []*restoreVariant{
		{name: "lazy (eStargz, stargz snapshotter)", compression: "estargz", project: "gv-estargz", base: baseImage},
		{name: "full pull of the same eStargz image (overlayfs)", compression: "estargz", project: "gv-estargz", base: baseImage, full: true},
		{name: "full pull, zstd project (overlayfs)", compression: "zstd", project: "gv-zstd", base: baseImage, full: true},
	}
	var aptLine string
	made := map[string]*restoreVariant{}
	for _, v := range vs {
		if m := made[v.project]; m != nil {
			v.install, v.save = m.install, m.save // the same version, restored another way
			continue
		}
		made[v.project] = v
		if _, err := b.c.CreateProject(ctx, types.CreateProjectRequest{Name: v.project, Base: v.base, Compression: v.compression}); err != nil {
			return fmt.Errorf("project %s: %w", v.project, err)
		}
		logf("restore: %s: %s", v.project, installCmd)
		line, d, res, err := b.makeVersion(ctx, v.project, installCmd, "graphviz")
		if err != nil {
			return fmt.Errorf("%s: %w", v.project, err)
		}
		aptLine = summaryLine(line)
		v.install, v.save = d, res
		logf("restore: %s: install %s (%s), saved v%d", v.project, seconds(d), aptLine, res.Version)
	}
	cmds := []string{dotVersionCmd, renderCmd}
	for i := 0; i < b.cfg.runs; i++ {
		for _, v := range vs {
			r, err := b.coldRestoreOn(ctx, v.project, v.save.Version, cmds, v.full)
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", v.name, i+1, err)
			}
			v.runs = append(v.runs, r)
		}
	}

	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "Primary node: `node.Start` in a fresh data dir, the Debian bookworm minbase rootfs imported as base image %q (%s MB; "+
		"envd imports bases as one eStargz layer). Two projects on it, compression `estargz` and `zstd`. In each, one instance ran `%s` (%s, %s; `%s`) and was saved as version %d.\n\n",
		baseImage, megabytes(b.base.Size), installCmd, seconds(vs[0].install), seconds(vs[2].install), aptLine, vs[0].save.Version)
	var srows []saveRow
	for _, v := range []*restoreVariant{vs[0], vs[2]} {
		srows = append(srows, saveRow{Label: v.project, Extra: []string{v.compression}, Res: v.save})
	}
	writeSaveTable(&w, "project", srows, "compression")
	fmt.Fprintln(&w)
	fmt.Fprintf(&w, "Restore: each run starts a joining node (`node.Start` with the primary's PostgreSQL and registry, fresh data dir: empty containerd content store and snapshotter cache), "+
		"creates an instance of the saved version on it through the API (pull or lazy mount + create + start), runs `%s`, then `%s`, "+
		"reads the fetched bytes, deletes the instance, shuts the node down and removes its data dir. %d runs per variant, alternating; medians.\n\n",
		dotVersionCmd, renderCmd, b.cfg.runs)
	fmt.Fprintln(&w, "| variant | create (pull + start) | first `dot -V` | time to first command | render | fetched MB | image MB | lazy layers | snapshotter |")
	fmt.Fprintln(&w, "|---|---:|---:|---:|---:|---:|---:|---:|---|")
	ttfc := make([]time.Duration, len(vs))
	for j, v := range vs {
		var cr, c1, c2, tf []time.Duration
		var fe []int64
		for _, r := range v.runs {
			cr, c1, c2, tf = append(cr, r.Create), append(c1, r.Cmds[0]), append(c2, r.Cmds[1]), append(tf, r.firstCommand())
			fe = append(fe, r.Fetched)
		}
		ttfc[j] = median(tf)
		last := v.runs[len(v.runs)-1]
		fmt.Fprintf(&w, "| %s | %s | %s | %s | %s | %s | %s | %d of %d | %s |\n", escapeCell(v.name),
			seconds(median(cr)), seconds(median(c1)), seconds(ttfc[j]), seconds(median(c2)),
			megabytes(medianInt(fe)), megabytes(last.ImageBytes), last.LazyLayers, last.Layers, last.Snapshotter)
	}
	fmt.Fprintln(&w)
	fmt.Fprintf(&w, "Ratio full / lazy, time to first command: **%s** for the same eStargz image pulled whole on a node without the lazy snapshotter, %s against the zstd project's version (target of issue 5: at least 4×, i.e. lazy ≤ 1/4 of full).\n\n",
		ratio(ttfc[1], ttfc[0]), ratio(ttfc[2], ttfc[0]))
	fmt.Fprintln(&w, "Runs (create + first command, render, fetched MB):")
	fmt.Fprintln(&w)
	for _, v := range vs {
		var parts []string
		for _, r := range v.runs {
			parts = append(parts, fmt.Sprintf("%s + %s, %s, %s", seconds(r.Create), seconds(r.Cmds[0]), seconds(r.Cmds[1]), megabytes(r.Fetched)))
		}
		fmt.Fprintf(&w, "- %s: %s\n", v.name, strings.Join(parts, "; "))
	}
	fmt.Fprintf(&w, "- `dot -V` answered: `%s`; the render wrote a %s-byte PNG.\n", firstLine(vs[0].runs[0].Outputs[0]), firstLine(vs[0].runs[0].Outputs[1]))
	fmt.Fprintln(&w, "- fetched MB: for a lazily mounted layer, the bytes the stargz snapshotter had fetched (its layer state) right after the render; every layer a full pull takes is counted whole, so it counts with its compressed size. image MB: compressed bytes of all layers. 1 MB = 10^6 bytes.")
	fmt.Fprintln(&w, "- Registry, PostgreSQL and both nodes run on this one machine: the registry's blobs are read from its disk (page cache warm from the save), no network between nodes.")
	fmt.Fprintf(&w, "- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err := out.Write(w.Bytes())
	return err
}

// saveRow is one save through the API, for writeSaveTable.
type saveRow struct {
	Label string
	Extra []string // extra cells after the label, matching extraCols
	Res   types.SaveResult
}

// writeSaveTable writes saves as a markdown table of the save result's
// fields. extraCols name the cells of saveRow.Extra.
func writeSaveTable(w io.Writer, first string, rows []saveRow, extraCols ...string) {
	head := append([]string{first}, extraCols...)
	head = append(head, "freeze window", "spool", "encode", "push", "save total", "layer MB", "entries")
	var cells [][]string
	for _, r := range rows {
		c := append([]string{r.Label}, r.Extra...)
		c = append(c, ms(r.Res.FreezeMS), ms(r.Res.SpoolMS), ms(r.Res.EncodeMS), ms(r.Res.PushMS), ms(r.Res.TotalMS),
			megabytes(r.Res.LayerBytes), fmt.Sprint(r.Res.Entries))
		cells = append(cells, c)
	}
	mdTable(w, head, len(extraCols)+1, cells)
}

// mdTable writes a markdown table; the first textCols columns are left
// aligned, the others right aligned. Cells are escaped.
func mdTable(w io.Writer, head []string, textCols int, rows [][]string) {
	esc := func(cs []string) string {
		out := make([]string, len(cs))
		for i, c := range cs {
			out[i] = escapeCell(c)
		}
		return "| " + strings.Join(out, " | ") + " |"
	}
	fmt.Fprintln(w, esc(head))
	sep := make([]string, len(head))
	for i := range sep {
		sep[i] = "---:"
		if i < textCols {
			sep[i] = "---"
		}
	}
	fmt.Fprintln(w, "|"+strings.Join(sep, "|")+"|")
	for _, r := range rows {
		fmt.Fprintln(w, esc(r))
	}
}

// medianInt is median for byte counts.
func medianInt(ns []int64) int64 {
	ds := make([]time.Duration, len(ns))
	for i, n := range ns {
		ds[i] = time.Duration(n)
	}
	return int64(median(ds))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// header writes the machine, date and command lines of a report.
func header(w io.Writer) {
	fmt.Fprintf(w, "Machine: %s\n\n", machine())
	fmt.Fprintf(w, "Date: %s\n\n", time.Now().UTC().Format("Mon Jan _2 15:04:05 UTC 2006"))
	fmt.Fprintf(w, "Command: `%s`\n\n", command())
}
