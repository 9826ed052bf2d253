package memimage

import (
	"encoding/json"
	"errors"
	mrand "math/rand/v2"
	"testing"

	"github.com/envd-dev/envd/errdefs"
)

// fuzzBlobs are the manifest's blobs for the check fuzzing: the index, then
// chunks of 4096, 8192 and 100 bytes.
var fuzzBlobs = []Blob{
	{Digest: "sha256:" + hex64('0'), Size: 500},
	{Digest: "sha256:" + hex64('a'), Size: 4096},
	{Digest: "sha256:" + hex64('b'), Size: 8192},
	{Digest: "sha256:" + hex64('c'), Size: 100},
}

func hex64(c byte) string {
	b := make([]byte, 64)
	for i := range b {
		b[i] = c
	}
	return string(b)
}

// checkSafe is the property check must give: whatever index it accepts,
// every file is tiled by its extents from 0 to its size, every chunk is a
// blob of the manifest with the chunk's length, and none is longer than the
// bound. It fails t otherwise, or when check refuses with another kind
// than errdefs.ErrInvalidArgument.
func checkSafe(t *testing.T, ix Index) {
	t.Helper()
	a := Artifact{Index: ix, Blobs: fuzzBlobs}
	if err := a.check(); err != nil {
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("check: %v, not invalid_argument", err)
		}
		return
	}
	sizes := map[string]int64{}
	for _, b := range fuzzBlobs[1:] {
		sizes[b.Digest] = b.Size
	}
	for fi := range ix.Files {
		f := &ix.Files[fi]
		offs := ix.offsets(f)
		if offs[0] != 0 || offs[len(offs)-1] != f.Size {
			t.Fatalf("file %q: extents from %d to %d, size %d", f.Name, offs[0], offs[len(offs)-1], f.Size)
		}
		for i, d := range f.Chunks {
			n := offs[i+1] - offs[i]
			if n <= 0 {
				t.Fatalf("file %q extent %d: %d bytes", f.Name, i, n)
			}
			if d != "" && (sizes[d] != n || n > maxChunkSize) {
				t.Fatalf("file %q chunk %d: %d bytes, blob %s of %d", f.Name, i, n, d, sizes[d])
			}
		}
		_ = a.Usage()
	}
}

// FuzzIndexCheck feeds check indexes as JSON (the seeds run in every go
// test; `go test -fuzz FuzzIndexCheck` explores further).
func FuzzIndexCheck(f *testing.F) {
	a, b, c := fuzzBlobs[1].Digest, fuzzBlobs[2].Digest, fuzzBlobs[3].Digest
	for _, ix := range []Index{
		{Chunking: &Chunking{Method: ChunkingMethod, Avg: 1 << 20, Min: 256 << 10, Max: 4 << 20, MinHole: 64 << 10},
			Files: []IndexFile{{Name: "pages.img", Size: 4096 + 8192 + 20000 + 100, Chunks: []string{a, b, "", c}, Lengths: []int64{4096, 8192, 20000, 100}}}},
		{ChunkSize: 4096, Files: []IndexFile{{Name: "pages.img", Size: 4096*2 + 100, Chunks: []string{a, "", ""}}}},
		{Chunking: &Chunking{Max: 8192}, Files: []IndexFile{{Name: "x", Size: 8192, Chunks: []string{b, a}, Lengths: []int64{8192, -4096}}}},
	} {
		raw, _ := json.Marshal(ix)
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var ix Index
		if json.Unmarshal(raw, &ix) != nil {
			return
		}
		checkSafe(t, ix)
	})
}

// Random changes to a valid content-defined index: whatever check accepts
// is safe to read (checkSafe), and a change of one length alone is always
// refused.
func TestIndexCheckRandomChanges(t *testing.T) {
	t.Parallel()
	r := mrand.New(mrand.NewPCG(1, 2))
	digests := []string{"", fuzzBlobs[1].Digest, fuzzBlobs[2].Digest, fuzzBlobs[3].Digest, "sha256:" + hex64('d')}
	base := func() Index {
		return Index{Chunking: &Chunking{Method: ChunkingMethod, Avg: 1 << 20, Min: 256 << 10, Max: 4 << 20, MinHole: 64 << 10},
			Files: []IndexFile{{Name: "pages.img", Size: 4096 + 8192 + 20000 + 100,
				Chunks: []string{digests[1], digests[2], "", digests[3]}, Lengths: []int64{4096, 8192, 20000, 100}}}}
	}
	good := base()
	if err := (&Artifact{Index: good, Blobs: fuzzBlobs}).check(); err != nil {
		t.Fatalf("the base index: %v", err)
	}
	accepted := 0
	for range 20000 {
		ix := base()
		f := &ix.Files[0]
		for range 1 + r.IntN(3) {
			switch r.IntN(6) {
			case 0:
				f.Lengths[r.IntN(len(f.Lengths))] += int64(r.IntN(16385) - 8192)
			case 1:
				f.Chunks[r.IntN(len(f.Chunks))] = digests[r.IntN(len(digests))]
			case 2:
				f.Size += int64(r.IntN(16385) - 8192)
			case 3:
				i := r.IntN(len(f.Chunks))
				f.Chunks, f.Lengths = append(f.Chunks[:i:i], f.Chunks[i+1:]...), append(f.Lengths[:i:i], f.Lengths[i+1:]...)
			case 4:
				f.Chunks, f.Lengths = append(f.Chunks, digests[r.IntN(len(digests))]), append(f.Lengths, int64(r.IntN(8193)))
			case 5:
				ix.Chunking.Max = int64(r.IntN(16385))
			}
			if len(f.Chunks) == 0 {
				break
			}
		}
		if (&Artifact{Index: ix, Blobs: fuzzBlobs}).check() == nil {
			accepted++
		}
		checkSafe(t, ix)
	}
	t.Logf("%d of 20000 changed indexes accepted", accepted)

	for i := range good.Files[0].Lengths {
		for _, delta := range []int64{-1, 1, -4096, 4096} {
			ix := base()
			ix.Files[0].Lengths[i] += delta
			if err := (&Artifact{Index: ix, Blobs: fuzzBlobs}).check(); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("length %d changed by %d: %v, want invalid_argument", i, delta, err)
			}
		}
	}
}
