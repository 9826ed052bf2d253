package snapshotter

import (
	"context"
	"io"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The walkers on the mixed ~100 MB tree of BenchmarkSpool (2,208 regular
// files in 43 directories, from the page cache). Besides ns/op each reports
// cpu-ms/op, the process's user+system CPU time per operation, which a busy
// machine disturbs far less than the wall clock.

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration, n int) {
	b.ReportMetric(float64((cpuTime(b)-start).Microseconds())/1000/float64(n), "cpu-ms/op")
}

// BenchmarkSpoolMixed is the one-pass Spool (a stopped instance's save),
// its tar discarded.
func BenchmarkSpoolMixed(b *testing.B) {
	benchSpool(b)
	upper := filepath.Join(benchTree.dir, "upper")
	b.SetBytes(benchTree.size)
	n, start := 0, cpuTime(b)
	for b.Loop() {
		if _, err := Spool(context.Background(), upper, io.Discard, SpoolOptions{}); err != nil {
			b.Fatal(err)
		}
		n++
	}
	reportCPU(b, start, n)
}

// BenchmarkPrepareMixed is a running instance's first pass: every file
// copied into the data file.
func BenchmarkPrepareMixed(b *testing.B) {
	benchSpool(b)
	upper := filepath.Join(benchTree.dir, "upper")
	work := b.TempDir()
	b.SetBytes(benchTree.size)
	n, start := 0, cpuTime(b)
	for b.Loop() {
		p, err := Prepare(context.Background(), upper, work, SpoolOptions{})
		if err != nil {
			b.Fatal(err)
		}
		p.Close()
		n++
	}
	reportCPU(b, start, n)
}

// BenchmarkFrozenMixed is the freeze window: the frozen pass after a
// Prepare, nothing changed in between (metadata only).
func BenchmarkFrozenMixed(b *testing.B) {
	benchSpool(b)
	upper := filepath.Join(benchTree.dir, "upper")
	time.Sleep(2 * TornMargin) // the tree's files are trusted copies
	p, err := Prepare(context.Background(), upper, b.TempDir(), SpoolOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	n, start := 0, cpuTime(b)
	for b.Loop() {
		st, err := p.Frozen(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if st.RecopiedFiles != 0 {
			b.Fatalf("recopied %d files", st.RecopiedFiles)
		}
		n++
	}
	reportCPU(b, start, n)
}
