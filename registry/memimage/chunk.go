package memimage

import (
	"context"
	"fmt"
	"hash/crc32"
	"os"
	"sync/atomic"

	"github.com/envd-dev/envd/errdefs"
)

// Content-defined chunking at page granularity.
//
// A file is cut into extents: runs of at least Chunking.MinHole bytes of
// zero pages are holes, and the bytes between holes are cut into chunks
// after every page whose hash is a boundary, no chunk shorter than
// Chunking.Min (unless a hole or the file's end comes first) and none longer
// than Chunking.Max. Whether a page is a boundary depends on that page's
// bytes only, so pages inserted or removed anywhere (runsc's pages.img moved
// by a few pages from one checkpoint to the next) change only the chunks
// around them: the cuts after them fall on the same pages as before, and
// so do the chunks.

// ChunkingMethod names the boundary function of a content-defined index:
// a page is a boundary when mix(CRC-32C of its bytes) mod ((Avg-Min)/4096)
// is zero (see boundary).
const ChunkingMethod = "page-crc32c"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// chunking derives a push's parameters from the average chunk size avg (a
// multiple of pageSize): a chunk is at least a quarter and at most four
// times the average, and a zero run is a hole from 64 KiB (or the minimum
// chunk, if smaller).
func chunking(avg int64) Chunking {
	c := Chunking{Method: ChunkingMethod, Avg: avg, Min: max(pageSize, avg/4&^(pageSize-1)), Max: 4 * avg}
	c.MinHole = min(c.Min, 64<<10)
	return c
}

// page is what the cut needs of one page of a file.
type page struct {
	hash uint32
	zero bool
}

// boundary says whether a page whose hash is h ends a chunk (once the
// chunk is at least c.Min long): on average one page in (Avg-Min)/4096,
// so that chunks average Avg. CRC-32C is linear, so its bits are mixed (a
// multiply by 2^64 over the golden ratio, high half) before the modulus.
func (c Chunking) boundary(h uint32) bool {
	div := uint64(max(1, (c.Avg-c.Min)/pageSize))
	return ((uint64(h)*0x9E3779B97F4A7C15)>>32)%div == 0
}

// extent is a range of a file: a hole, or a chunk to store.
type extent struct {
	off, n int64
	hole   bool
}

// cut makes the extents of a file of size bytes whose pages are ps.
func (c Chunking) cut(ps []page, size int64) []extent {
	var out []extent
	emit := func(from, to int, hole bool) {
		off, end := int64(from)*pageSize, min(size, int64(to)*pageSize)
		if n := len(out); n > 0 && hole && out[n-1].hole {
			out[n-1].n = end - out[n-1].off
			return
		}
		out = append(out, extent{off: off, n: end - off, hole: hole})
	}
	minPages, maxPages, holePages := int(c.Min/pageSize), int(c.Max/pageSize), int(c.MinHole/pageSize)
	start := 0      // first page of the chunk being made
	zeros := 0      // zero pages at its end
	allZero := true // a chunk of zero pages only (a short run at the file's end) is a hole too
	for i := 0; i < len(ps); {
		if ps[i].zero && zeros == 0 {
			// A run of zero pages long enough is a hole, and a boundary on
			// both sides.
			run := 1
			for i+run < len(ps) && ps[i+run].zero {
				run++
			}
			if run >= holePages {
				if i > start {
					emit(start, i, allZero)
				}
				emit(i, i+run, true)
				i += run
				start, allZero = i, true
				continue
			}
		}
		if ps[i].zero {
			zeros++
		} else {
			zeros, allZero = 0, false
		}
		n := i - start + 1
		if n >= maxPages || n >= minPages && !ps[i].zero && c.boundary(ps[i].hash) {
			emit(start, i+1, allZero)
			start, zeros, allZero = i+1, 0, true
		}
		i++
	}
	if start < len(ps) {
		emit(start, len(ps), allZero)
	}
	return out
}

// scanPages reads every page of files (sizes given) and returns each
// page's hash and whether it is all zeros, on the Store's jobs goroutines.
func (s *Store) scanPages(ctx context.Context, files []*os.File, names []string, sizes []int64) ([][]page, error) {
	const segPages = 1024 // 4 MiB a read
	type seg struct{ file, first int }
	var segs []seg
	out := make([][]page, len(files))
	for fi, size := range sizes {
		out[fi] = make([]page, (size+pageSize-1)/pageSize)
		for p := 0; p < len(out[fi]); p += segPages {
			segs = append(segs, seg{fi, p})
		}
	}
	var next atomic.Int64
	err := s.eachWorker(ctx, func(ctx context.Context) error {
		buf := make([]byte, segPages*pageSize)
		for {
			k := int(next.Add(1) - 1)
			if k >= len(segs) {
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			sg := segs[k]
			off := int64(sg.first) * pageSize
			b := buf[:min(int64(len(buf)), sizes[sg.file]-off)]
			if _, err := files[sg.file].ReadAt(b, off); err != nil {
				return fmt.Errorf("read %s at %d: %w", names[sg.file], off, err)
			}
			for p := 0; len(b) > 0; p++ {
				pg := b[:min(len(b), pageSize)]
				b = b[len(pg):]
				if isZero(pg) {
					out[sg.file][sg.first+p] = page{zero: true}
					continue
				}
				out[sg.file][sg.first+p] = page{hash: crc32.Checksum(pg, castagnoli)}
			}
		}
	})
	return out, err
}

// cutFiles cuts every file with the parameters of the smallest average
// chunk size, from s.o.chunkSize up, that gives at most s.o.maxChunks
// chunks: a bigger image gets bigger chunks rather than a manifest the
// registry refuses.
func (s *Store) cutFiles(pages [][]page, sizes []int64) (Chunking, [][]extent, error) {
	for avg := s.o.chunkSize; ; avg *= 2 {
		c := chunking(avg)
		exts := make([][]extent, len(pages))
		n := 0
		for fi := range pages {
			exts[fi] = c.cut(pages[fi], sizes[fi])
			for _, e := range exts[fi] {
				if !e.hole {
					n++
				}
			}
		}
		if n <= s.o.maxChunks {
			return c, exts, nil
		}
		if chunking(2*avg).Max > maxChunkSize {
			return Chunking{}, nil, fmt.Errorf("%d chunks at an average of %d bytes, more than a manifest holds (%d): %w",
				n, avg, s.o.maxChunks, errdefs.ErrInvalidArgument)
		}
	}
}
