package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// result is one measured variant: the medians of its runs.
type result struct {
	Name   string
	Freeze time.Duration // 0: the variant does not freeze the container
	Spool  time.Duration // 0: not a separate step
	Encode time.Duration // 0: not a separate step
	Total  time.Duration
	Bytes  int64  // layer (compressed) bytes; -1 when unknown
	Note   string // footnote marker text, e.g. "no whiteouts"
}

// median returns the median of ds (the mean of the two middle values for an
// even count); 0 for none. ds is not modified.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// seconds formats d as "1.23 s"; "—" for 0.
func seconds(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// megabytes formats n bytes as decimal MB (10^6 bytes); "—" when unknown.
func megabytes(n int64) string {
	if n < 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", float64(n)/1e6)
}

// ratio formats ref/d as "17.3×"; "—" when either is unknown.
func ratio(ref, d time.Duration) string {
	if ref <= 0 || d <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f×", ref.Seconds()/d.Seconds())
}

// writeTable writes rs as a markdown table. The ratio column is the total of
// the row named refName divided by each row's total (how many times faster
// than the reference a variant is).
func writeTable(w io.Writer, rs []result, refName string) {
	var ref time.Duration
	for _, r := range rs {
		if r.Name == refName {
			ref = r.Total
		}
	}
	fmt.Fprintln(w, "| variant | freeze window | spool | encode | total | layer MB | ratio vs DiffService |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range rs {
		name := r.Name
		if r.Note != "" {
			name += " (" + r.Note + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n",
			escapeCell(name), seconds(r.Freeze), seconds(r.Spool), seconds(r.Encode),
			seconds(r.Total), megabytes(r.Bytes), ratio(ref, r.Total))
	}
}

func escapeCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
