package snapshotter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/stargz-snapshotter/estargz"
	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/envd-dev/envd/api/errdefs"
)

// Compression names a layer encoding.
type Compression string

const (
	// Estargz is a gzip layer that the stargz snapshotter can pull lazily:
	// every file (and every 4 MiB chunk of a large one) is its own gzip
	// member, and a table of contents (stargz.index.json) ends the blob.
	// Any OCI runtime can still unpack it as a plain tar+gzip layer; it then
	// also creates /stargz.index.json and /.no.prefetch.landmark (or
	// /.prefetch.landmark), which estargz adds to every layer.
	Estargz Compression = "estargz"
	// Zstd is a plain tar+zstd layer.
	Zstd Compression = "zstd"
	// Gzip is a plain tar+gzip layer.
	Gzip Compression = "gzip"
)

// Default compression levels, chosen on a 2-core VM for a ~100 MB mixed tree
// (see BenchmarkEncode): the fastest levels compress within a few percent of
// the defaults but several times faster, and the save path waits for them.
const (
	// DefaultZstdLevel is zstd level 1 (klauspost's SpeedFastest).
	DefaultZstdLevel = 1
	// DefaultGzipLevel is gzip level 1 (BestSpeed), for Gzip and Estargz.
	// estargz.Build's own default is 9 (BestCompression), which is what made
	// it take 40 s for a 330 MB rootfs.
	DefaultGzipLevel = 1
)

// EncodeOptions configure Encode.
type EncodeOptions struct {
	// Compression is the layer encoding; default Estargz.
	Compression Compression
	// Level is the compression level: zstd levels 1-22 (mapped to the
	// nearest of klauspost's four encoder levels) or gzip levels 1-9 (also
	// for Estargz). 0 selects DefaultZstdLevel or DefaultGzipLevel.
	Level int
	// Workers is the number of compressing goroutines; 0 selects
	// runtime.NumCPU(). For Estargz it also fixes where the tar is split
	// into independently built parts, so a fixed value makes the blob
	// reproducible across machines.
	Workers int
	// PrioritizedFiles (Estargz only) are paths inside the rootfs
	// ("/usr/bin/python3") placed first in the blob, ahead of the prefetch
	// landmark, so the stargz snapshotter fetches them before the first
	// command runs. Paths not in the layer are ignored.
	PrioritizedFiles []string
}

// Layer describes an encoded layer file on disk.
type Layer struct {
	Path             string
	MediaType        string        // "application/vnd.oci.image.layer.v1.tar+gzip" for Gzip and Estargz, "...tar+zstd" for Zstd
	Digest           digest.Digest // of the compressed file
	DiffID           digest.Digest // of the uncompressed tar
	Size             int64         // of the compressed file
	UncompressedSize int64
	// Annotations for the layer's descriptor: for Estargz,
	// estargz.TOCJSONDigestAnnotation and estargz.StoreUncompressedSizeAnnotation.
	Annotations map[string]string
	Duration    time.Duration
}

// Encode compresses the spooled tar at tarPath into a new file in outDir,
// named after its digest ("sha256-<hex>"). The file is written under a
// temporary name, hashed while written, synced and renamed into place.
//
// For Zstd and Gzip the DiffID is the digest of the spool tar itself. For
// Estargz it is the digest of the blob's uncompressed content, which is a
// different tar than the spool: estargz rewrites the headers, adds its
// landmark file and the TOC entry. It is computed from the bytes given to
// the compressor (diffTee), not by decompressing the blob.
//
// estargz.Build stages its compressed parts in os.TempDir() ($TMPDIR) before
// Encode copies them into outDir, so $TMPDIR must be on a disk with room for
// the layer, not a small tmpfs. (Build offers no option for that directory,
// and setting $TMPDIR per call would race with the rest of the process.)
// Encode itself stages up to the uncompressed size of the layer, less its
// first part, in unlinked files in outDir.
func Encode(ctx context.Context, tarPath, outDir string, opts EncodeOptions) (_ Layer, rErr error) {
	start := time.Now()
	if opts.Compression == "" {
		opts.Compression = Estargz
	}
	if opts.Workers <= 0 {
		opts.Workers = runtime.NumCPU()
	}
	var mediaType string
	switch opts.Compression {
	case Zstd:
		mediaType = ocispec.MediaTypeImageLayerZstd
		if opts.Level == 0 {
			opts.Level = DefaultZstdLevel
		}
		if opts.Level < 1 || opts.Level > 22 {
			return Layer{}, fmt.Errorf("zstd level %d: %w", opts.Level, errdefs.ErrInvalidArgument)
		}
	case Gzip, Estargz:
		mediaType = ocispec.MediaTypeImageLayerGzip
		if opts.Level == 0 {
			opts.Level = DefaultGzipLevel
		}
		if opts.Level < 1 || opts.Level > 9 {
			return Layer{}, fmt.Errorf("gzip level %d: %w", opts.Level, errdefs.ErrInvalidArgument)
		}
	default:
		return Layer{}, fmt.Errorf("compression %q: %w", opts.Compression, errdefs.ErrInvalidArgument)
	}

	if err := ctx.Err(); err != nil {
		return Layer{}, err
	}
	in, err := os.Open(tarPath)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return Layer{}, fmt.Errorf("spool %q: %w", tarPath, errors.Join(errdefs.ErrNotFound, err))
		}
		return Layer{}, err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return Layer{}, err
	}

	tmp, err := os.CreateTemp(outDir, ".layer-*.partial")
	if err != nil {
		return Layer{}, fmt.Errorf("create layer file in %q: %w", outDir, err)
	}
	defer func() {
		if rErr != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	blobDigest := digest.Canonical.Digester()
	out := &countingWriter{w: io.MultiWriter(tmp, blobDigest.Hash())}
	bw := bufio.NewWriterSize(out, 1<<20)

	layer := Layer{MediaType: mediaType}
	src := &ctxReader{ctx: ctx, r: in}
	switch opts.Compression {
	case Zstd:
		err = encodeZstd(bw, src, opts, &layer)
	case Gzip:
		err = encodeGzip(bw, src, opts, &layer)
	case Estargz:
		err = encodeEstargz(ctx, bw, in, fi.Size(), outDir, opts, &layer)
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			// estargz.Build reports a cancellation as its own error text,
			// without wrapping the context's error.
			err = fmt.Errorf("%w: %v", cerr, err)
		}
		return Layer{}, fmt.Errorf("encode %q as %s: %w", tarPath, opts.Compression, err)
	}
	if opts.Compression != Estargz && layer.UncompressedSize != fi.Size() {
		return Layer{}, fmt.Errorf("spool %q changed while encoding (%d bytes read, %d expected): %w",
			tarPath, layer.UncompressedSize, fi.Size(), errdefs.ErrConflict)
	}
	if err := bw.Flush(); err != nil {
		return Layer{}, fmt.Errorf("write layer file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return Layer{}, fmt.Errorf("sync layer file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return Layer{}, fmt.Errorf("close layer file: %w", err)
	}
	layer.Digest = blobDigest.Digest()
	layer.Size = out.n
	layer.Path = filepath.Join(outDir, layer.Digest.Algorithm().String()+"-"+layer.Digest.Encoded())
	if err := os.Rename(tmp.Name(), layer.Path); err != nil {
		return Layer{}, fmt.Errorf("rename layer file: %w", err)
	}
	if err := syncDir(outDir); err != nil {
		return Layer{}, err
	}
	layer.Duration = time.Since(start)
	return layer, nil
}

func encodeZstd(w io.Writer, src io.Reader, opts EncodeOptions, layer *Layer) error {
	// klauspost's zstd streaming encoder with WithEncoderConcurrency(n)
	// compresses blocks on n goroutines into one frame: 0.40 s per 107 MB on
	// the 2-core VM at level 1. Cutting the input into 4 MiB frames and
	// compressing them with EncodeAll on parallel goroutines was slower here
	// (about 1 s), so the plain stream stays.
	enc, err := zstd.NewWriter(w,
		zstd.WithEncoderLevel(zstd.EncoderLevelFromZstd(opts.Level)),
		zstd.WithEncoderConcurrency(opts.Workers))
	if err != nil {
		return err
	}
	diffID := digest.Canonical.Digester()
	n, err := copyBuffered(enc, io.TeeReader(src, diffID.Hash()))
	if err != nil {
		enc.Close()
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	layer.DiffID, layer.UncompressedSize = diffID.Digest(), n
	return nil
}

func encodeGzip(w io.Writer, src io.Reader, opts EncodeOptions, layer *Layer) error {
	// pgzip compresses 1 MiB blocks on parallel goroutines into one standard
	// gzip member (blocks keep a 16 KiB dictionary from their predecessor):
	// 0.40 s per 107 MB on the 2-core VM at level 1.
	gz, err := pgzip.NewWriterLevel(w, opts.Level)
	if err != nil {
		return err
	}
	if err := gz.SetConcurrency(1<<20, 2*opts.Workers); err != nil {
		return err
	}
	diffID := digest.Canonical.Digester()
	n, err := copyBuffered(gz, io.TeeReader(src, diffID.Hash()))
	if err != nil {
		gz.Close()
		return err
	}
	if err := gz.Close(); err != nil {
		return err
	}
	layer.DiffID, layer.UncompressedSize = diffID.Digest(), n
	return nil
}

func encodeEstargz(ctx context.Context, w io.Writer, in io.ReaderAt, size int64, outDir string, opts EncodeOptions, layer *Layer) (rErr error) {
	// estargz.Build (v0.19.1) splits the tar into Workers parts by payload
	// size and builds each on its own goroutine (WithParallelism; default
	// GOMAXPROCS). Its gzip writer is the standard library's, allocated anew
	// for every file (each file is its own gzip member); fastGzip swaps in
	// klauspost's writers from a pool. Whiteout files (".wh.*") pass through
	// Build as ordinary empty files (TestRootRoundTrip).
	//
	// Build then decompresses the concatenated blob once more, sequentially,
	// while it is read, to compute the DiffID. fastGzip instead keeps the
	// uncompressed bytes it is given (diffTee) and Encode hashes them in
	// order while it copies the blob out, so nothing is decompressed. On the
	// 2-core VM (BenchmarkEncodeEstargzTree, medians of 3, noisy) that cut
	// the 100 MB generated tree from 0.89 s to 0.54 s and a 288 MB mixed tree
	// (apt lists, libraries, docs, random data) from 3.5 s to 2.9 s; see
	// docs/BENCHMARKS.md, "eStargz encode tuning". What remains is the
	// compression itself, estargz's own hashing (per-file and per-chunk
	// sha256 of every payload) and writing the blob twice (Build's parts in
	// $TMPDIR, then the layer file), whose page-cache first touches are slow
	// on this VM.
	tee := newDiffTee(outDir, opts.PrioritizedFiles)
	defer func() {
		if err := tee.Close(); err != nil && rErr == nil {
			rErr = err
		}
	}()
	gz := newFastGzip(opts.Level)
	gz.tee = tee
	var missed []string
	blob, err := estargz.Build(io.NewSectionReader(in, 0, size),
		estargz.WithContext(ctx),
		estargz.WithParallelism(opts.Workers),
		estargz.WithCompression(gz),
		estargz.WithPrioritizedFiles(opts.PrioritizedFiles),
		estargz.WithAllowPrioritizeNotFound(&missed),
	)
	if err != nil {
		return err
	}
	defer blob.Close()

	parts, ok, err := tee.order()
	if err != nil {
		return err
	}
	if !ok || testForceDecompressDiffID {
		ok = false
		estargzDiffIDFallbacks.Add(1)
	}
	type result struct {
		diffID digest.Digest
		size   int64
		err    error
	}
	done := make(chan result, 1)
	src := io.Reader(&ctxReader{ctx: ctx, r: blob})
	if ok {
		go func() {
			d, n, err := tee.diffID(parts)
			done <- result{d, n, err}
		}()
	} else {
		// Fallback: decompress the blob while it is copied, as Build would.
		pr, pw := io.Pipe()
		src = io.TeeReader(src, pw)
		go func() {
			d, n, err := gunzipDigest(pr)
			pr.CloseWithError(err) // unblocks the copy if this fails first
			done <- result{d, n, err}
		}()
		_, err := copyBuffered(w, src)
		pw.CloseWithError(err) // nil: EOF
		if err != nil {
			<-done
			return err
		}
	}
	if ok {
		if _, err := copyBuffered(w, src); err != nil {
			<-done
			return err
		}
	}
	res := <-done
	if res.err != nil {
		return fmt.Errorf("diff ID: %w", res.err)
	}
	layer.DiffID, layer.UncompressedSize = res.diffID, res.size
	layer.Annotations = map[string]string{
		estargz.TOCJSONDigestAnnotation:         blob.TOCDigest().String(),
		estargz.StoreUncompressedSizeAnnotation: strconv.FormatInt(res.size, 10),
	}
	return nil
}

// estargzDiffIDFallbacks counts the eStargz encodes whose DiffID took a
// decompression pass (diffTee could not order the parts); tests check it.
var estargzDiffIDFallbacks atomic.Int64

// testForceDecompressDiffID makes encodeEstargz take the fallback, for tests.
var testForceDecompressDiffID bool

// gunzipDigest returns the digest and size of the uncompressed content of
// the (multi-member) gzip stream r.
func gunzipDigest(r io.Reader) (digest.Digest, int64, error) {
	zr, err := kgzip.NewReader(r)
	if err != nil {
		return "", 0, err
	}
	defer zr.Close()
	d := digest.Canonical.Digester()
	n, err := copyBuffered(d.Hash(), zr)
	if err != nil {
		return "", 0, err
	}
	return d.Digest(), n, nil
}

// fastGzip is estargz's gzip Compression with klauspost's gzip writer and
// reader. The TOC and footer are still written by estargz.GzipCompressor.
// With a tee, it also keeps the uncompressed bytes for the DiffID and its
// Reader only drains the blob (see diffTee).
type fastGzip struct {
	*estargz.GzipCompressor
	*estargz.GzipDecompressor
	level int
	pool  sync.Pool // of *kgzip.Writer
	tee   *diffTee
}

func newFastGzip(level int) *fastGzip {
	return &fastGzip{
		GzipCompressor:   estargz.NewGzipCompressorWithLevel(level),
		GzipDecompressor: &estargz.GzipDecompressor{},
		level:            level,
	}
}

func (c *fastGzip) Writer(w io.Writer) (estargz.WriteFlushCloser, error) {
	var part *teePart
	if c.tee != nil {
		var err error
		if part, err = c.tee.part(w); err != nil {
			return nil, err
		}
	}
	if gz, ok := c.pool.Get().(*kgzip.Writer); ok {
		gz.Reset(w)
		return &pooledGzip{Writer: gz, pool: &c.pool, part: part}, nil
	}
	gz, err := kgzip.NewWriterLevel(w, c.level)
	if err != nil {
		return nil, err
	}
	return &pooledGzip{Writer: gz, pool: &c.pool, part: part}, nil
}

func (c *fastGzip) WriteTOCAndFooter(w io.Writer, off int64, toc *estargz.JTOC, diffHash hash.Hash) (digest.Digest, error) {
	if c.tee != nil {
		capture := c.tee.setTOC(toc)
		if diffHash != nil {
			diffHash = &multiHash{Hash: diffHash, w: io.MultiWriter(diffHash, capture)}
		} else {
			diffHash = capture
		}
	}
	return c.GzipCompressor.WriteTOCAndFooter(w, off, toc, diffHash)
}

func (c *fastGzip) Reader(r io.Reader) (io.ReadCloser, error) {
	if c.tee != nil {
		return &drainReader{r: r, buf: make([]byte, 1<<20)}, nil
	}
	return kgzip.NewReader(r)
}

// multiHash is a hash.Hash whose writes also go elsewhere.
type multiHash struct {
	hash.Hash
	w io.Writer
}

func (m *multiHash) Write(p []byte) (int, error) { return m.w.Write(p) }

type pooledGzip struct {
	*kgzip.Writer
	pool *sync.Pool
	part *teePart // nil without a tee
}

func (p *pooledGzip) Write(b []byte) (int, error) {
	n, err := p.Writer.Write(b)
	if p.part != nil {
		p.part.write(b[:n])
	}
	return n, err
}

func (p *pooledGzip) Close() error {
	if p.Writer == nil {
		return nil
	}
	err := p.Writer.Close()
	p.pool.Put(p.Writer)
	p.Writer = nil
	return err
}

// copyBuffered copies with a 1 MiB buffer, hiding ReaderFrom and WriterTo
// (which fall back to 32 KiB copies in several of the writers used here).
func copyBuffered(dst io.Writer, src io.Reader) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, make([]byte, 1<<20))
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync dir %q: %w", dir, err)
	}
	return nil
}
