package snapshotter

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkEncodeEstargzTree encodes the spool of the upper dir named by
// $ENVD_BENCH_UPPER (default: the ~100 MB generated tree of BenchmarkEncode)
// as eStargz, writing the layer next to the spool (a disk, as in a save) or,
// with "tmpfs", to /dev/shm. Used to tune encodeEstargz; see
// docs/benchmarks-history.md, "eStargz encode tuning".
func BenchmarkEncodeEstargzTree(b *testing.B) {
	spoolPath, size := benchSpool(b)
	if upper := os.Getenv("ENVD_BENCH_UPPER"); upper != "" {
		dir := b.TempDir()
		spoolPath = filepath.Join(dir, "spool.tar")
		f, err := os.Create(spoolPath)
		if err != nil {
			b.Fatal(err)
		}
		st, err := Spool(context.Background(), upper, f, SpoolOptions{Excludes: DefaultExcludes})
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		size = st.Bytes
	}
	for _, where := range []string{"disk", "tmpfs"} {
		b.Run(where, func(b *testing.B) {
			outDir := b.TempDir()
			if where == "tmpfs" {
				var err error
				if outDir, err = os.MkdirTemp("/dev/shm", "envd-bench-"); err != nil {
					b.Skip("no tmpfs at /dev/shm:", err)
				}
				b.Cleanup(func() { os.RemoveAll(outDir) })
			}
			b.SetBytes(size)
			var layer Layer
			cpu0 := cpuTime(b)
			for b.Loop() {
				var err error
				layer, err = Encode(context.Background(), spoolPath, outDir, EncodeOptions{Compression: Estargz})
				if err != nil {
					b.Fatal(err)
				}
				os.Remove(layer.Path)
			}
			reportCPU(b, cpu0, b.N)
			b.ReportMetric(float64(layer.Size)/float64(size), "ratio")
			b.ReportMetric(float64(layer.Size)/1e6, "MB")
		})
	}
}
