package memimage

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkMemImage measures, for a memory image of 64 and 256 MiB of
// random bytes (the worst case: no holes, nothing shared) in the embedded
// registry on loopback, with the default chunk size:
//
//   - push: a first push into a repository that holds none of it;
//   - push-changed: a second push after a contiguous tenth was rewritten,
//     into a repository holding the first (uploaded-B/op is what it adds);
//   - push-shifted: the same after 4 pages were also inserted near the
//     start (runsc's pages.img moved by a few pages: what content-defined
//     chunks are for);
//   - pull: a full pull into a new directory (what a non-lazy restore
//     waits for);
//   - first-byte: Get of the artifact, Open of pages.img and one 4 KiB
//     read in its middle (what a lazy restore waits for before its first
//     page).
//
// Run it on a quiet machine (docs/BENCHMARKS.md, "Memory images"):
//
//	go test -run '^$' -bench BenchmarkMemImage -benchtime 5x ./registry/memimage/
//
// A sub-benchmark's uploaded-B/op is that of its last iteration.
func BenchmarkMemImage(b *testing.B) {
	ctx := context.Background()
	for _, mib := range []int{64, 256} {
		s, _ := startStore(b)
		dir := randomImageDir(b, mib)
		changed := b.TempDir()
		copyDir(b, dir, changed)
		pages := filepath.Join(changed, "pages.img")
		p, err := os.ReadFile(pages)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = rand.Read(p[len(p)/3 : len(p)/3+len(p)/10])
		if err := os.WriteFile(pages, p, 0o600); err != nil {
			b.Fatal(err)
		}
		var size int64 = int64(len(p))
		shifted := b.TempDir()
		copyDir(b, changed, shifted)
		p = append(append(append([]byte{}, p[:64*pageSize]...), randomBytes(4*pageSize)...), p[64*pageSize:]...)
		if err := os.WriteFile(filepath.Join(shifted, "pages.img"), p, 0o600); err != nil {
			b.Fatal(err)
		}

		b.Run(fmt.Sprintf("%dMiB/push", mib), func(b *testing.B) {
			b.SetBytes(size)
			var up int64
			for i := 0; i < b.N; i++ {
				res, err := s.Push(ctx, PushRequest{Dir: dir, Repo: fmt.Sprintf("envd/bench/first%d", i)})
				if err != nil {
					b.Fatal(err)
				}
				up = res.Uploaded
			}
			b.ReportMetric(float64(up), "uploaded-B/op")
		})
		for _, second := range []struct{ name, dir string }{{"push-changed", changed}, {"push-shifted", shifted}} {
			b.Run(fmt.Sprintf("%dMiB/%s", mib, second.name), func(b *testing.B) {
				b.SetBytes(size)
				var up int64
				for i := 0; i < b.N; i++ {
					repo := fmt.Sprintf("envd/bench/%s%d", second.name, i)
					b.StopTimer()
					if _, err := s.Push(ctx, PushRequest{Dir: dir, Repo: repo}); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					res, err := s.Push(ctx, PushRequest{Dir: second.dir, Repo: repo})
					if err != nil {
						b.Fatal(err)
					}
					up = res.Uploaded
				}
				b.ReportMetric(float64(up), "uploaded-B/op")
			})
		}

		res, err := s.Push(ctx, PushRequest{Dir: dir, Repo: repo})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("%dMiB/pull", mib), func(b *testing.B) {
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				dst := filepath.Join(b.TempDir(), "pulled")
				a, err := s.Get(ctx, repo, res.Artifact.Digest)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Pull(ctx, a, dst); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				_ = os.RemoveAll(dst)
				b.StartTimer()
			}
		})
		b.Run(fmt.Sprintf("%dMiB/first-byte", mib), func(b *testing.B) {
			buf := make([]byte, 4096)
			for i := 0; i < b.N; i++ {
				a, err := s.Get(ctx, repo, res.Artifact.Digest)
				if err != nil {
					b.Fatal(err)
				}
				rd, err := s.Open(ctx, a, "pages.img")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := rd.ReadAt(buf, rd.Size()/2&^4095); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// randomImageDir is an image directory whose pages.img is mib MiB of
// random bytes.
func randomImageDir(b *testing.B, mib int) string {
	dir := b.TempDir()
	for name, n := range map[string]int{"checkpoint.img": 180_000, "pages.img": mib << 20, "pages_meta.img": 2200} {
		if err := os.WriteFile(filepath.Join(dir, name), randomBytes(n), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

func copyDir(b *testing.B, from, to string) {
	entries, err := os.ReadDir(from)
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err == nil {
			err = os.WriteFile(filepath.Join(to, e.Name()), data, 0o600)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}
