package snapshotter

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// benchTree is a ~100 MB upper dir of mixed content spooled once per test
// binary: 2,000 small text files (4-64 KiB, about 66 MB, compressible like
// source and docs), 8 random 4 MiB files (32 MB, incompressible like
// already-compressed data) and 200 small random files.
var benchTree struct {
	once      sync.Once
	dir       string
	spoolPath string
	size      int64
	err       error
}

func benchSpool(b *testing.B) (string, int64) {
	benchTree.once.Do(func() {
		dir, err := os.MkdirTemp("", "envd-bench-")
		if err != nil {
			benchTree.err = err
			return
		}
		benchTree.dir = dir
		benchTree.err = genMixedTree(filepath.Join(dir, "upper"))
		if benchTree.err != nil {
			return
		}
		benchTree.spoolPath = filepath.Join(dir, "spool.tar")
		f, err := os.Create(benchTree.spoolPath)
		if err != nil {
			benchTree.err = err
			return
		}
		defer f.Close()
		st, err := Spool(context.Background(), filepath.Join(dir, "upper"), f, SpoolOptions{})
		benchTree.size, benchTree.err = st.Bytes, err
	})
	if benchTree.err != nil {
		b.Fatal(benchTree.err)
	}
	return benchTree.spoolPath, benchTree.size
}

func TestMain(m *testing.M) {
	code := m.Run()
	if benchTree.dir != "" {
		os.RemoveAll(benchTree.dir)
	}
	os.Exit(code)
}

func genMixedTree(root string) error {
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("the quick brown fox jumps over lazy dog func return if else for range " +
		"package import struct interface error nil context string int64 byte map slice envd layer " +
		"overlay snapshot container image manifest digest registry")
	for i := range 2000 {
		var sb strings.Builder
		n := 4<<10 + rng.IntN(60<<10)
		for sb.Len() < n {
			sb.WriteString(words[rng.IntN(len(words))])
			if rng.IntN(12) == 0 {
				sb.WriteString(fmt.Sprintf(" %d\n", rng.IntN(100000)))
			} else {
				sb.WriteByte(' ')
			}
		}
		p := filepath.Join(root, "src", fmt.Sprintf("pkg%02d", i%40), fmt.Sprintf("file%04d.txt", i))
		if err := writeBenchFile(p, []byte(sb.String())); err != nil {
			return err
		}
	}
	random := func(n int) []byte {
		buf := make([]byte, n)
		for i := 0; i+8 <= n; i += 8 {
			v := rng.Uint64()
			for j := range 8 {
				buf[i+j] = byte(v >> (8 * j))
			}
		}
		return buf
	}
	for i := range 8 {
		if err := writeBenchFile(filepath.Join(root, "blobs", fmt.Sprintf("blob%d.bin", i)), random(4<<20)); err != nil {
			return err
		}
	}
	for i := range 200 {
		if err := writeBenchFile(filepath.Join(root, "cache", fmt.Sprintf("c%03d.bin", i)), random(1<<10+rng.IntN(16<<10))); err != nil {
			return err
		}
	}
	return nil
}

func writeBenchFile(p string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o644)
}

// BenchmarkEncode reports MB/s of spool tar encoded, and the compressed size
// as a fraction of the spool ("ratio"). "disk" writes the layer to the test's
// temp dir and includes Encode's fsync (about 110 MB/s on the 2-core VM, so
// it dominates); "tmpfs" writes to /dev/shm and shows the compression speed.
func BenchmarkEncode(b *testing.B) {
	spoolPath, size := benchSpool(b)
	for _, c := range []Compression{Estargz, Zstd, Gzip} {
		for _, bc := range []struct {
			where string
			level int
		}{{"disk", 0}, {"tmpfs", 0}, {"tmpfs", 3}, {"tmpfs", 6}} {
			if c == Zstd && bc.level == 6 {
				continue
			}
			b.Run(fmt.Sprintf("%s/%s/level=%d", c, bc.where, bc.level), func(b *testing.B) {
				outDir := b.TempDir()
				if bc.where == "tmpfs" {
					var err error
					if outDir, err = os.MkdirTemp("/dev/shm", "envd-bench-"); err != nil {
						b.Skip("no tmpfs at /dev/shm:", err)
					}
					b.Cleanup(func() { os.RemoveAll(outDir) })
				}
				b.SetBytes(size)
				var layer Layer
				for b.Loop() {
					var err error
					layer, err = Encode(context.Background(), spoolPath, outDir, EncodeOptions{Compression: c, Level: bc.level})
					if err != nil {
						b.Fatal(err)
					}
					os.Remove(layer.Path)
				}
				b.ReportMetric(float64(layer.Size)/float64(size), "ratio")
			})
		}
	}
}

// BenchmarkSpool is the freeze window's part: reading the upper dir (here from
// the page cache) into a spool file.
func BenchmarkSpool(b *testing.B) {
	benchSpool(b)
	upper := filepath.Join(benchTree.dir, "upper")
	b.SetBytes(benchTree.size)
	out := filepath.Join(b.TempDir(), "spool.tar")
	for b.Loop() {
		f, err := os.Create(out)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Spool(context.Background(), upper, f, SpoolOptions{}); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
}
