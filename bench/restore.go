package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/envd-dev/envd/api/types"
	envdclient "github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/snapshotter/stargz"
)

const (
	dotVersionCmd = "dot -V"
	renderCmd     = "echo 'digraph{a->b}' | dot -Tpng > /tmp/g.png && wc -c < /tmp/g.png"
)

// The restore scenario: the Graphviz change saved in an eStargz project,
// restored four ways in alternated runs, each on a fresh joining node:
//   - first: lazy, with the project's first-reads list cleared, as the
//     first restore of a version is (its layer carries the prioritized
//     files of the instance that made it: what apt read of the image, not
//     what it wrote and read back);
//   - learned: lazy, after the first restore's instance recorded its first
//     reads (`dot -V`, the render) on the project: the node reads their
//     head (what `dot -V` read) ahead from the moment the pull has mounted
//     the layers and waits up to 1 s for it after the task's start before
//     it reports the instance Running, and the rest after `dot -V`;
//   - full: the same image pulled whole (a node without the lazy
//     snapshotter, overlayfs);
//   - local: a second instance on that full-pull node, whose image is
//     then fully local.

// learnedFile is the file whose presence in the project's first reads
// says the first restore's reads were stored: what `dot` runs (Debian's
// /usr/bin/dot is a symlink to it; first reads record the file opened).
const learnedFile = "/usr/sbin/libgvc6-config-update"

func runRestore(ctx context.Context, b *bed, out io.Writer) error {
	started := time.Now()
	const project = "gv-estargz"
	if _, err := b.c.CreateProject(ctx, types.CreateProjectRequest{Name: project, Base: baseImage, Compression: "estargz"}); err != nil {
		return fmt.Errorf("project %s: %w", project, err)
	}
	logf("restore: %s: %s", project, installCmd)
	line, install, res, err := b.makeVersion(ctx, project, installCmd, "graphviz")
	if err != nil {
		return fmt.Errorf("%s: %w", project, err)
	}
	aptLine := summaryLine(line)
	logf("restore: %s: install %s (%s), saved v%d", project, seconds(install), aptLine, res.Version)
	pr, err := b.savedPrefetch(ctx, project, res.Version)
	if err != nil {
		return err
	}
	prefetched := prefetchSummary(pr, res.LayerBytes)
	logf("restore: %s v%d: prefetch range %s", project, res.Version, prefetched)

	pool, err := pgxpool.New(ctx, b.primary.DSN())
	if err != nil {
		return err
	}
	defer pool.Close()
	// The bench's own reset: the API has no verb to forget first reads.
	forget := func() error {
		_, err := pool.Exec(ctx, `UPDATE projects SET prefetch = '{}', prefetch_head = 0 WHERE name = $1`, project)
		return err
	}
	var learnedFiles, learnedHeads []int
	// waitLearned waits until the first restore's reads are stored: the
	// list holds what `dot` runs and has stopped growing (the node stores
	// it every second while it grows; a list taken at its first store
	// missed the render's files in some runs: 117, 70 and 52 files).
	waitLearned := func(ctx context.Context, _ *envdclient.Client, _ string) error {
		const settled = 2500 * time.Millisecond
		deadline := time.Now().Add(30 * time.Second)
		last, lastChange := -1, time.Now()
		for {
			p, err := b.c.GetProject(ctx, project)
			if err != nil {
				return err
			}
			if len(p.Prefetch) != last {
				last, lastChange = len(p.Prefetch), time.Now()
			}
			if slices.Contains(p.Prefetch, learnedFile) && time.Since(lastChange) >= settled {
				return nil
			}
			if time.Now().After(deadline) {
				if slices.Contains(p.Prefetch, learnedFile) {
					return nil // still growing after 30 s: take it as it is
				}
				return fmt.Errorf("the first restore's reads were not stored on %s within 30 s (%d files, no %s)", project, len(p.Prefetch), learnedFile)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}

	cmds := []string{dotVersionCmd, renderCmd}
	const (
		vFirst = iota
		vLearned
		vFull
		vLocal
	)
	names := []string{
		"first restore, lazy (nothing learned)",
		"learned restore, lazy (first reads of the first restore)",
		"full pull of the same image (overlayfs)",
		"fully local image (second instance on the full-pull node)",
	}
	runs := make([][]restoreRun, len(names))
	for i := 0; i < b.cfg.runs; i++ {
		if err := forget(); err != nil {
			return fmt.Errorf("forget first reads: %w", err)
		}
		b.afterRestore = waitLearned
		r, err := b.coldRestoreOn(ctx, project, res.Version, cmds, false)
		b.afterRestore = nil
		if err != nil {
			return fmt.Errorf("%s, run %d: %w", names[vFirst], i+1, err)
		}
		runs[vFirst] = append(runs[vFirst], r)
		// What the learned restore reads ahead: the list as the first
		// restore's node left it (stored every second until it shut down).
		p, err := b.c.GetProject(ctx, project)
		if err != nil {
			return err
		}
		learnedFiles = append(learnedFiles, len(p.Prefetch))
		learnedHeads = append(learnedHeads, p.PrefetchHead)

		if r, err = b.coldRestoreOn(ctx, project, res.Version, cmds, false); err != nil {
			return fmt.Errorf("%s, run %d: %w", names[vLearned], i+1, err)
		}
		runs[vLearned] = append(runs[vLearned], r)

		var local restoreRun
		b.afterRestore = func(ctx context.Context, c *envdclient.Client, _ string) error {
			start := time.Now()
			in, err := c.CreateInstance(ctx, project, types.CreateInstanceRequest{Version: res.Version, TTL: "2h"})
			local.Create = time.Since(start)
			if err != nil {
				return fmt.Errorf("second instance on the full-pull node: %w", err)
			}
			defer b.remove(context.WithoutCancel(ctx), c, in.ID)
			for _, cmd := range cmds {
				start := time.Now()
				o, err := sh(ctx, c, in.ID, cmd)
				local.Cmds, local.Outputs = append(local.Cmds, time.Since(start)), append(local.Outputs, o)
				if err != nil {
					return err
				}
			}
			local.Snapshotter = "overlayfs"
			return nil
		}
		r, err = b.coldRestoreOn(ctx, project, res.Version, cmds, true)
		b.afterRestore = nil
		if err != nil {
			return fmt.Errorf("%s, run %d: %w", names[vFull], i+1, err)
		}
		runs[vFull] = append(runs[vFull], r)
		runs[vLocal] = append(runs[vLocal], local)
	}

	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "Primary node: `node.Start` in a fresh data dir, the Debian bookworm minbase rootfs imported as base image %q (%s MB; "+
		"envd imports bases as one eStargz layer). One project, compression `estargz`; one instance ran `%s` (%s; `%s`) and was saved as version %d.\n\n",
		baseImage, megabytes(b.base.Size), installCmd, seconds(install), aptLine, res.Version)
	writeSaveTable(&w, "project", []saveRow{{Label: project, Extra: []string{"estargz"}, Res: res}}, "compression")
	fmt.Fprintln(&w)
	fmt.Fprintf(&w, "Prefetch range of the saved layer (the files its save put before the prefetch landmark, which the stargz snapshotter fetches from the mount on, in the background): %s.\n\n", prefetched)
	fmt.Fprintf(&w, "Restore: each run starts a joining node (`node.Start` with the primary's PostgreSQL and registry, fresh data dir: empty containerd content store and snapshotter cache), "+
		"creates an instance of the version through the API (`up`: pull or lazy mount, create, start, and for a lazy instance the read of what its init needs and the read-ahead of the project's first reads: of their head, what the recorded instance's first command read, waited for up to 1 s, or without a head of all of them, up to 0.25 s; the rest after the first command), runs `%s`, then `%s`, "+
		"then deletes the instance, shuts the node down and removes its data dir. Per run, in this order: the first restore (the project's first-reads list cleared before it; "+
		"the run waits until its instance's reads are stored on the project), the learned restore, the full pull, and on the full-pull node a second instance (fully local image). "+
		"%d runs, alternating; medians.\n\n", dotVersionCmd, renderCmd, b.cfg.runs)
	fmt.Fprintln(&w, "| variant | create (`up` to Running) | first `dot -V` | time to first command | render | fetched MB before the first command | fetched MB after the render | snapshotter |")
	fmt.Fprintln(&w, "|---|---:|---:|---:|---:|---:|---:|---|")
	ttfc := make([]time.Duration, len(names))
	first := make([]time.Duration, len(names))
	create := make([]time.Duration, len(names))
	for j, name := range names {
		var cr, c1, c2, tf []time.Duration
		var f1, fe []int64
		for _, r := range runs[j] {
			cr, c1, c2, tf = append(cr, r.Create), append(c1, r.Cmds[0]), append(c2, r.Cmds[1]), append(tf, r.firstCommand())
			f1, fe = append(f1, r.FetchedFirst), append(fe, r.Fetched)
		}
		ttfc[j], first[j], create[j] = median(tf), median(c1), median(cr)
		fetch1, fetchAll := megabytes(medianInt(f1)), megabytes(medianInt(fe))
		if j == vLocal {
			fetch1, fetchAll = "0 (local)", "0 (local)"
		}
		fmt.Fprintf(&w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", escapeCell(name),
			seconds(create[j]), seconds(first[j]), seconds(ttfc[j]), seconds(median(c2)), fetch1, fetchAll, runs[j][len(runs[j])-1].Snapshotter)
	}
	fmt.Fprintln(&w)
	fmt.Fprintf(&w, "Ratios of the medians (issue 15, item 8; targets: learned time to first command at most 1/10 of the full pull's, its first command within 3× of the same command on a fully local image):\n\n")
	fmt.Fprintf(&w, "- full pull / learned restore, time to first command: **%s** (target ≥ 10×); full pull / first restore: %s.\n", ratio(ttfc[vFull], ttfc[vLearned]), ratio(ttfc[vFull], ttfc[vFirst]))
	fmt.Fprintf(&w, "- learned restore / fully local, first `dot -V`: **%s** (target ≤ 3×); time to first command (`up` + `dot -V`): %s.\n", ratio(first[vLearned], first[vLocal]), ratio(ttfc[vLearned], ttfc[vLocal]))
	fmt.Fprintf(&w, "- first restore / learned restore, time to first command: %s.\n", ratio(ttfc[vFirst], ttfc[vLearned]))
	// The floor of any learned restore here: a lazy start that reads nothing
	// past its init's own files (the first restore's up to Running: the
	// layers' TOCs fetched and mounted, the init's files made local) before
	// its first command has read a byte.
	fmt.Fprintf(&w, "- lazy floor: the first restore's `up` to Running (a lazy start that reads nothing past its init's own files) is %s, full pull / it %s; a learned restore's time to first command adds its command to that. 10× needs at most %s.\n\n",
		seconds(create[vFirst]), ratio(ttfc[vFull], create[vFirst]), seconds(ttfc[vFull]/10))
	fmt.Fprintln(&w, "Runs (create + first command, render, fetched MB before the first command / after the render):")
	fmt.Fprintln(&w)
	for j, name := range names {
		var parts []string
		for _, r := range runs[j] {
			parts = append(parts, fmt.Sprintf("%s + %s, %s, %s / %s", seconds(r.Create), seconds(r.Cmds[0]), seconds(r.Cmds[1]), megabytes(r.FetchedFirst), megabytes(r.Fetched)))
		}
		fmt.Fprintf(&w, "- %s: %s\n", name, strings.Join(parts, "; "))
	}
	fmt.Fprintf(&w, "- first reads learned by the first restores (files on the project when the learned restore started): %v; of them read by the end of the first command (the head): %v.\n", learnedFiles, learnedHeads)
	fmt.Fprintf(&w, "- `dot -V` answered: `%s`; the render wrote a %s-byte PNG.\n", firstLine(runs[vLearned][0].Outputs[0]), firstLine(runs[vLearned][0].Outputs[1]))
	fmt.Fprintln(&w, "- fetched MB: for a lazily mounted layer, the bytes the stargz snapshotter had fetched (its layer state), which includes its background fetch of the whole layer as far as it got; every layer a full pull takes is counted whole, with its compressed size. 1 MB = 10^6 bytes.")
	fmt.Fprintln(&w, "- Registry, PostgreSQL and all nodes run on this one machine: the registry's blobs are read from its disk, no network between nodes.")
	if b.cfg.registryRTT > 0 {
		fmt.Fprintf(&w, "- `-registry-rtt %s`: the joining nodes reach the registry through a loopback proxy that holds every request %s before passing it on (a registry one round trip away; bandwidth stays the loopback's).\n", b.cfg.registryRTT, b.cfg.registryRTT)
	}
	fmt.Fprintf(&w, "- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err = out.Write(w.Bytes())
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

// savedPrefetch is the prefetch range of the last layer of version v.
func (b *bed) savedPrefetch(ctx context.Context, project string, v int) (stargz.PrefetchRange, error) {
	var none stargz.PrefetchRange
	ver, err := b.c.GetVersion(ctx, project, v)
	if err != nil {
		return none, err
	}
	img, err := b.reg.Get(ctx, ver.Image)
	if err != nil {
		return none, err
	}
	credFile, _ := b.primary.RegistryCredentialFiles()
	cred, err := registry.ReadCredentialFile(credFile)
	if err != nil {
		return none, err
	}
	return layerPrefetch(ctx, b.primary.RegistryAddr(), cred, img.Repo, img.Layers[len(img.Layers)-1])
}
