package workspace

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/internal/tarfs"
)

// ArchiveInfo describes a stored volume archive.
type ArchiveInfo struct {
	Key   string
	Bytes int64 // compressed bytes stored
	Files int   // entries archived (files, directories, links, ...), the root not counted
}

// lostFound is made by mkfs in every volume; it is file-system metadata,
// neither archived nor restored.
const lostFound = "lost+found"

// Archive writes the volume's content to store under key as a tar (PAX:
// numeric owners, modes with set-id and sticky bits, symlinks, hardlinks,
// device nodes, fifos, xattrs, mtimes) compressed with zstd, streamed: no
// local copy is made, and S3 receives it as a multipart upload, so a
// failed archive leaves no object (or the previous one) under key.
//
// The volume must exist (errdefs.ErrNotFound otherwise). For a consistent
// archive, stop the instances that write to it first: files are read as
// they are. Operations on this volume wait until Archive returns.
func (m *Manager) Archive(ctx context.Context, owner string, s Spec, store objstore.Store, key string) (ArchiveInfo, error) {
	if err := s.Validate(); err != nil {
		return ArchiveInfo{}, err
	}
	if err := objstore.ValidateKey(key); err != nil {
		return ArchiveInfo{}, err
	}
	v, err := m.locate(owner, s.Name)
	if err != nil {
		return ArchiveInfo{}, err
	}
	defer m.lock(v)()
	if err := m.ensure(ctx, v, s, false); err != nil {
		return ArchiveInfo{}, err
	}

	pr, pw := io.Pipe()
	cw := &countingWriter{w: pw}
	type result struct {
		files int
		err   error
	}
	done := make(chan result, 1)
	go func() {
		files, err := writeArchive(ctx, v.mnt(), cw)
		pw.CloseWithError(err) // nil: the reader sees EOF
		done <- result{files, err}
	}()
	putErr := store.Put(ctx, key, pr, -1)
	// Unblocks the writer if Put stopped reading early.
	pr.CloseWithError(errors.New("upload stopped"))
	res := <-done
	if res.err != nil {
		return ArchiveInfo{}, fmt.Errorf("archive %s: %w", v, res.err)
	}
	if putErr != nil {
		return ArchiveInfo{}, fmt.Errorf("archive %s: %w", v, putErr)
	}
	return ArchiveInfo{Key: key, Bytes: cw.n, Files: res.files}, nil
}

// writeArchive writes the tree at dir as tar+zstd to w.
func writeArchive(ctx context.Context, dir string, w io.Writer) (int, error) {
	// zstd level "default" with one goroutine per core: `tar | zstd -T2`
	// speed, a fraction of gzip's time.
	zw, err := zstd.NewWriter(w, zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		return 0, err
	}
	files, err := writeTar(ctx, dir, zw)
	if cerr := zw.Close(); err == nil {
		err = cerr
	}
	return files, err
}

// writeTar writes the tree at dir as tar to w, the root as "./": nothing
// under dir is followed (tarfs reads every entry through its directory's
// fd), and lost+found and device nodes (not content: instances cannot make
// them, having no CAP_MKNOD, and one restored onto a node would be a way to
// a host device) are left out. Mtimes keep their nanoseconds.
func writeTar(ctx context.Context, dir string, w io.Writer) (int, error) {
	tw := tar.NewWriter(w)
	st, err := tarfs.Write(ctx, dir, tw, tarfs.Options{
		Root:      true,
		Skip:      func(rel string) bool { return rel == lostFound },
		NoDevices: true,
		Times:     tarfs.Nanoseconds,
	})
	if err != nil {
		return 0, err
	}
	return st.Entries - 1, tw.Close() // the root is not counted
}

// Restore replaces the volume's content with the archive at key, creating
// the volume if missing. The archive is extracted into a fresh image of the
// spec's size beside the current one, which is swapped in only once the
// extraction succeeded: a missing or corrupt archive, an entry that would
// escape the volume (errdefs.ErrInvalidArgument) or content larger than the
// volume leaves the previous content untouched. The volume must not be in
// use (errdefs.ErrFailedPrecondition). The root keeps the spec's owner;
// everything else gets the archive's owners, modes, xattrs and mtimes.
func (m *Manager) Restore(ctx context.Context, owner string, s Spec, store objstore.Store, key string) (err error) {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	v, err := m.locate(owner, s.Name)
	if err != nil {
		return err
	}
	defer m.lock(v)()
	rc, err := store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	defer rc.Close()

	// Take the current volume out of service first: fails fast when busy.
	if err := unmount(v.mnt()); err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	if err := os.MkdirAll(v.dir, 0o700); err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	newImg, newMnt := v.image()+".new", v.mnt()+".new"
	defer func() {
		if err == nil {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		_ = unmount(newMnt)
		_ = os.Remove(newMnt)
		_ = os.Remove(newImg)
		// Put the previous content back in service, if there was one.
		if _, serr := os.Stat(v.image()); serr == nil {
			_ = m.ensure(cctx, v, s, false)
		}
	}()
	_ = unmount(newMnt) // left by a crash
	_ = os.Remove(newImg)
	if err := buildImage(ctx, newImg, s); err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	if err := mountAt(ctx, newImg, newMnt); err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	if err := extract(ctx, newMnt, rc); err != nil {
		return fmt.Errorf("restore %s from %q: %w", v, key, err)
	}
	if err := prepareRoot(newMnt, s); err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	if err := unmount(newMnt); err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	_ = os.Remove(newMnt)
	if err := syncFile(newImg); err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	if err := os.Rename(newImg, v.image()); err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	if err := syncFile(v.dir); err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	return m.ensure(ctx, v, s, false)
}

// extract writes the tar+zstd stream r into dir, confined to it (see
// tarfs.Extract): an entry cannot write outside dir, also not through a
// symlink made by an earlier entry; device nodes and lost+found are not
// restored.
func extract(ctx context.Context, dir string, r io.Reader) error {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		return err
	}
	defer zr.Close()
	_, err = tarfs.Extract(ctx, dir, zr, tarfs.ExtractOptions{
		Skip: func(name string) bool { return name == lostFound || strings.HasPrefix(name, lostFound+"/") },
		What: "the volume",
	})
	return err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
