package snapshotter

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/containerd/stargz-snapshotter/estargz"
	digest "github.com/opencontainers/go-digest"
)

// diffTee computes an eStargz blob's DiffID (the sha256 of its uncompressed
// tar) from the bytes estargz.Build hands to the gzip writers, so that the
// blob need not be decompressed again.
//
// How estargz.Build (v0.19.1) produces the uncompressed stream, which this
// relies on:
//   - It cuts the sorted entries into parts and builds each on its own
//     goroutine with its own estargz.Writer. Every byte of a part's
//     uncompressed tar goes through Compressor.Writer(cw).Write, where cw is
//     that part's own counting writer: one cw per part, the same for all of
//     the part's gzip members. diffTee groups the writes by cw.
//   - The blob is part 0 || part 1 || ... || TOC member || footer. The TOC
//     member's uncompressed bytes are what Compressor.WriteTOCAndFooter
//     writes to its diffHash argument (Build passes nil; fastGzip passes a
//     buffer). The footer is an empty gzip member.
//   - WriteTOCAndFooter gets the merged TOC, whose entries are in blob order.
//     A part's place is the TOC index of its first entry, read from the
//     first tar header of its uncompressed bytes.
//
// The part that will come first is recognized by its first entry (isFront)
// and hashed as it is written, on its own goroutine. The other parts' bytes
// are staged in unlinked files in the layer's directory (page cache; they
// rarely reach the disk) and hashed in order after Build returns, while the
// blob is copied out. If the order cannot be established (a name missing
// from the TOC or not unique, or the wrong part hashed first), order's ok is
// false and Encode falls back to decompressing the blob.
type diffTee struct {
	dir   string
	front []string // names that can open part 0 (see isFront)

	mu     sync.Mutex
	first  *teePart // hashed as written, not staged
	parts  map[io.Writer]*teePart
	err    error
	toc    *estargz.JTOC
	tocTar bytes.Buffer
}

// teePart is the uncompressed stream of one part. It is written by that
// part's goroutine only.
type teePart struct {
	t    *diffTee
	f    *os.File      // staged bytes; nil while undecided or if first
	bw   *bufio.Writer // to f
	sum  hash.Hash     // if first: the running DiffID
	n    int64
	head []byte // the first bytes, until the first entry's name is read
	name string // of the first entry
	err  error
}

// headLen covers a tar header with PAX records for long names and xattrs.
const headLen = 64 << 10

// newDiffTee stages in dir. prioritized are the paths given to
// estargz.WithPrioritizedFiles.
func newDiffTee(dir string, prioritized []string) *diffTee {
	t := &diffTee{dir: dir, parts: make(map[io.Writer]*teePart)}
	if len(prioritized) == 0 {
		// Build puts the landmark first when nothing is prioritized.
		t.front = []string{estargz.NoPrefetchLandmark}
	} else {
		// Otherwise the first prioritized file that exists, preceded by
		// its parent directories, or the landmark if none exists.
		t.front = []string{estargz.PrefetchLandmark}
		for p := path.Clean("/" + prioritized[0]); p != "/"; p = path.Dir(p) {
			t.front = append(t.front, p[1:])
		}
	}
	return t
}

// isFront tells whether a part whose first entry is name is likely part 0,
// the one whose bytes can be hashed at once. A wrong guess is caught by
// order, and Encode then decompresses instead.
func (t *diffTee) isFront(name string) bool {
	name = strings.TrimSuffix(strings.TrimPrefix(path.Clean("/"+name), "/"), "/")
	return slices.Contains(t.front, name)
}

// part returns the stream of the part whose compressed bytes go to cw.
func (t *diffTee) part(cw io.Writer) (*teePart, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.parts[cw]; ok {
		return p, nil
	}
	p := &teePart{t: t}
	t.parts[cw] = p
	return p, nil
}

func (p *teePart) write(b []byte) {
	if p.err != nil {
		return
	}
	p.n += int64(len(b))
	switch {
	case p.sum != nil:
		p.sum.Write(b)
	case p.bw != nil:
		_, p.err = p.bw.Write(b)
	default:
		p.head = append(p.head, b...)
		h, err := tar.NewReader(bytes.NewReader(p.head)).Next()
		if err != nil && len(p.head) < headLen {
			return // the header is not complete yet
		}
		if err == nil {
			p.name = h.Name
		}
		p.decide()
	}
}

// decide hashes the part from now on if it is the first, and stages it
// otherwise. The head written so far goes the same way.
func (p *teePart) decide() {
	head := p.head
	p.head = nil
	t := p.t
	t.mu.Lock()
	first := t.first == nil && p.name != "" && t.isFront(p.name)
	if first {
		t.first = p
	}
	t.mu.Unlock()
	if first {
		p.sum = sha256.New()
		p.sum.Write(head)
		return
	}
	f, err := os.CreateTemp(t.dir, ".diffid-*")
	if err == nil {
		// Unlinked at once: closing it is all the cleanup it needs.
		if err = os.Remove(f.Name()); err != nil {
			f.Close()
		}
	}
	if err != nil {
		p.err = err
		return
	}
	p.f, p.bw = f, bufio.NewWriterSize(f, 1<<20)
	_, p.err = p.bw.Write(head)
}

// setTOC records the merged TOC and returns where WriteTOCAndFooter should
// write the TOC member's uncompressed bytes.
func (t *diffTee) setTOC(toc *estargz.JTOC) *tocCapture {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.toc = toc
	t.tocTar.Reset()
	return &tocCapture{buf: &t.tocTar}
}

// order returns the parts in blob order, or ok false if it cannot tell.
func (t *diffTee) order() (_ []*teePart, ok bool, _ error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.parts {
		if p.sum == nil && p.bw == nil && p.err == nil {
			t.mu.Unlock()
			p.decide() // a part too short to read a header from
			t.mu.Lock()
		}
		if p.err == nil && p.bw != nil {
			p.err = p.bw.Flush()
		}
		if p.err != nil {
			return nil, false, fmt.Errorf("stage uncompressed part: %w", p.err)
		}
	}
	if t.toc == nil {
		return nil, false, nil
	}
	index := make(map[string]int, len(t.toc.Entries))
	for i, e := range t.toc.Entries {
		if e.Type == "chunk" {
			continue
		}
		if _, dup := index[e.Name]; dup {
			index[e.Name] = -1
			continue
		}
		index[e.Name] = i
	}
	type placed struct {
		at int
		p  *teePart
	}
	var ps []placed
	seen := make(map[int]bool)
	for _, p := range t.parts {
		if p.name == "" {
			return nil, false, nil
		}
		at, found := index[p.name]
		if !found || at < 0 || seen[at] {
			return nil, false, nil
		}
		seen[at] = true
		ps = append(ps, placed{at, p})
	}
	slices.SortFunc(ps, func(a, b placed) int { return a.at - b.at })
	if len(ps) == 0 || ps[0].p != t.first {
		// Nothing was hashed as written, or the wrong part was.
		return nil, false, nil
	}
	out := make([]*teePart, len(ps))
	for i := range ps {
		out[i] = ps[i].p
	}
	return out, true, nil
}

// diffID hashes the staged parts in blob order and then the TOC member. It
// runs while Encode copies the blob out, on the other core.
func (t *diffTee) diffID(parts []*teePart) (_ digest.Digest, size int64, _ error) {
	sum := parts[0].sum
	size = parts[0].n
	buf := make([]byte, 1<<20)
	for _, p := range parts[1:] {
		n, err := io.CopyBuffer(sum, io.NewSectionReader(p.f, 0, p.n), buf)
		if err != nil {
			return "", 0, fmt.Errorf("read staged part: %w", err)
		}
		if n != p.n {
			return "", 0, fmt.Errorf("staged part: %d bytes read, %d written: %w", n, p.n, io.ErrUnexpectedEOF)
		}
		size += n
	}
	sum.Write(t.tocTar.Bytes())
	size += int64(t.tocTar.Len())
	return digest.NewDigest(digest.SHA256, sum), size, nil
}

func (t *diffTee) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for _, p := range t.parts {
		if p.f != nil {
			errs = append(errs, p.f.Close())
		}
	}
	t.parts = nil
	return errors.Join(errs...)
}

// tocCapture is the hash.Hash handed to GzipCompressor.WriteTOCAndFooter: it
// keeps what is written (the TOC member's uncompressed tar, about 1 KiB per
// 5 entries of JSON) and sums nothing.
type tocCapture struct{ buf *bytes.Buffer }

func (c *tocCapture) Write(p []byte) (int, error) { return c.buf.Write(p) }
func (c *tocCapture) Sum(b []byte) []byte         { return b }
func (c *tocCapture) Reset()                      { c.buf.Reset() }
func (c *tocCapture) Size() int                   { return 0 }
func (c *tocCapture) BlockSize() int              { return 1 }

// drainReader stands in for the gzip reader of Build's own DiffID pass
// (fastGzip.Reader with a tee): it consumes the compressed blob, so that it
// flows on to Build's output, without decompressing it. Build's DiffID and
// UncompressedSize are then those of an empty stream and are not used.
type drainReader struct {
	r   io.Reader
	buf []byte
}

func (d *drainReader) Read([]byte) (int, error) {
	if d.r == nil {
		return 0, io.EOF
	}
	_, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{d.r}, d.buf)
	d.r = nil
	if err != nil {
		return 0, err
	}
	return 0, io.EOF
}

func (d *drainReader) Close() error { return nil }
