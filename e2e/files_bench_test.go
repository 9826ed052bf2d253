package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"
)

// BenchmarkRootFilesThroughput compares the file API with exec through the
// same node, on one instance: reading a 64 MiB file (GET .../files against
// a streamed `exec cat`) and writing one (PUT .../files against a streamed
// `exec sh -c 'cat > F'` fed on stdin). The four variants run round-robin,
// -runs rounds (ENVD_BENCH_FILES_RUNS, default 5); it prints each variant's
// median MB/s and the API's ratio to exec, and reports them as metrics.
//
//	go test -count=1 -run '^$' -bench BenchmarkRootFilesThroughput -benchtime 1x ./e2e/
func BenchmarkRootFilesThroughput(b *testing.B) {
	const size = 64 << 20
	runs := 5
	if s := os.Getenv("ENVD_BENCH_FILES_RUNS"); s != "" {
		fmt.Sscan(s, &runs)
	}
	c := context.Background()
	name := fmt.Sprintf("filesbench-%d", time.Now().UnixNano()%1e9)
	if _, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: name, Base: fixtureBase}); err != nil {
		b.Fatal(err)
	}
	in, err := env.c.CreateInstance(c, name, types.CreateInstanceRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer env.c.DeleteInstance(context.Background(), in.ID)
	data := make([]byte, size)
	_, _ = rand.Read(data)
	if _, err := env.c.WriteFile(c, in.ID, "/root/src", bytes.NewReader(data)); err != nil {
		b.Fatal(err)
	}
	variants := []struct {
		name string
		run  func() (int64, error)
	}{
		{"read: file API", func() (int64, error) {
			r, err := env.c.ReadFile(c, in.ID, "/root/src", 0, 0)
			if err != nil {
				return 0, err
			}
			defer r.Close()
			return io.Copy(io.Discard, r)
		}},
		{"read: exec cat", func() (int64, error) {
			var n countWriter
			code, err := env.c.ExecStream(c, in.ID, types.ExecRequest{Args: []string{"cat", "/root/src"}}, types.Stdio{Stdout: &n, Stderr: io.Discard})
			if err == nil && code != 0 {
				err = fmt.Errorf("exit code %d", code)
			}
			return int64(n), err
		}},
		{"write: file API", func() (int64, error) {
			fi, err := env.c.WriteFile(c, in.ID, "/root/dst-api", bytes.NewReader(data))
			return fi.Size, err
		}},
		{"write: exec stdin", func() (int64, error) {
			code, err := env.c.ExecStream(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "cat > /root/dst-exec"}},
				types.Stdio{Stdin: bytes.NewReader(data), Stdout: io.Discard, Stderr: io.Discard})
			if err == nil && code != 0 {
				err = fmt.Errorf("exit code %d", code)
			}
			return size, err
		}},
	}
	times := make([][]time.Duration, len(variants))
	b.ResetTimer()
	for range b.N {
		for round := 0; round < runs; round++ {
			for i, v := range variants {
				start := time.Now()
				n, err := v.run()
				d := time.Since(start)
				if err != nil {
					b.Fatalf("%s: %v", v.name, err)
				}
				if n != size {
					b.Fatalf("%s: %d bytes, want %d", v.name, n, size)
				}
				times[i] = append(times[i], d)
			}
		}
	}
	b.StopTimer()
	mbps := func(i int) float64 {
		ds := slices.Clone(times[i])
		slices.Sort(ds)
		return float64(size) / (1 << 20) / ds[len(ds)/2].Seconds()
	}
	fmt.Fprintf(os.Stderr, "\n| 64 MiB, %d alternating runs | median MB/s | file API / exec |\n|---|---:|---:|\n", runs)
	for i, v := range variants {
		ratio := ""
		if i%2 == 0 {
			ratio = fmt.Sprintf("%.2f", mbps(i)/mbps(i+1))
		}
		fmt.Fprintf(os.Stderr, "| %s | %.0f | %s |\n", v.name, mbps(i), ratio)
	}
	b.ReportMetric(mbps(0), "read-api-MB/s")
	b.ReportMetric(mbps(1), "read-exec-MB/s")
	b.ReportMetric(mbps(2), "write-api-MB/s")
	b.ReportMetric(mbps(3), "write-exec-MB/s")
}

type countWriter int64

func (w *countWriter) Write(p []byte) (int, error) { *w += countWriter(len(p)); return len(p), nil }
