package main

import (
	"strings"
	"testing"
	"time"
)

func TestWriteSaveLimit(t *testing.T) {
	s := time.Second
	runs := func(totals ...time.Duration) []saveRun {
		var rs []saveRun
		for _, d := range totals {
			rs = append(rs, saveRun{Total: d, CPU: d, Load: 1.5})
		}
		return rs
	}
	cases := []struct {
		name  string
		keys  []string
		runs  [][]saveRun
		wants []string
	}{
		{"met", []string{"estargz", "zstd", "tar"},
			[][]saveRun{runs(2*s, 1*s, 3*s), runs(s), runs(2*s, 2*s, 2*s)},
			[]string{"| 1 | 2.00 s | 2.00 s | 1.50 | 2.00 s | 2.00 s | 1.50 | 1.00 |", "ratio of medians **1.00**", "target of 1.5 met"}},
		{"not met", []string{"tar", "estargz"},
			[][]saveRun{runs(s, s, s), runs(2*s, 3*s, 4*s)},
			[]string{"| 3 | 4.00 s |", "ratio of medians **3.00**", "target of 1.5 not met", "CPU time"}},
		{"no tar side", []string{"estargz", "zstd"}, [][]saveRun{runs(s), runs(s)}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var b strings.Builder
			writeSaveLimit(&b, c.keys, c.runs)
			if c.wants == nil && b.Len() != 0 {
				t.Fatalf("wrote %q without both sides", b.String())
			}
			for _, w := range c.wants {
				if !strings.Contains(b.String(), w) {
					t.Errorf("missing %q in:\n%s", w, b.String())
				}
			}
		})
	}
}
