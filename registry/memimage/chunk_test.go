package memimage

import (
	"bytes"
	"crypto/sha256"
	"hash/crc32"
	mrand "math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pagesOf is what scanPages makes of b.
func pagesOf(b []byte) []page {
	ps := make([]page, (len(b)+pageSize-1)/pageSize)
	for i := range ps {
		pg := b[i*pageSize : min(len(b), (i+1)*pageSize)]
		if isZero(pg) {
			ps[i] = page{zero: true}
		} else {
			ps[i] = page{hash: crc32.Checksum(pg, castagnoli)}
		}
	}
	return ps
}

// seededBytes is n bytes from a seeded generator, the same in every run.
func seededBytes(seed uint64, n int) []byte {
	r := mrand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	b := make([]byte, n)
	_, _ = r.Read(b)
	return b
}

// checkTiling asserts that exts tile [0, size) and keep c's bounds: holes
// only of zeros and at least MinHole long (or a file of zeros), chunks not
// all zeros and no longer than Max, and shorter than Min only before a hole
// or at the end.
func checkTiling(t *testing.T, c Chunking, b []byte, exts []extent) {
	t.Helper()
	var off int64
	for k, e := range exts {
		require.Equal(t, off, e.off, "extent %d starts where the one before ends", k)
		require.Positive(t, e.n, "extent %d", k)
		data := b[e.off : e.off+e.n]
		if e.hole {
			assert.True(t, isZero(data), "hole %d holds only zeros", k)
			if k > 0 && k < len(exts)-1 {
				assert.GreaterOrEqual(t, e.n, c.MinHole, "hole %d", k)
			}
			if k > 0 {
				assert.False(t, exts[k-1].hole, "holes %d and %d are merged", k-1, k)
			}
		} else {
			assert.False(t, isZero(data), "chunk %d is not all zeros", k)
			assert.LessOrEqual(t, e.n, c.Max, "chunk %d", k)
			if e.n < c.Min && k < len(exts)-1 {
				assert.True(t, exts[k+1].hole, "chunk %d of %d bytes is shorter than the minimum before a hole only", k, e.n)
			}
		}
		off += e.n
	}
	assert.Equal(t, int64(len(b)), off, "the extents cover the file")
}

// chunkSet maps the sha256 of each chunk of b to its length.
func chunkSet(b []byte, exts []extent) map[[32]byte]int64 {
	out := map[[32]byte]int64{}
	for _, e := range exts {
		if !e.hole {
			out[sha256.Sum256(b[e.off:e.off+e.n])] = e.n
		}
	}
	return out
}

// newBytes is the bytes of b's chunks that are not among a's.
func newBytes(a, b map[[32]byte]int64) (fresh, total int64) {
	for d, n := range b {
		total += n
		if _, ok := a[d]; !ok {
			fresh += n
		}
	}
	return fresh, total
}

func TestCutTilesAndKeepsBounds(t *testing.T) {
	t.Parallel()
	c := chunking(DefaultChunkSize)
	zeros := func(n int) []byte { return make([]byte, n) }
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"random, a partial last page", seededBytes(1, 40<<20+1234)},
		{"zeros only", zeros(8 << 20)},
		{"empty", nil},
		{"one byte", []byte{7}},
		{"zero runs of every length", func() []byte {
			var b []byte
			for run := range 40 {
				b = append(b, seededBytes(uint64(run), (run%5+1)*pageSize+run)...)
				b = append(b, zeros(run*pageSize+pageSize-len(b)%pageSize)...)
			}
			return b
		}()},
		{"a short zero run at the end", append(seededBytes(2, 3<<20), zeros(3*pageSize+10)...)},
		{"a long zero run at the start", append(zeros(5<<20), seededBytes(3, 3<<20)...)},
		{"one page repeated", bytes.Repeat(seededBytes(4, pageSize), 3000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exts := c.cut(pagesOf(tc.b), int64(len(tc.b)))
			checkTiling(t, c, tc.b, exts)
		})
	}

	// Zero runs: from MinHole long they are holes, shorter ones stay in
	// their chunk.
	b := seededBytes(5, 4<<20)
	clear(b[1<<20 : 1<<20+int(c.MinHole)])          // a hole
	clear(b[3<<20 : 3<<20+int(c.MinHole)-pageSize]) // not one
	exts := c.cut(pagesOf(b), int64(len(b)))
	checkTiling(t, c, b, exts)
	var holes []extent
	for _, e := range exts {
		if e.hole {
			holes = append(holes, e)
		}
	}
	assert.Equal(t, []extent{{off: 1 << 20, n: c.MinHole, hole: true}}, holes)
}

// Pages inserted and removed near the start, and a contiguous tenth
// rewritten (what runsc's pages.img looked like after a program rewrote a
// tenth of its heap): the second version's chunks are mostly the first's.
func TestCutSurvivesAShift(t *testing.T) {
	t.Parallel()
	c := chunking(DefaultChunkSize)
	a := seededBytes(6, 128<<20)
	b := append([]byte{}, a[:100*pageSize]...)
	b = append(b, seededBytes(7, 4*pageSize)...) // 4 pages inserted
	b = append(b, a[100*pageSize:5000*pageSize]...)
	b = append(b, a[5002*pageSize:]...) // 2 pages removed
	rewrite := b[len(b)/3 : len(b)/3+len(b)/10]
	copy(rewrite, seededBytes(8, len(rewrite)))

	ea, eb := c.cut(pagesOf(a), int64(len(a))), c.cut(pagesOf(b), int64(len(b)))
	checkTiling(t, c, a, ea)
	checkTiling(t, c, b, eb)
	fresh, total := newBytes(chunkSet(a, ea), chunkSet(b, eb))
	share := float64(fresh) / float64(total)
	t.Logf("%d chunks, %d of %d bytes new: %.1f%%", len(eb), fresh, total, 100*share)
	assert.Less(t, share, 0.2, "10%% rewritten and 6 pages moved re-store little more than 10%%")
	assert.Greater(t, share, 0.1, "the rewritten tenth is new")

	// Other averages, for the notes (docs/notes/running-state.md, "Chunks").
	for _, avg := range []int64{256 << 10, 512 << 10, 2 << 20, 4 << 20} {
		c := chunking(avg)
		ea, eb := c.cut(pagesOf(a), int64(len(a))), c.cut(pagesOf(b), int64(len(b)))
		fresh, total := newBytes(chunkSet(a, ea), chunkSet(b, eb))
		t.Logf("average %7d: %4d chunks, %5.1f%% new", avg, len(eb), 100*float64(fresh)/float64(total))
	}

	// Fixed chunks, for comparison: everything after the insertion is new.
	fixed := func(b []byte) []extent {
		var out []extent
		for off := int64(0); off < int64(len(b)); off += DefaultChunkSize {
			out = append(out, extent{off: off, n: min(DefaultChunkSize, int64(len(b))-off)})
		}
		return out
	}
	ffresh, _ := newBytes(chunkSet(a, fixed(a)), chunkSet(b, fixed(b)))
	t.Logf("fixed 1 MiB chunks: %d bytes new (%.1f%%)", ffresh, 100*float64(ffresh)/float64(total))
	assert.Greater(t, ffresh, total*9/10)
}

// An image that would have more chunks than a manifest holds is cut with
// a larger average; past the largest it is refused.
func TestCutFilesScalesTheAverage(t *testing.T) {
	t.Parallel()
	b := seededBytes(9, 32<<20)
	ps := [][]page{pagesOf(b)}
	sizes := []int64{int64(len(b))}
	s := &Store{o: defaultOptions()}

	c, exts, err := s.cutFiles(ps, sizes)
	require.NoError(t, err)
	assert.Equal(t, int64(DefaultChunkSize), c.Avg)
	n := len(exts[0])
	assert.InDelta(t, 32, n, 12, "about one chunk per MiB")

	s.o.maxChunks = n - 1
	c, exts, err = s.cutFiles(ps, sizes)
	require.NoError(t, err)
	assert.Equal(t, int64(2*DefaultChunkSize), c.Avg, "twice the average")
	assert.LessOrEqual(t, len(exts[0]), n-1)
	checkTiling(t, c, b, exts[0])

	s.o.maxChunks = 0
	_, _, err = s.cutFiles(ps, sizes)
	assert.ErrorContains(t, err, "more than a manifest holds (0)")
}

// Scattered writes cost more than contiguous ones: a chunk is stored again
// when any of its pages changed. The figure (10% of a 128 MiB image
// rewritten in runs of a given length at random places) is logged for
// docs/notes/running-state.md; the share is at least what changed and
// grows as the runs shorten.
func TestCutScatteredWritesFigure(t *testing.T) {
	t.Parallel()
	c := chunking(DefaultChunkSize)
	a := seededBytes(14, 128<<20)
	ea := c.cut(pagesOf(a), int64(len(a)))
	sa := chunkSet(a, ea)
	r := mrand.New(mrand.NewPCG(3, 4))
	last := 0.0
	for _, run := range []int{16 << 20, 1 << 20, 256 << 10, 64 << 10, 4 << 10} {
		b := append([]byte{}, a...)
		for written := 0; written < len(b)/10; written += run {
			off := r.IntN(len(b)/run) * run
			copy(b[off:off+run], seededBytes(uint64(off), run))
		}
		eb := c.cut(pagesOf(b), int64(len(b)))
		fresh, total := newBytes(sa, chunkSet(b, eb))
		share := float64(fresh) / float64(total)
		t.Logf("10%% rewritten in runs of %8d bytes: %5.1f%% of the second image new", run, 100*share)
		assert.GreaterOrEqual(t, share, 0.09, "runs of %d", run)
		assert.GreaterOrEqual(t, share, last-0.02, "runs of %d cost no less than longer ones", run)
		last = share
	}
}
