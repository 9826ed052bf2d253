package main

import (
	"strings"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	s := time.Second
	cases := []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{[]time.Duration{3 * s}, 3 * s},
		{[]time.Duration{5 * s, 1 * s, 3 * s}, 3 * s},
		{[]time.Duration{4 * s, 1 * s, 2 * s, 3 * s}, 2500 * time.Millisecond},
	}
	for _, c := range cases {
		in := append([]time.Duration(nil), c.in...)
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
		for i := range in {
			if in[i] != c.in[i] {
				t.Errorf("median modified its input: %v, was %v", c.in, in)
			}
		}
	}
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	writeTable(&b, []result{
		{Name: "envd eStargz", Freeze: 300 * time.Millisecond, Spool: 280 * time.Millisecond,
			Encode: 700 * time.Millisecond, Total: time.Second, Bytes: 75_400_000},
		{Name: "DiffService", Freeze: 12 * time.Second, Total: 12 * time.Second, Bytes: 70_000_000},
		{Name: "tar | zstd", Total: 750 * time.Millisecond, Bytes: -1, Note: "no whiteouts"},
	}, "DiffService")
	got := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"| variant | freeze window | spool | encode | total | layer MB | ratio vs DiffService |",
		"|---|---:|---:|---:|---:|---:|---:|",
		"| envd eStargz | 0.30 s | 0.28 s | 0.70 s | 1.00 s | 75.4 | 12.0× |",
		"| DiffService | 12.00 s | — | — | 12.00 s | 70.0 | 1.0× |",
		`| tar \| zstd (no whiteouts) | — | — | — | 0.75 s | — | 16.0× |`,
	}
	if len(got) != len(want) {
		t.Fatalf("table has %d lines, want %d:\n%s", len(got), len(want), b.String())
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}

func TestWriteTableWithoutReference(t *testing.T) {
	var b strings.Builder
	writeTable(&b, []result{{Name: "x", Total: time.Second, Bytes: 1e6}}, "DiffService")
	if !strings.Contains(b.String(), "| x | — | — | — | 1.00 s | 1.0 | — |") {
		t.Errorf("unexpected table:\n%s", b.String())
	}
}
