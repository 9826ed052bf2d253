package registry

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/tarfs"
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
// Mtimes are rounded to whole seconds, as archive/tar does by default.
func tarDirectory(tw *tar.Writer, root string) error {
	if _, err := tarfs.Write(context.Background(), root, tw, tarfs.Options{Times: tarfs.RoundSeconds}); err != nil {
		return fmt.Errorf("walk rootfs: %w", err)
	}
	return nil
}

// copyTar copies the tar file src (plain or gzip), an upload, entry by
// entry through tarfs.CopyRootfs: names normalized, escapes refused, device
// nodes dropped.
func copyTar(tw *tar.Writer, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("open rootfs tar: %w", err)
	}
	defer f.Close()
	return tarfs.CopyRootfs(tw, f, src)
}
