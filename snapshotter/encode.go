package snapshotter

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/containerd/stargz-snapshotter/estargz"
	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/envd-dev/envd/errdefs"
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
	// runtime.NumCPU(). An eStargz layer's bytes do not depend on it.
	Workers int
	// PrioritizedFiles (Estargz only) are paths inside the rootfs
	// ("/usr/bin/python3") placed first in the blob, ahead of the prefetch
	// landmark, so the stargz snapshotter fetches them before the first
	// command runs. Paths not in the layer are ignored.
	PrioritizedFiles []string

	// wholeFileDigests (Estargz only) writes the TOC digest of every file
	// of more than one chunk, as estargz.Build does (see writeEstargz): for
	// the tests that compare the blob with Build's.
	wholeFileDigests bool
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
	// PrioritizedOver are the EncodeOptions.PrioritizedFiles left in place
	// by the prefetch range's bounds (PrioritizedFileMax, PrioritizedMax).
	PrioritizedOver []string
}

// Encode compresses the spooled tar at tarPath into a new file in outDir,
// named after its digest ("sha256-<hex>"). The file is written under a
// temporary name, hashed while written and renamed into place; it is not
// synced (it is a step on the way to the registry, see encode).
//
// For Zstd and Gzip the DiffID is the digest of the spool tar itself. For
// Estargz it is the digest of the blob's uncompressed content, which is a
// different tar than the spool: estargz rewrites the headers, adds its
// landmark file and the TOC entry. It is computed from the bytes given to
// the compressor, not by decompressing the blob (see estargz_writer.go).
// Nothing is staged on disk besides the layer file.
func Encode(ctx context.Context, tarPath, outDir string, opts EncodeOptions) (Layer, error) {
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
	return encode(ctx, outDir, opts, fmt.Sprintf("%q", tarPath), fi.Size(), func(w io.Writer, opts EncodeOptions, layer *Layer) error {
		if opts.Compression == Estargz {
			entries, err := indexTar(in, fi.Size())
			if err != nil {
				return err
			}
			return encodeEstargz(ctx, w, entries, opts, layer)
		}
		return encodeStream(w, &ctxReader{ctx: ctx, r: in}, opts, layer)
	})
}

// EncodeTwoPass is Encode of the tar p.WriteTar would write, without
// writing it: an eStargz layer takes each file's content straight from p's
// copies, zstd and gzip read WriteTar's stream. p must have a plan (Frozen
// returned without error); the instance need not be frozen. If a file p
// held changed after Frozen, the encode fails with ErrChangedAfterThaw and
// the capture must be redone (SpoolOptions.CopyContent never fails so).
func EncodeTwoPass(ctx context.Context, p *TwoPass, outDir string, opts EncodeOptions) (Layer, error) {
	if p.data == nil || !p.frozen {
		return Layer{}, fmt.Errorf("two-pass spool of %q has no plan: %w", p.root, errdefs.ErrFailedPrecondition)
	}
	what := fmt.Sprintf("the two-pass spool of %q", p.root)
	return encode(ctx, outDir, opts, what, p.stats.Bytes, func(w io.Writer, opts EncodeOptions, layer *Layer) error {
		if opts.Compression == Estargz {
			entries := make([]esgzEntry, len(p.plan))
			for i, e := range p.plan {
				// As read back from the tar WriteTar would write, so that
				// the layer is the one Encode makes of that tar.
				h, err := tarRoundTrip(e.hdr)
				if err != nil {
					return err
				}
				src, off := e.content(p.data)
				entries[i] = esgzEntry{hdr: h, src: src, off: off}
			}
			return encodeEstargz(ctx, w, entries, opts, layer)
		}
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(p.WriteTar(ctx, pw)) }()
		err := encodeStream(w, pr, opts, layer)
		pr.CloseWithError(errors.New("encoder stopped")) // unblocks WriteTar after a failure
		return err
	})
}

// encode checks opts and fills in their defaults, then writes the layer
// file in outDir with body, which encodes the tar (what names it in errors;
// size is its length) as opts say and fills in the layer's DiffID,
// UncompressedSize and Annotations.
func encode(ctx context.Context, outDir string, opts EncodeOptions, what string, size int64,
	body func(w io.Writer, opts EncodeOptions, layer *Layer) error) (_ Layer, rErr error) {
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
	if err := body(bw, opts, &layer); err != nil {
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %v", cerr, err)
		}
		return Layer{}, fmt.Errorf("encode %s as %s: %w", what, opts.Compression, err)
	}
	if opts.Compression != Estargz && layer.UncompressedSize != size {
		return Layer{}, fmt.Errorf("%s changed while encoding (%d bytes read, %d expected): %w",
			what, layer.UncompressedSize, size, errdefs.ErrConflict)
	}
	if err := bw.Flush(); err != nil {
		return Layer{}, fmt.Errorf("write layer file: %w", err)
	}
	// Not synced: every caller uploads the file and removes it, and after a
	// crash the work dir is discarded (the save is failed or redone), so a
	// sync only made the save wait for the disk; the registry's copy is the
	// durable one.
	if err := tmp.Close(); err != nil {
		return Layer{}, fmt.Errorf("close layer file: %w", err)
	}
	layer.Digest = blobDigest.Digest()
	layer.Size = out.n
	layer.Path = filepath.Join(outDir, layer.Digest.Algorithm().String()+"-"+layer.Digest.Encoded())
	if err := os.Rename(tmp.Name(), layer.Path); err != nil {
		return Layer{}, fmt.Errorf("rename layer file: %w", err)
	}
	layer.Duration = time.Since(start)
	return layer, nil
}

// encodeStream encodes a plain tar stream as Zstd or Gzip.
func encodeStream(w io.Writer, src io.Reader, opts EncodeOptions, layer *Layer) error {
	if opts.Compression == Zstd {
		return encodeZstd(w, src, opts, layer)
	}
	return encodeGzip(w, src, opts, layer)
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

// Bounds of an eStargz layer's prefetch range (EncodeOptions.PrioritizedFiles),
// which the stargz snapshotter fetches in the background from the layer's
// mount on: the fetch competes with the start for the CPU and the link.
const (
	// PrioritizedFileMax: a listed file larger than this stays in tar order
	// and is fetched on demand. A recording says that a file was opened or
	// read, not how much of it: an install instance that read apt's 39 MB
	// package cache put all of it before the landmark, and every lazy start
	// of that version fetched 18.5 MB more (docs/notes/lazy-restore.md).
	PrioritizedFileMax = 16 << 20
	// PrioritizedMax bounds the content of all listed files together; the
	// list is in first-read order, so what is cut is what came last.
	PrioritizedMax = 64 << 20
)

// limitPrioritized returns prioritized without the files (or hard links to
// files) over PrioritizedFileMax and those past PrioritizedMax in all, in
// the same order, and the paths it left out. Paths not in entries are
// kept (the writer skips them).
func limitPrioritized(entries []esgzEntry, prioritized []string) (kept, over []string) {
	if len(prioritized) == 0 {
		return nil, nil // no index of the entries to build
	}
	type file struct {
		size int64
		link string
	}
	files := make(map[string]file, len(entries))
	for _, e := range entries {
		switch e.hdr.Typeflag {
		case tar.TypeReg:
			files[cleanEntryName(e.hdr.Name)] = file{size: e.hdr.Size}
		case tar.TypeLink:
			files[cleanEntryName(e.hdr.Name)] = file{link: cleanEntryName(e.hdr.Linkname)}
		default:
			delete(files, cleanEntryName(e.hdr.Name)) // a later entry replaces an earlier one
		}
	}
	var total int64
	counted := map[string]bool{}
	kept = make([]string, 0, len(prioritized))
	for _, p := range prioritized {
		name := cleanEntryName(p)
		f, ok := files[name]
		if ok && f.link != "" {
			name = f.link
			f = files[name]
		}
		if !ok || counted[name] {
			kept = append(kept, p)
			continue
		}
		if f.size > PrioritizedFileMax || total+f.size > PrioritizedMax {
			over = append(over, p)
			continue
		}
		total += f.size
		counted[name] = true
		kept = append(kept, p)
	}
	return kept, over
}

func encodeEstargz(ctx context.Context, w io.Writer, entries []esgzEntry, opts EncodeOptions, layer *Layer) error {
	prioritized, over := limitPrioritized(entries, opts.PrioritizedFiles)
	layer.PrioritizedOver = over
	res, err := writeEstargz(ctx, w, entries, opts.Level, opts.Workers, prioritized, opts.wholeFileDigests)
	if err != nil {
		return err
	}
	layer.DiffID, layer.UncompressedSize = res.diffID, res.uncompressedSize
	layer.Annotations = map[string]string{
		estargz.TOCJSONDigestAnnotation:         res.tocDigest.String(),
		estargz.StoreUncompressedSizeAnnotation: strconv.FormatInt(res.uncompressedSize, 10),
	}
	return nil
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
