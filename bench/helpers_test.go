package main

import (
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/snapshotter/stargz"
)

func TestFetchedBytes(t *testing.T) {
	layers := []registry.LayerInfo{
		{Digest: "sha256:base", Size: 50_000_000},
		{Digest: "sha256:lazy1", Size: 100_000_000},
		{Digest: "sha256:lazy2", Size: 20_000_000},
	}
	lazy := map[string]stargz.State{
		"sha256:lazy1": {Digest: "sha256:lazy1", Size: 100_000_000, FetchedSize: 7_000_000},
		"sha256:lazy2": {Digest: "sha256:lazy2", Size: 20_000_000, FetchedSize: 0},
		"sha256:other": {Digest: "sha256:other", Size: 1, FetchedSize: 1}, // a layer of another image
	}
	n, nlazy := fetchedBytes(layers, lazy)
	if n != 57_000_000 || nlazy != 2 {
		t.Errorf("fetchedBytes = %d, %d lazy; want 57000000, 2", n, nlazy)
	}
	if n, nlazy := fetchedBytes(layers, nil); n != 170_000_000 || nlazy != 0 {
		t.Errorf("full pull: fetchedBytes = %d, %d lazy; want 170000000, 0", n, nlazy)
	}
}

func TestFirstCommand(t *testing.T) {
	r := restoreRun{Create: 2 * time.Second, Cmds: []time.Duration{300 * time.Millisecond, time.Second}}
	if got := r.firstCommand(); got != 2300*time.Millisecond {
		t.Errorf("firstCommand = %v", got)
	}
	if got := (restoreRun{Create: time.Second}).firstCommand(); got != time.Second {
		t.Errorf("firstCommand without commands = %v", got)
	}
}

func TestMedianInt(t *testing.T) {
	if got := medianInt([]int64{5, 1, 3}); got != 3 {
		t.Errorf("medianInt = %d", got)
	}
	if got := medianInt([]int64{4, 1, 2, 3}); got != 2 { // (2+3)/2 in integer nanoseconds
		t.Errorf("medianInt even = %d", got)
	}
	if got := medianInt(nil); got != 0 {
		t.Errorf("medianInt(nil) = %d", got)
	}
}

func TestMdTable(t *testing.T) {
	var b strings.Builder
	mdTable(&b, []string{"name", "kind", "time"}, 2, [][]string{{"a | b", "x", "1.00 s"}})
	want := "| name | kind | time |\n|---|---|---:|\n| a \\| b | x | 1.00 s |\n"
	if b.String() != want {
		t.Errorf("mdTable:\n%s\nwant\n%s", b.String(), want)
	}
}

func TestWriteSaveTable(t *testing.T) {
	var b strings.Builder
	writeSaveTable(&b, "workload", []saveRow{{Label: "small", Extra: []string{"zstd"}, Res: types.SaveResult{
		FreezeMS: 120, SpoolMS: 100, EncodeMS: 1500, PushMS: 400, TotalMS: 2100, LayerBytes: 42_000_000, Entries: 30101}}}, "compression")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("table:\n%s", b.String())
	}
	if lines[0] != "| workload | compression | freeze window | spool | encode | push | save total | layer MB | entries |" {
		t.Errorf("header: %s", lines[0])
	}
	if lines[1] != "|---|---|---:|---:|---:|---:|---:|---:|---:|" {
		t.Errorf("separator: %s", lines[1])
	}
	if lines[2] != "| small | zstd | 0.12 s | 0.10 s | 1.50 s | 0.40 s | 2.10 s | 42.0 | 30101 |" {
		t.Errorf("row: %s", lines[2])
	}
}

func TestChangeScriptSize(t *testing.T) {
	// head -c X | base64 -w 76: 4/3 X characters plus a newline per 76.
	s := changeScript("/data/c", 100)
	if !strings.Contains(s, "head -c 74025957 ") {
		t.Errorf("changeScript: %s", s)
	}
	x := 74025957.0
	if got := x * 4 / 3 * 77 / 76; got < 99.9e6 || got > 100.1e6 {
		t.Errorf("base64 output %.0f bytes, want about 100 MB", got)
	}
	if !strings.Contains(s, "split -b 1000000 -a 4 - /data/c/f") {
		t.Errorf("changeScript does not split into /data/c/f*: %s", s)
	}
}

func TestSmallFilesScript(t *testing.T) {
	s := smallFilesScript("/data/small", 30000, 5)
	for _, want := range []string{"-v n=30000", "-v seed=5", `sprintf("%02d/f%05d.txt", i % 100, i)`, "1024 + int(rand() * 7169)", "cd /data/small"} {
		if !strings.Contains(s, want) {
			t.Errorf("smallFilesScript lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "%!") {
		t.Errorf("formatting error in script:\n%s", s)
	}
}

func TestBigFileScript(t *testing.T) {
	s := bigFileScript("/data/big.bin", 16)
	if !strings.Contains(s, "head -c 67108864 /dev/urandom > /tmp/blk") || !strings.Contains(s, "$(seq 16)") {
		t.Errorf("bigFileScript: %s", s)
	}
}

func TestOneLine(t *testing.T) {
	if got := oneLine("a\n  b\tc", 10); got != "a b c" {
		t.Errorf("oneLine = %q", got)
	}
	if got := oneLine("abcdefgh", 4); got != "abc…" {
		t.Errorf("oneLine cut = %q", got)
	}
}
