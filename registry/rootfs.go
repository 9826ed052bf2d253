package registry

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/internal/rootfstar"
)

// writeRootfsLayer writes src (a directory, or a tar file, plain or gzip) as
// a gzip tar layer into a new file in dir, and describes it. The caller
// removes the file.
func writeRootfsLayer(src, dir string) (LayerFile, error) {
	st, err := os.Stat(src)
	if err != nil {
		return LayerFile{}, fmt.Errorf("rootfs source %q: %w: %w", src, errdefs.ErrInvalidArgument, err)
	}
	out, err := os.CreateTemp(dir, "envd-rootfs-*.tar.gz")
	if err != nil {
		return LayerFile{}, fmt.Errorf("create layer file: %w", err)
	}
	lf := LayerFile{Path: out.Name(), MediaType: string(types.OCILayer)}
	ok := false
	defer func() {
		if !ok {
			out.Close()
			os.Remove(out.Name())
		}
	}()

	compressed := &countingHash{h: sha256.New()}
	uncompressed := &countingHash{h: sha256.New()}
	bw := bufio.NewWriterSize(io.MultiWriter(out, compressed), 1<<20)
	zw := gzip.NewWriter(bw)
	if err := writeRootfsTar(st, src, io.MultiWriter(zw, uncompressed)); err != nil {
		return LayerFile{}, err
	}
	for _, step := range []func() error{zw.Close, bw.Flush, out.Sync, out.Close} {
		if err := step(); err != nil {
			return LayerFile{}, fmt.Errorf("write layer file: %w", err)
		}
	}
	lf.Digest = compressed.digest()
	lf.DiffID = uncompressed.digest()
	lf.Size = compressed.n
	ok = true
	return lf, nil
}

// WriteRootfsTar writes src (a directory, or a tar file, plain or gzip) to
// w as an uncompressed layer tar: names relative and clean, directories
// before their contents, owners, modes, links, xattrs and device nodes
// kept; entries that climb out with ".." are refused. envd encodes it (as
// eStargz, so base images restore lazily too) and pushes it with
// PushRootfsLayer.
func WriteRootfsTar(src string, w io.Writer) error {
	st, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("rootfs source %q: %w: %w", src, errdefs.ErrInvalidArgument, err)
	}
	return writeRootfsTar(st, src, w)
}

func writeRootfsTar(st os.FileInfo, src string, w io.Writer) error {
	tw := tar.NewWriter(w)
	var err error
	switch {
	case st.IsDir():
		err = tarDirectory(tw, src)
	case st.Mode().IsRegular():
		err = copyTar(tw, src)
	default:
		err = fmt.Errorf("rootfs source %q is neither a directory nor a file: %w", src, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("write layer tar: %w", err)
	}
	return nil
}

type countingHash struct {
	h hash.Hash
	n int64
}

func (c *countingHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

func (c *countingHash) digest() string { return fmt.Sprintf("sha256:%x", c.h.Sum(nil)) }

// tarDirectory writes the tree under root: paths relative without a leading
// "/" (the root itself is not an entry), directories before their contents,
// with owners, modes, symlinks, hardlinks, xattrs and device nodes. Sockets
// are skipped: tar cannot hold them and they are meaningless in an image.
func tarDirectory(tw *tar.Writer, root string) error {
	type devIno struct{ dev, ino uint64 }
	links := map[devIno]string{}
	// WalkDir visits entries in lexical order, a directory before its
	// contents, and does not follow symlinks.
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("walk rootfs: %w", err)
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		name := filepath.ToSlash(rel)
		fi, err := d.Info()
		if err != nil {
			return fmt.Errorf("stat %q: %w", p, err)
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		var link string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return fmt.Errorf("read symlink %q: %w", p, err)
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return fmt.Errorf("tar header for %q: %w", p, err)
		}
		hdr.Name = name
		if fi.IsDir() {
			hdr.Name += "/"
		}
		// FileInfoHeader looks up host user and group names; inside the image
		// only the numeric ids mean anything.
		hdr.Uname, hdr.Gname = "", ""
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		if sys, ok := fi.Sys().(*syscall.Stat_t); ok {
			hdr.Uid, hdr.Gid = int(sys.Uid), int(sys.Gid)
			if fi.Mode().IsRegular() && sys.Nlink > 1 {
				key := devIno{uint64(sys.Dev), uint64(sys.Ino)}
				if first, seen := links[key]; seen {
					hdr.Typeflag = tar.TypeLink
					hdr.Linkname = first
					hdr.Size = 0
				} else {
					links[key] = name
				}
			}
			if fi.Mode()&(fs.ModeDevice|fs.ModeCharDevice) != 0 {
				hdr.Devmajor = int64(unix.Major(uint64(sys.Rdev)))
				hdr.Devminor = int64(unix.Minor(uint64(sys.Rdev)))
			}
		}
		xattrs, err := readXattrs(p)
		if err != nil {
			return err
		}
		for k, v := range xattrs {
			if hdr.PAXRecords == nil {
				hdr.PAXRecords = map[string]string{}
			}
			hdr.PAXRecords[paxXattr+k] = v
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write tar header for %q: %w", name, err)
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Size == 0 {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return fmt.Errorf("open %q: %w", p, err)
		}
		defer f.Close()
		// A file that changed size since the stat fails here: the copy is
		// short (tar reports a missing body) or long (ErrWriteTooLong).
		if _, err := io.Copy(tw, f); err != nil {
			return fmt.Errorf("copy %q into layer: %w", p, err)
		}
		return nil
	})
}

const paxXattr = "SCHILY.xattr."

// readXattrs returns the extended attributes of p without following
// symlinks. File systems without xattr support give none.
func readXattrs(p string) (map[string]string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Llistxattr(p, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Llistxattr(p, buf)
		}
	}
	if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list xattrs of %q: %w", p, err)
	}
	var out map[string]string
	for _, name := range bytes.Split(buf[:n], []byte{0}) {
		if len(name) == 0 {
			continue
		}
		sz, err := unix.Lgetxattr(p, string(name), nil)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("get xattr %q of %q: %w", name, p, err)
		}
		val := make([]byte, sz)
		if sz > 0 {
			if sz, err = unix.Lgetxattr(p, string(name), val); err != nil {
				return nil, fmt.Errorf("get xattr %q of %q: %w", name, p, err)
			}
		}
		if out == nil {
			out = map[string]string{}
		}
		out[string(name)] = string(val[:sz])
	}
	return out, nil
}

// copyTar copies the tar file src (plain or gzip), an upload, entry by
// entry through rootfstar.Copy: names normalized, escapes refused, device
// nodes dropped.
func copyTar(tw *tar.Writer, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open rootfs tar: %w", err)
	}
	defer f.Close()
	return rootfstar.Copy(tw, f, src)
}
