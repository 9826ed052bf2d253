package snapshotter

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkTwoPassMixed is the save's own spool on the mixed ~100 MB tree
// of BenchmarkSpool: Prepare (instance running) then Frozen (the freeze
// window), nothing changed in between. prepare-ms and frozen-ms are the
// last iteration's parts.
func BenchmarkTwoPassMixed(b *testing.B) {
	benchSpool(b)
	upper := filepath.Join(benchTree.dir, "upper")
	time.Sleep(2 * TornMargin) // the tree's files are trusted copies
	ctx := context.Background()
	work := b.TempDir()
	b.SetBytes(benchTree.size)
	var prepare, frozen time.Duration
	for b.Loop() {
		p, err := Prepare(ctx, upper, work, SpoolOptions{})
		if err != nil {
			b.Fatal(err)
		}
		st, err := p.Frozen(ctx)
		if err != nil {
			b.Fatal(err)
		}
		prepare, frozen = p.Prepared().Duration, st.Duration
		p.Close()
	}
	b.ReportMetric(float64(prepare.Microseconds())/1000, "prepare-ms")
	b.ReportMetric(float64(frozen.Microseconds())/1000, "frozen-ms")
}
