package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"
)

// smallFilesScript writes n text files of 1-8 KiB (sizes uniform at random,
// seeded) under dir/NN/, 100 directories, with mawk (Debian minbase has
// it): slices at random offsets of a ~80 KB pool of words from a small
// vocabulary, so they compress like text.
func smallFilesScript(dir string, n, seed int) string {
	return fmt.Sprintf(`mkdir -p %[1]s && cd %[1]s && for d in $(seq -w 0 99); do mkdir -p $d; done && awk -v n=%[2]d -v seed=%[3]d 'BEGIN {
  srand(seed); nw = split("alpha beta gamma delta envd layer save restore lazy fetch node image file graph dot render apt cache debian ext4 overlay upper lower chunk", w, " ");
  for (j = 0; j < 12000; j++) { line = line w[1 + int(rand() * nw)] (rand() < 0.1 ? "\n" : " "); if (length(line) > 200) { pool = pool line; line = "" } }
  for (i = 0; i < n; i++) {
    f = sprintf("%%02d/f%%05d.txt", i %% 100, i); size = 1024 + int(rand() * 7169);
    printf "%%s", substr(pool, 1 + int(rand() * (length(pool) - size)), size) > f; close(f)
  }
}' && find . -type f | wc -l && du -sb . | cut -f1`, dir, n, seed)
}

// bigFileScript writes one file of blocks×64 MiB: a 64 MiB block from
// /dev/urandom repeated (no compressor here finds repeats 64 MiB apart, so
// it compresses like random data, and it is fast to make).
func bigFileScript(path string, blocks int) string {
	return fmt.Sprintf(`mkdir -p $(dirname %[1]s) && head -c 67108864 /dev/urandom > /tmp/blk && for i in $(seq %[2]d); do cat /tmp/blk; done > %[1]s && rm /tmp/blk && wc -c < %[1]s`, path, blocks)
}

type workload struct {
	key, name string
	script    string
	readCmd   string
	readNote  string
}

// runWorkloads is the workloads scenario: 30,000 small files and one 1 GiB
// file, each saved in an eStargz and a zstd project and restored on a
// fresh joining node.
func runWorkloads(ctx context.Context, b *bed, out io.Writer) error {
	started := time.Now()
	wls := []workload{
		{key: "small", name: "30,000 files of 1-8 KiB (text)", script: smallFilesScript("/data/small", 30000, 5),
			readCmd: "cat /data/small/00/f00000.txt | cksum", readNote: "`cat` of one file"},
		{key: "big", name: "one 1 GiB file (random 64 MiB block ×16)", script: bigFileScript("/data/big.bin", 16),
			readCmd: "head -c 1048576 /data/big.bin | cksum", readNote: "first 1 MiB of the file"},
	}
	comps := []string{"estargz", "zstd"}
	type row struct {
		wl, comp string
		gen      time.Duration
		genOut   string
		save     saveRow
		rr       restoreRun
	}
	var rows []row
	for _, wl := range wls {
		for _, comp := range comps {
			p := "wl-" + wl.key + "-" + comp
			if err := b.project(ctx, p, comp); err != nil {
				return err
			}
			logf("workloads: %s: generating", p)
			genOut, gen, res, err := b.makeVersion(ctx, p, wl.script, wl.key)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			rr, err := b.coldRestore(ctx, p, res.Version, []string{wl.readCmd})
			if err != nil {
				return fmt.Errorf("%s restore: %w", p, err)
			}
			rows = append(rows, row{wl: wl.name, comp: comp, gen: gen, genOut: genOut,
				save: saveRow{Label: wl.name, Extra: []string{comp}, Res: res}, rr: rr})
		}
	}

	var w bytes.Buffer
	header(&w)
	fmt.Fprintln(&w, "Each workload was generated inside an instance of the Debian base (one instance per project, same script), saved through the API, "+
		"and restored once on a fresh joining node (as in the restore scenario); the first command reads one file of the change.")
	fmt.Fprintln(&w)
	for _, wl := range wls {
		fmt.Fprintf(&w, "- %s: `%s`; first command: `%s` (%s).\n", wl.name, oneLine(wl.script, 160), wl.readCmd, wl.readNote)
	}
	fmt.Fprintln(&w)
	fmt.Fprintln(&w, "Save (the save operation's result fields):")
	fmt.Fprintln(&w)
	var srows []saveRow
	for _, r := range rows {
		srows = append(srows, r.save)
	}
	writeSaveTable(&w, "workload", srows, "compression")
	fmt.Fprintln(&w)
	fmt.Fprintln(&w, "Restore on a fresh joining node:")
	fmt.Fprintln(&w)
	var cells [][]string
	for _, r := range rows {
		cells = append(cells, []string{r.wl, r.comp, r.rr.Snapshotter, seconds(r.rr.Create), seconds(r.rr.Cmds[0]),
			seconds(r.rr.firstCommand()), megabytes(r.rr.Fetched), megabytes(r.rr.ImageBytes)})
	}
	mdTable(&w, []string{"workload", "compression", "snapshotter", "create (pull + start)", "first command", "time to first command", "fetched MB", "image MB"}, 3, cells)
	fmt.Fprintln(&w)
	for _, r := range rows {
		fmt.Fprintf(&w, "- %s, %s: generated in %s (output `%s`).\n", r.wl, r.comp, seconds(r.gen), oneLine(r.genOut, 80))
	}
	fmt.Fprintln(&w, "- One run per row (no median). image MB includes the Debian base layer (gzip, pulled whole by both snapshotters).")
	fmt.Fprintf(&w, "- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err := out.Write(w.Bytes())
	return err
}

// oneLine squeezes s onto one line of at most n runes.
func oneLine(s string, n int) string {
	b := []rune(s)
	var o []rune
	space := false
	for _, r := range b {
		if r == '\n' || r == '\t' || r == ' ' {
			if !space && len(o) > 0 {
				o = append(o, ' ')
			}
			space = true
			continue
		}
		space = false
		o = append(o, r)
	}
	if len(o) > n {
		o = append(o[:n-1], '…')
	}
	return string(o)
}
