package snapshotter

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/containerd/stargz-snapshotter/estargz"
	kgzip "github.com/klauspost/compress/gzip"
	digest "github.com/opencontainers/go-digest"
)

// The eStargz encoder. It writes the same blob as estargz.Build with one
// part (WithParallelism(1)) and fastGzip as its compression, byte for byte
// (TestEstargzSameAsBuild), but compresses the gzip members on all workers
// at once and writes the blob once, in order:
//
//   - The layout of estargz.Writer (v0.19.1, no MinChunkSize): a new gzip
//     member starts at every chunk (4 MiB at most) of a regular file's
//     content; the member holds that chunk, the file's tar padding after
//     its last chunk, and the headers of the entries that follow, up to and
//     including the header of the next non-empty regular file. The first
//     member starts with the first header. A member followed by a chunk ends
//     with a flush (an empty stored block) before its gzip trailer; the last
//     one does not. The TOC and footer follow (GzipCompressor).
//   - Headers are those Build writes: every header is encoded by
//     tar.Writer, read back by tar.Reader, and encoded again (Build copies
//     the tar once through readerFromEntries and once through AppendTar);
//     the TOC entry is made from the header read back.
//   - Members are independent, so they are compressed in parallel and
//     written in order by one goroutine, which also hashes the uncompressed
//     bytes (the DiffID) and the blob (its digest, in Encode). Nothing is
//     staged on disk and nothing is decompressed.
//
// Compared with Build, the blob no longer depends on the number of workers,
// and a file of more than one chunk has no whole-file digest in the TOC
// (writeEstargz; with EncodeOptions.wholeFileDigests, the blob is Build's).

// esgzChunkSize is estargz.Writer's default chunk size.
const esgzChunkSize = 4 << 20

// esgzEntry is one tar entry of the layer: its header and, for a regular
// file, where its content is (hdr.Size bytes at off in src).
type esgzEntry struct {
	hdr *tar.Header
	src io.ReaderAt
	off int64
}

// esgzPiece is a run of a member's uncompressed bytes: an encoded header,
// or a chunk of content (n bytes at off in src) with the padding that
// follows it when it is a file's last chunk.
type esgzPiece struct {
	header []byte
	src    io.ReaderAt
	off, n int64
	pad    int64
	toc    *estargz.TOCEntry // the chunk's TOC entry (Offset, ChunkDigest filled in)
	file   *esgzFile         // the file the chunk belongs to
}

// esgzFile is a regular file with content, for its TOC digest.
type esgzFile struct {
	ent    *estargz.TOCEntry // its first TOC entry
	chunks int
	sum    hash.Hash // over all chunks, if more than one and whole-file digests are asked for
}

// esgzMember is one gzip member to write.
type esgzMember struct {
	pieces []esgzPiece
	flush  bool // a chunk follows: Flush before Close, as estargz.Writer does
}

// esgzResult is a compressed member with its uncompressed content (for the
// hashes computed in order).
type esgzResult struct {
	slot *esgzSlot
	data []byte // the member's chunk (a member holds at most one), in slot.data
	err  error
}

// esgzSlot holds one member in flight: its chunk and its compressed bytes.
// A member with more than esgzSmallMember bytes of content takes one of a
// fixed set of slots, reused (no 4 MiB allocation per chunk, so the garbage
// collector, whose preemptions cost much CPU here, stays quiet); a smaller
// one gets a slot of its own, sized to it.
type esgzSlot struct {
	data   []byte // the chunk, allocated at first use
	gz     bytes.Buffer
	shared bool // one of the fixed set: return it after the write
}

// esgzSmallMember is the most content a member may have and still get a
// slot of its own (see esgzSlot).
const esgzSmallMember = 256 << 10

// cleanEntryName is estargz's name normalization.
func cleanEntryName(name string) string {
	return strings.TrimPrefix(path.Clean("/"+name), "/")
}

// esgzSort orders entries as estargz.Build does: entries of the TOC's own
// name and old landmarks dropped, a later entry of a name replacing an
// earlier one, the prioritized files (each after its parent directories and
// a hard link's target) first, then the landmark, then the rest in tar
// order. Prioritized names not in the tar are returned as missed.
func esgzSort(in []esgzEntry, prioritized []string) (out []esgzEntry, missed []string) {
	index := make(map[string]int, len(in))
	var kept []esgzEntry
	dropped := 0
	for _, e := range in {
		name := cleanEntryName(e.hdr.Name)
		if name == estargz.PrefetchLandmark || name == estargz.NoPrefetchLandmark {
			continue
		}
		if i, ok := index[name]; ok {
			kept[i].hdr = nil // replaced
			dropped++
		}
		index[name] = len(kept)
		kept = append(kept, e)
	}
	if dropped > 0 {
		compact := kept[:0]
		index = make(map[string]int, len(kept))
		for _, e := range kept {
			if e.hdr != nil {
				index[cleanEntryName(e.hdr.Name)] = len(compact)
				compact = append(compact, e)
			}
		}
		kept = compact
	}

	picked := make(map[string]bool)
	out = make([]esgzEntry, 0, len(kept)+1)
	var move func(name string) bool
	move = func(name string) bool {
		name = cleanEntryName(name)
		if name == "" {
			if i, ok := index[name]; ok && !picked[name] {
				out = append(out, kept[i])
				picked[name] = true
			}
			return true
		}
		i, in := index[name]
		if !in && !picked[name] {
			return false
		}
		parent, _ := path.Split(strings.TrimSuffix(name, "/"))
		if !move(parent) {
			return false
		}
		if in && kept[i].hdr.Typeflag == tar.TypeLink {
			if !move(kept[i].hdr.Linkname) {
				return false
			}
		}
		if picked[name] {
			return true
		}
		if in {
			out = append(out, kept[i])
			picked[name] = true
		}
		return true
	}
	for _, p := range prioritized {
		if !move(p) {
			missed = append(missed, p)
		}
	}
	landmark := estargz.NoPrefetchLandmark
	if len(prioritized) > 0 {
		landmark = estargz.PrefetchLandmark
	}
	out = append(out, esgzEntry{
		hdr: &tar.Header{Name: landmark, Typeflag: tar.TypeReg, Size: 1},
		src: bytes.NewReader([]byte{0xf}), // estargz's landmark content
	})
	for _, e := range kept {
		if !picked[cleanEntryName(e.hdr.Name)] {
			out = append(out, e)
		}
	}
	return out, missed
}

// esgzHeader returns the header as Build's AppendTar sees it and the bytes
// it writes for it: encoded, read back, encoded again.
func esgzHeader(h *tar.Header) (*tar.Header, []byte, error) {
	back, err := tarRoundTrip(h)
	if err != nil {
		return nil, nil, err
	}
	var out bytes.Buffer
	if err := tar.NewWriter(&out).WriteHeader(back); err != nil {
		return nil, nil, fmt.Errorf("encode header %q: %w", h.Name, err)
	}
	return back, out.Bytes(), nil
}

// esgzPlan lays the entries out in members and makes their TOC entries, as
// estargz.Writer.AppendTar does (Offset and digests are filled in when the
// members are written). With wholeFileDigests, a file of several chunks
// gets the digest of its whole content in its first entry, as estargz
// writes it; without, it has only its chunks' digests (see writeEstargz).
func esgzPlan(entries []esgzEntry, wholeFileDigests bool) ([]esgzMember, *estargz.JTOC, error) {
	toc := &estargz.JTOC{Version: 1}
	lastUname, lastGname := map[int]string{}, map[int]string{}
	ifChanged := func(m map[int]string, id int, name string) string {
		if name == "" || m[id] == name {
			return ""
		}
		m[id] = name
		return name
	}
	var members []esgzMember
	cur := -1
	for _, e := range entries {
		h, hb, err := esgzHeader(e.hdr)
		if err != nil {
			return nil, nil, err
		}
		if cleanEntryName(h.Name) == estargz.TOCTarName {
			continue
		}
		xattrs := make(map[string][]byte)
		for k, v := range h.PAXRecords {
			if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
				xattrs[name] = []byte(v)
			}
		}
		ent := &estargz.TOCEntry{
			Name: h.Name, Mode: h.Mode, UID: h.Uid, GID: h.Gid,
			Uname:       ifChanged(lastUname, h.Uid, h.Uname),
			Gname:       ifChanged(lastGname, h.Gid, h.Gname),
			ModTime3339: formatModtime(h.ModTime),
			Xattrs:      xattrs,
		}
		switch h.Typeflag {
		case tar.TypeLink:
			ent.Type, ent.LinkName = "hardlink", h.Linkname
		case tar.TypeSymlink:
			ent.Type, ent.LinkName = "symlink", h.Linkname
		case tar.TypeDir:
			ent.Type = "dir"
		case tar.TypeReg:
			ent.Type, ent.Size = "reg", h.Size
		case tar.TypeChar:
			ent.Type, ent.DevMajor, ent.DevMinor = "char", int(h.Devmajor), int(h.Devminor)
		case tar.TypeBlock:
			ent.Type, ent.DevMajor, ent.DevMinor = "block", int(h.Devmajor), int(h.Devminor)
		case tar.TypeFifo:
			ent.Type = "fifo"
		default:
			return nil, nil, fmt.Errorf("unsupported tar entry %q of type %q", h.Name, h.Typeflag)
		}
		if cur < 0 {
			members = append(members, esgzMember{})
			cur = 0
		}
		members[cur].pieces = append(members[cur].pieces, esgzPiece{header: hb})
		if h.Typeflag != tar.TypeReg || h.Size == 0 {
			if h.Typeflag == tar.TypeReg {
				ent.Digest = emptyDigest
			}
			toc.Entries = append(toc.Entries, ent)
			continue
		}
		f := &esgzFile{ent: ent, chunks: int((h.Size + esgzChunkSize - 1) / esgzChunkSize)}
		if f.chunks > 1 && wholeFileDigests {
			f.sum = sha256.New()
		}
		for written := int64(0); written < h.Size; {
			n := min(int64(esgzChunkSize), h.Size-written)
			if n == esgzChunkSize {
				ent.ChunkSize = n
			}
			ent.ChunkOffset = written
			members[cur].flush = true
			members = append(members, esgzMember{})
			cur++
			p := esgzPiece{src: e.src, off: e.off + written, n: n, toc: ent, file: f}
			written += n
			if written == h.Size {
				p.pad = (512 - h.Size%512) % 512
			}
			members[cur].pieces = append(members[cur].pieces, p)
			toc.Entries = append(toc.Entries, ent)
			ent = &estargz.TOCEntry{Name: h.Name, Type: "chunk"}
		}
	}
	return members, toc, nil
}

// emptyDigest is the sha256 of no bytes, the TOC digest of an empty file.
var emptyDigest = digest.Canonical.FromBytes(nil).String()

// formatModtime is estargz's TOC time format.
func formatModtime(t time.Time) string {
	if t.IsZero() || t.Unix() == 0 {
		return ""
	}
	return t.UTC().Round(time.Second).Format(time.RFC3339)
}

// esgzOut is what writeEstargz reports.
type esgzOut struct {
	diffID           digest.Digest
	uncompressedSize int64
	tocDigest        digest.Digest
	missed           []string
}

// writeEstargz writes the eStargz blob of entries to w (see the top of this
// file), compressing members on workers goroutines.
//
// Unless wholeFileDigests is set, a regular file of more than one chunk gets
// no "digest" in the TOC, only its chunks' "chunkDigest"s: the eStargz spec
// makes both optional, the stargz snapshotter verifies every read against
// the chunk digests and never reads a chunked file's whole digest, and
// hashing every large file a second time was about a fifth of the save's
// hashing. A file of one chunk keeps its digest (it is its chunk digest).
func writeEstargz(ctx context.Context, w io.Writer, entries []esgzEntry, level, workers int, prioritized []string, wholeFileDigests bool) (esgzOut, error) {
	var out esgzOut
	entries, out.missed = esgzSort(entries, prioritized)
	members, toc, err := esgzPlan(entries, wholeFileDigests)
	if err != nil {
		return out, err
	}
	workers = max(workers, 1)
	if _, err := kgzip.NewWriterLevel(io.Discard, level); err != nil {
		return out, err
	}

	diff := sha256.New()
	var off, size int64
	zeros := make([]byte, 512)
	// write hashes member i's uncompressed bytes in order and writes its
	// compressed bytes; it runs for one member at a time, in order.
	write := func(i int, r *esgzResult) error {
		for _, p := range members[i].pieces {
			if p.header != nil {
				diff.Write(p.header)
				size += int64(len(p.header))
				continue
			}
			data := r.data
			p.toc.Offset = off
			diff.Write(data)
			diff.Write(zeros[:p.pad])
			size += p.n + p.pad
			switch {
			case p.file.sum != nil:
				p.file.sum.Write(data)
				if p.toc.Type == "chunk" && p.toc.ChunkOffset+p.n == p.file.ent.Size {
					p.file.ent.Digest = digest.NewDigest(digest.SHA256, p.file.sum).String()
				}
			case p.file.chunks == 1:
				p.file.ent.Digest = p.toc.ChunkDigest
			}
		}
		n, err := w.Write(r.slot.gz.Bytes())
		off += int64(n)
		return err
	}

	// Workers claim members in order and compress them. Whoever finishes a
	// member while nobody writes becomes the writer and writes every
	// finished member in order, so that only workers goroutines run and
	// the in-order hashing takes turns with compression instead of
	// competing with it. What is claimed and not yet written is bounded by
	// content bytes (budget; a member is always claimable when nothing is
	// in flight) and by the fixed slots of large members, not by a count of
	// members: a worker on a 4 MiB chunk does not stall the other after a
	// few small files.
	sizes := make([]int64, len(members))
	for i, m := range members {
		for _, p := range m.pieces {
			sizes[i] += p.n
		}
	}
	var (
		mu        sync.Mutex
		cond      = sync.NewCond(&mu)
		results   = make([]esgzResult, len(members))
		done      = make([]bool, len(members))
		claimed   int
		next      int
		inFlight  int64 // content bytes claimed and not written
		bigFlight int   // members holding a shared slot
		writing   bool
		failed    error
	)
	bigSlots := workers + 2
	budget := int64(bigSlots) * esgzChunkSize
	const maxAhead = 1024                   // members claimed and not written, whatever their size
	slots := make(chan *esgzSlot, bigSlots) // never waited for: bigFlight < bigSlots when one is taken
	for range bigSlots {
		slots <- &esgzSlot{shared: true}
	}
	claimable := func(i int) bool {
		if claimed == next {
			return true
		}
		return claimed-next < maxAhead && inFlight+sizes[i] <= budget &&
			(sizes[i] <= esgzSmallMember || bigFlight < bigSlots)
	}
	release := func(r *esgzResult) {
		if r.slot != nil && r.slot.shared {
			slots <- r.slot
		}
		r.slot, r.data = nil, nil
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			gz, _ := kgzip.NewWriterLevel(io.Discard, level)
			for {
				mu.Lock()
				for failed == nil && claimed < len(members) && !claimable(claimed) {
					cond.Wait()
				}
				if failed == nil {
					failed = ctx.Err()
				}
				if failed != nil || claimed == len(members) {
					mu.Unlock()
					return
				}
				i := claimed
				claimed++
				inFlight += sizes[i]
				big := sizes[i] > esgzSmallMember
				if big {
					bigFlight++
				}
				mu.Unlock()

				slot := &esgzSlot{}
				if big {
					slot = <-slots
				}
				r := compressMember(&members[i], gz, slot)

				mu.Lock()
				results[i], done[i] = r, true
				if r.err != nil && failed == nil {
					failed = r.err
					cond.Broadcast()
				}
				if writing {
					mu.Unlock()
					continue
				}
				writing = true
				for failed == nil && next < len(members) && done[next] {
					k := next
					mu.Unlock()
					err := write(k, &results[k])
					release(&results[k])
					mu.Lock()
					next++
					inFlight -= sizes[k]
					if sizes[k] > esgzSmallMember {
						bigFlight--
					}
					if err != nil && failed == nil {
						failed = err
					}
					cond.Broadcast()
				}
				writing = false
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if failed != nil {
		return out, failed
	}
	if next != len(members) {
		return out, fmt.Errorf("wrote %d of %d gzip members", next, len(members))
	}

	// The TOC member and the footer; the TOC's uncompressed bytes go to
	// the DiffID through the hash argument.
	counted := &countingWriter{w: w}
	tocHash := &sizedHash{Hash: diff}
	out.tocDigest, err = estargz.NewGzipCompressorWithLevel(level).WriteTOCAndFooter(counted, off, toc, tocHash)
	if err != nil {
		return out, fmt.Errorf("write TOC: %w", err)
	}
	out.diffID = digest.NewDigest(digest.SHA256, diff)
	out.uncompressedSize = size + tocHash.n
	return out, nil
}

// sizedHash counts what is written to its hash.
type sizedHash struct {
	hash.Hash
	n int64
}

func (s *sizedHash) Write(p []byte) (int, error) {
	s.n += int64(len(p))
	return s.Hash.Write(p)
}

// compressMember reads the member's chunk, hashes it (its TOC chunk
// digest) and compresses the member into one gzip member, in slot.
func compressMember(m *esgzMember, gz *kgzip.Writer, slot *esgzSlot) (r esgzResult) {
	r.slot = slot
	slot.gz.Reset()
	gz.Reset(&slot.gz)
	var zeros [512]byte
	for _, p := range m.pieces {
		if p.header != nil {
			if _, r.err = gz.Write(p.header); r.err != nil {
				return r
			}
			continue
		}
		if int64(len(slot.data)) < p.n {
			slot.data = make([]byte, p.n)
		}
		r.data = slot.data[:p.n]
		// A held file's ReadAt may fill the buffer and still fail (it
		// changed after the frozen pass): any error but a clean EOF counts.
		if n, err := p.src.ReadAt(r.data, p.off); int64(n) != p.n || (err != nil && !errors.Is(err, io.EOF)) {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			r.err = fmt.Errorf("read content of %q: %w", p.toc.Name, err)
			return r
		}
		sum := sha256.Sum256(r.data)
		p.toc.ChunkDigest = digest.NewDigestFromBytes(digest.SHA256, sum[:]).String()
		if _, r.err = gz.Write(r.data); r.err != nil {
			return r
		}
		if _, r.err = gz.Write(zeros[:p.pad]); r.err != nil {
			return r
		}
	}
	if m.flush {
		if r.err = gz.Flush(); r.err != nil {
			return r
		}
	}
	r.err = gz.Close()
	return r
}

// indexTar lists the entries of the tar in f (size bytes), each regular
// file's content left where it is.
func indexTar(f io.ReaderAt, size int64) ([]esgzEntry, error) {
	sr := &posReader{r: io.NewSectionReader(f, 0, size)}
	tr := tar.NewReader(sr)
	var entries []esgzEntry
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read spool tar: %w", err)
		}
		entries = append(entries, esgzEntry{hdr: h, src: f, off: sr.pos})
	}
}

// posReader tracks the position of a seekable reader, so that the content
// offset of the entry tar.Reader just read is known.
type posReader struct {
	r   *io.SectionReader
	pos int64
}

func (p *posReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.pos += int64(n)
	return n, err
}

func (p *posReader) Seek(off int64, whence int) (int64, error) {
	n, err := p.r.Seek(off, whence)
	if err == nil {
		p.pos = n
	}
	return n, err
}

// tarRoundTrip returns h as tar.Reader reads it back after tar.Writer
// encoded it.
func tarRoundTrip(h *tar.Header) (*tar.Header, error) {
	var buf bytes.Buffer
	if err := tar.NewWriter(&buf).WriteHeader(h); err != nil {
		return nil, fmt.Errorf("encode header %q: %w", h.Name, err)
	}
	back, err := tar.NewReader(&buf).Next()
	if err != nil {
		return nil, fmt.Errorf("read back header %q: %w", h.Name, err)
	}
	return back, nil
}
