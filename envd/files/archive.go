package files

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/tarfs"
)

// Archive formats of WriteArchive.
const (
	FormatTar     = "tar"
	FormatTarZstd = "tar.zst"
)

// CheckFormat refuses an archive format WriteArchive does not write.
func CheckFormat(format string) error {
	switch format {
	case FormatTar, FormatTarZstd:
		return nil
	}
	return fmt.Errorf("archive format %q: tar or tar.zst expected: %w", format, errdefs.ErrInvalidArgument)
}

// WriteArchive writes the directory at p (a final symlink followed) to w
// as a tar stream, entries relative to it ("usr/", "usr/bin"), read as
// the identity through tarfs (never following a symlink below p); device
// nodes, sockets and pseudo filesystems (proc, sysfs, ...) are left out
// and owners are the instance's ids. A
// regular file at p gives a tar of that one file. An entry the identity
// may not read fails the stream where it is met. Nothing is written to w
// before the walk found p readable, so an error about p itself comes
// before the first byte. The walk runs as an actor (thread.go): a slow w
// holds no thread.
func (r *Root) WriteArchive(ctx context.Context, p string, w io.Writer, format string) error {
	rel, err := Clean(p)
	if err != nil {
		return err
	}
	if err := CheckFormat(format); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	walked := make(chan error, 1)
	go func() {
		err := r.stream(func(a *actor) error { return r.walkArchive(ctx, a, rel, pw) })
		pw.CloseWithError(err)
		walked <- err
	}()
	// The client's side, on this (ordinary) goroutine.
	var zw *zstd.Encoder
	out := w
	if format == FormatTarZstd {
		if zw, err = zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest)); err != nil {
			pr.CloseWithError(err)
			<-walked
			return err
		}
		out = zw
	}
	_, err = io.Copy(out, pr)
	pr.CloseWithError(errors.Join(err, io.ErrClosedPipe)) // ends a walk still writing
	if werr := <-walked; werr != nil {
		err = werr
	}
	if zw != nil {
		if err == nil {
			err = zw.Close()
		} else {
			zw.Reset(io.Discard)
		}
	}
	return err
}

// walkArchive writes the tar of rel to w, on actor a.
func (r *Root) walkArchive(ctx context.Context, a *actor, rel string, w io.Writer) error {
	fd, st, err := r.openTyped(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := checkFS(fd, abs(rel)); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(parkWriter{a, w}, streamBuffer)
	tw := tar.NewWriter(bw)
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		err = r.writeOne(ctx, tw, fd, rel, &st)
	} else {
		_, err = tarfs.Write(ctx, procPath(fd), tw, tarfs.Options{NoDevices: true, Skip: r.pseudoBelow(rel),
			MapIDs: func(h *tar.Header, _ string) error {
				h.Uid, h.Gid = r.id.view(uint32(h.Uid)), r.id.view(uint32(h.Gid))
				return nil
			}})
		if err != nil {
			err = pathError(abs(rel), err)
		}
	}
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	return err
}

// pseudoBelow is a tarfs Skip hook for a walk of the directory rel: it
// leaves out the kernel's pseudo filesystems mounted below it (an archive
// of "/" holds no /proc or /sys). It runs on the walk's worker thread.
func (r *Root) pseudoBelow(rel string) func(string) bool {
	return func(sub string) bool {
		fd, err := r.resolve(path.Join(rel, sub), unix.O_PATH, false)
		if err != nil {
			return false
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return false
		}
		return checkFS(fd, sub) != nil
	}
}

// writeOne writes the regular file fd holds as a one-entry tar.
func (r *Root) writeOne(ctx context.Context, tw *tar.Writer, fd int, rel string, st *unix.Stat_t) error {
	rfd, err := reopen(fd, unix.O_RDONLY)
	if err != nil {
		return pathError(abs(rel), err)
	}
	f := osFile(rfd, abs(rel))
	defer f.Close()
	h := &tar.Header{Typeflag: tar.TypeReg, Name: path.Base(abs(rel)), Size: st.Size, Mode: int64(st.Mode & 0o7777),
		Uid: r.id.view(st.Uid), Gid: r.id.view(st.Gid), ModTime: time.Unix(st.Mtim.Unix()), Format: tar.FormatPAX}
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, ctxReader{ctx, f}, st.Size); err != nil {
		return fmt.Errorf("path %q changed while it was read: %w", abs(rel), errdefs.ErrConflict)
	}
	return nil
}

// ExtractOptions configure ExtractArchive.
type ExtractOptions struct {
	// Parents makes the target directory and its missing parents.
	Parents bool
	// MaxBytes is the most of the stream (as sent, compressed or not)
	// accepted; more is errdefs.ErrTooLarge. 0 = no limit.
	MaxBytes int64
}

// ExtractArchive extracts a tar stream (plain, gzip or zstd, sniffed) into
// the directory at p, as the identity, with the rules of a safe import
// (tarfs.Extract): names and hard links stay inside p, symlinks an entry
// made never lead out of it, and entries are never followed. Device nodes
// are refused (errdefs.ErrInvalidArgument), not dropped, so the caller
// learns of them; every entry belongs to the identity whatever the archive
// says. Extraction is in place: a refused entry stops it there, and the
// entries before it stay. It returns the number of entries written.
func (r *Root) ExtractArchive(ctx context.Context, p string, body io.Reader, opts ExtractOptions) (int, error) {
	rel, err := Clean(p)
	if err != nil {
		return 0, err
	}
	if err := r.writable(abs(rel)); err != nil {
		return 0, err
	}
	if opts.MaxBytes > 0 {
		body = &limitReader{r: body, left: opts.MaxBytes, p: abs(rel), limit: opts.MaxBytes}
	}
	stream, err := decompress(body)
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	// The client's side (reading, decompressing, checking) runs on an
	// ordinary goroutine; the extraction, as an actor that waits for the
	// next buffer without a thread (thread.go).
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriterSize(pw, streamBuffer)
		err := filterArchive(stream, bw, abs(rel))
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
	}()
	defer pr.Close()
	n := 0
	err = r.stream(func(a *actor) error {
		if opts.Parents {
			if err := r.mkdirAll(rel, 0o755); err != nil {
				return err
			}
		}
		fd, err := r.resolve(rel, unix.O_PATH|unix.O_DIRECTORY, true)
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) {
				return fmt.Errorf("path %q is not a directory: %w", abs(rel), errdefs.ErrFailedPrecondition)
			}
			return pathError(abs(rel), err)
		}
		defer unix.Close(fd)
		if err := checkFS(fd, abs(rel)); err != nil {
			return err
		}
		n, err = tarfs.Extract(ctx, procPath(fd), bufio.NewReaderSize(parkReader{a, pr}, streamBuffer), tarfs.ExtractOptions{What: abs(rel),
			MapOwner: func(int, int) (int, int, error) { return int(r.uid), int(r.gid), nil }})
		return err
	})
	if err != nil {
		var errno unix.Errno
		if errors.As(err, &errno) {
			return n, pathError(abs(rel), err)
		}
		return n, err
	}
	return n, nil
}

// decompress sniffs gzip and zstd; anything else is read as a plain tar.
func decompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("archive: bad gzip stream: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		return zr, nil
	case bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("archive: bad zstd stream: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		return zr.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}

// filterArchive copies the tar stream r to w, refusing what an extract
// into the file API must not make: names that leave the target, device
// nodes, hard links out.
func filterArchive(r io.Reader, w io.Writer, target string) error {
	tr := tar.NewReader(r)
	tw := tar.NewWriter(w)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return tw.Close()
		}
		if err != nil {
			if errors.Is(err, errdefs.ErrTooLarge) {
				return err
			}
			return fmt.Errorf("archive: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		if _, err := tarfs.Clean(hdr.Name); err != nil || strings.HasPrefix(hdr.Name, "/") {
			return fmt.Errorf("archive entry %q escapes %s: %w", hdr.Name, target, errdefs.ErrInvalidArgument)
		}
		switch hdr.Typeflag {
		case tar.TypeChar, tar.TypeBlock:
			return fmt.Errorf("archive entry %q is a device node, which the file API does not make: %w", hdr.Name, errdefs.ErrInvalidArgument)
		case tar.TypeLink:
			if t, err := tarfs.Clean(hdr.Linkname); err != nil || t == "." || strings.HasPrefix(hdr.Linkname, "/") {
				return fmt.Errorf("archive entry %q links to %q, outside %s: %w", hdr.Name, hdr.Linkname, target, errdefs.ErrInvalidArgument)
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			if errors.Is(err, errdefs.ErrTooLarge) {
				return err
			}
			return fmt.Errorf("archive entry %q: %v: %w", hdr.Name, err, errdefs.ErrInvalidArgument)
		}
	}
}

// limitReader fails with errdefs.ErrTooLarge past its limit.
type limitReader struct {
	r     io.Reader
	left  int64
	limit int64
	p     string
}

func (l *limitReader) Read(b []byte) (int, error) {
	if l.left < 0 {
		return 0, tooLarge(l.p, l.limit)
	}
	if int64(len(b)) > l.left+1 {
		b = b[:l.left+1]
	}
	n, err := l.r.Read(b)
	l.left -= int64(n)
	if l.left < 0 {
		return 0, tooLarge(l.p, l.limit)
	}
	return n, err
}

// openTyped opens rel (O_PATH, following a final symlink inside the root)
// and stats it, refusing what the file API does not serve (checkType).
// The caller closes fd.
func (r *Root) openTyped(rel string) (fd int, st unix.Stat_t, err error) {
	fd, err = r.resolve(rel, unix.O_PATH, true)
	if err != nil {
		return -1, st, pathError(abs(rel), err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, pathError(abs(rel), err)
	}
	if err := checkType(&st, abs(rel)); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}
