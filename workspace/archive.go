package workspace

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/internal/objstore"
)

// ArchiveInfo describes a stored volume archive.
type ArchiveInfo struct {
	Key   string
	Bytes int64 // compressed bytes stored
	Files int   // entries archived (files, directories, links, ...), the root not counted
}

// xattrPrefix is the PAX record prefix for extended attributes (as GNU tar
// and archive/tar write them).
const xattrPrefix = "SCHILY.xattr."

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

// writeTar walks dir through an os.Root, so that symlinks (the user's
// content) never lead outside it, even if swapped in during the walk.
func writeTar(ctx context.Context, dir string, w io.Writer) (int, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{} // (dev, ino) of multiply linked files -> first name
	files := 0
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if name == lostFound {
			return fs.SkipDir
		}
		fi, err := root.Lstat(name)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat", name)
		}
		hdr := &tar.Header{
			Name:    name,
			Mode:    int64(st.Mode & 0o7777),
			Uid:     int(st.Uid),
			Gid:     int(st.Gid),
			ModTime: fi.ModTime(),
			Format:  tar.FormatPAX,
		}
		var f *os.File // open for content and xattrs
		defer func() {
			if f != nil {
				f.Close()
			}
		}()
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr.Typeflag = tar.TypeDir
			hdr.Name = name + "/"
			if name == "." {
				hdr.Name = "./"
			}
			if f, err = root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_DIRECTORY, 0); err != nil {
				return err
			}
		case unix.S_IFREG:
			hdr.Typeflag = tar.TypeReg
			if st.Nlink > 1 {
				id := [2]uint64{st.Dev, st.Ino}
				if first, ok := links[id]; ok {
					hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
					break
				}
				links[id] = name
			}
			hdr.Size = fi.Size()
			if f, err = root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW, 0); err != nil {
				return err
			}
		case unix.S_IFLNK:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = root.Readlink(name); err != nil {
				return err
			}
		case unix.S_IFCHR, unix.S_IFBLK:
			// Device nodes are not content: instances cannot make them
			// (no CAP_MKNOD), and one restored onto a node would be a way
			// to a host device. Neither archived nor restored.
			return nil
		case unix.S_IFIFO:
			hdr.Typeflag = tar.TypeFifo
		default: // sockets are runtime state, not content
			return nil
		}
		if f != nil {
			xattrs, err := readXattrs(f)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			for k, v := range xattrs {
				if hdr.PAXRecords == nil {
					hdr.PAXRecords = map[string]string{}
				}
				hdr.PAXRecords[xattrPrefix+k] = v
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if name != "." {
			files++
		}
		if hdr.Typeflag == tar.TypeReg {
			if n, err := io.CopyN(tw, f, hdr.Size); err != nil {
				return fmt.Errorf("%s: read %d of %d bytes (changed while archiving?): %w", name, n, hdr.Size, err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return files, tw.Close()
}

func readXattrs(f *os.File) (map[string]string, error) {
	fd := int(f.Fd())
	size, err := unix.Flistxattr(fd, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		return nil, err
	}
	buf := make([]byte, size)
	size, err = unix.Flistxattr(fd, buf)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		n, err := unix.Fgetxattr(fd, name, nil)
		if err != nil {
			return nil, fmt.Errorf("xattr %s: %w", name, err)
		}
		val := make([]byte, n)
		if n > 0 {
			if n, err = unix.Fgetxattr(fd, name, val); err != nil {
				return nil, fmt.Errorf("xattr %s: %w", name, err)
			}
		}
		out[name] = string(val[:n])
	}
	return out, nil
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

// entryName turns a tar entry name into a clean slash path relative to the
// volume root ("." for the root itself), refusing names that leave it.
func entryName(name string) (string, error) {
	if strings.HasPrefix(name, "/") || hasDotDot(name) || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("archive entry %q escapes the volume: %w", name, errdefs.ErrInvalidArgument)
	}
	return path.Clean(name), nil
}

// extract writes the tar+zstd stream r into dir, all through an os.Root:
// an entry cannot write outside dir, also not through a symlink made by an
// earlier entry (absolute or ../ targets resolve outside and are refused).
func extract(ctx context.Context, dir string, r io.Reader) error {
	zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(runtime.GOMAXPROCS(0)))
	if err != nil {
		return err
	}
	defer zr.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	type dirTime struct {
		name  string
		mtime time.Time
	}
	var dirs []dirTime
	tr := tar.NewReader(zr)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read archive: %w", err)
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return err
		}
		if name == lostFound || strings.HasPrefix(name, lostFound+"/") {
			continue
		}
		if err := extractEntry(ctx, root, name, hdr, tr); err != nil {
			if errors.Is(err, errdefs.ErrInvalidArgument) {
				return err
			}
			return fmt.Errorf("archive entry %q: %w", hdr.Name, err)
		}
		if hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirTime{name, hdr.ModTime})
		}
	}
	// Directory mtimes last: creating their children changed them.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := root.Chtimes(dirs[i].name, dirs[i].mtime, dirs[i].mtime); err != nil {
			return fmt.Errorf("archive entry %q: %w", dirs[i].name, err)
		}
	}
	return nil
}

func extractEntry(ctx context.Context, root *os.Root, name string, hdr *tar.Header, r io.Reader) error {
	switch hdr.Typeflag {
	case tar.TypeDir:
		if name != "." {
			if fi, err := root.Lstat(name); err == nil && !fi.IsDir() {
				if err := root.Remove(name); err != nil {
					return err
				}
			}
			if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		}
		f, err := root.OpenFile(name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		return applyMeta(f, hdr)

	case tar.TypeReg, tar.TypeRegA:
		if err := removeExisting(root, name); err != nil {
			return err
		}
		f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.Copy(f, ctxReader{ctx, r}); err != nil {
			return err
		}
		if err := applyMeta(f, hdr); err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
		return root.Chtimes(name, hdr.ModTime, hdr.ModTime)

	case tar.TypeSymlink:
		if err := removeExisting(root, name); err != nil {
			return err
		}
		if err := root.Symlink(hdr.Linkname, name); err != nil {
			return err
		}
		// Symlink mtimes are not restored: os.Root has no lutimes.
		return root.Lchown(name, hdr.Uid, hdr.Gid)

	case tar.TypeLink:
		target, err := entryName(hdr.Linkname)
		if err != nil {
			return err
		}
		if err := removeExisting(root, name); err != nil {
			return err
		}
		return root.Link(target, name)

	case tar.TypeChar, tar.TypeBlock:
		return nil // device nodes are never restored (see writeTar)

	case tar.TypeFifo:
		if err := removeExisting(root, name); err != nil {
			return err
		}
		mode := uint32(unix.S_IFIFO)
		parent, err := root.OpenFile(path.Dir(name), os.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer parent.Close()
		if err := unix.Mknodat(int(parent.Fd()), path.Base(name), mode|0o600, 0); err != nil {
			return fmt.Errorf("mknod: %w", err)
		}
		if err := root.Lchown(name, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		if err := root.Chmod(name, tarMode(hdr.Mode)); err != nil {
			return err
		}
		return root.Chtimes(name, hdr.ModTime, hdr.ModTime)
	}
	return nil // other types (GNU long names, globals) are consumed by tar.Reader
}

// applyMeta sets owner, then mode (chown clears set-id bits), then xattrs
// (chown also clears security.capability) on an open file.
func applyMeta(f *os.File, hdr *tar.Header) error {
	if err := f.Chown(hdr.Uid, hdr.Gid); err != nil {
		return err
	}
	if err := f.Chmod(tarMode(hdr.Mode)); err != nil {
		return err
	}
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, xattrPrefix); ok {
			if err := unix.Fsetxattr(int(f.Fd()), name, []byte(v), 0); err != nil {
				return fmt.Errorf("xattr %s: %w", name, err)
			}
		}
	}
	return nil
}

func tarMode(m int64) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	if m&0o4000 != 0 {
		mode |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		mode |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// removeExisting removes name if it exists (an archive listing a path
// twice: the later entry wins).
func removeExisting(root *os.Root, name string) error {
	if name == "." {
		return fmt.Errorf("archive entry for the volume root must be a directory: %w", errdefs.ErrInvalidArgument)
	}
	if _, err := root.Lstat(name); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return root.RemoveAll(name)
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

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
