package tarfs

import (
	"archive/tar"
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/envd-dev/envd/errdefs"
)

// CopyRootfs copies the tar stream r (plain or gzip), an uploaded root file
// system named src in errors, to tw entry by entry as the tar of an image
// layer, with names as Clean gives them: relative, no leading "/" or "./",
// no root entry. Names that climb out of the root (".."), hardlinks to
// entries not seen before, and entry types an image has no use for are
// refused; character and block devices are dropped (an image must not
// carry device nodes: containerd would create them when it unpacks the
// layer, and runtimes give /dev its own tmpfs anyway). Every error caused
// by the upload's content wraps errdefs.ErrInvalidArgument.
func CopyRootfs(tw *tar.Writer, r io.Reader, src string) error {
	br := bufio.NewReaderSize(r, 1<<20)
	r = br
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("rootfs tar %q: %w: %w", src, errdefs.ErrInvalidArgument, err)
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	entries := 0
	seen := map[string]bool{} // names written so far, for hardlink targets
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("rootfs tar %q: %w: %w", src, errdefs.ErrInvalidArgument, err)
		}
		entries++
		name, err := Clean(hdr.Name)
		if err != nil {
			return fmt.Errorf("rootfs tar %q: %w", src, err)
		}
		if name == "." {
			continue // the root directory itself
		}
		// A sparse file's map can claim any size: the reader would make up
		// its holes as zeros without reading input, so a few bytes of upload
		// could become terabytes of layer.
		for k := range hdr.PAXRecords {
			if strings.HasPrefix(k, "GNU.sparse.") {
				return fmt.Errorf("rootfs tar %q: entry %q is a sparse file, which an image cannot hold: %w", src, hdr.Name, errdefs.ErrInvalidArgument)
			}
		}
		switch hdr.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
		case tar.TypeRegA:
			hdr.Typeflag = tar.TypeReg
		case tar.TypeChar, tar.TypeBlock:
			continue
		default:
			return fmt.Errorf("rootfs tar %q: entry %q has type %q, which an image cannot hold: %w", src, hdr.Name, hdr.Typeflag, errdefs.ErrInvalidArgument)
		}
		if hdr.Typeflag == tar.TypeLink {
			target, err := Clean(hdr.Linkname)
			if err != nil || target == "." {
				return fmt.Errorf("rootfs tar %q: hardlink %q to %q leaves the root: %w", src, hdr.Name, hdr.Linkname, errdefs.ErrInvalidArgument)
			}
			if !seen[target] {
				return fmt.Errorf("rootfs tar %q: hardlink %q to %q, which is not an earlier file: %w", src, hdr.Name, hdr.Linkname, errdefs.ErrInvalidArgument)
			}
			hdr.Linkname = target
			hdr.Size = 0
		}
		if hdr.Typeflag != tar.TypeReg {
			hdr.Size = 0 // only regular files have a body in the layer
		}
		if hdr.Typeflag != tar.TypeDir {
			seen[name] = true
		} else {
			name += "/"
		}
		hdr.Name = name
		// Keep only xattrs from the PAX records: the rest are header fields
		// the reader already decoded and the writer re-encodes as needed.
		var pax map[string]string
		for k, v := range hdr.PAXRecords {
			if strings.HasPrefix(k, PAXXattr) {
				if pax == nil {
					pax = map[string]string{}
				}
				pax[k] = v
			}
		}
		hdr.PAXRecords = pax
		hdr.Format = tar.FormatUnknown
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		// The reader decoded the header, so the writer refusing it (a
		// negative id, a field out of range) is the upload's fault too.
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("rootfs tar %q: entry %q: %w: %w", src, hdr.Name, errdefs.ErrInvalidArgument, err)
		}
		if hdr.Size == 0 {
			continue
		}
		rerr := error(nil)
		if _, err := io.Copy(tw, readErrs{tr, &rerr}); err != nil {
			if rerr != nil {
				return fmt.Errorf("rootfs tar %q: entry %q: %w: %w", src, hdr.Name, errdefs.ErrInvalidArgument, rerr)
			}
			return fmt.Errorf("rootfs tar %q: entry %q: %w", src, hdr.Name, err)
		}
	}
	if entries == 0 {
		return fmt.Errorf("rootfs tar %q has no entries: %w", src, errdefs.ErrInvalidArgument)
	}
	return nil
}

// readErrs remembers the error its reader returned (other than io.EOF), so
// a failed copy can tell a bad upload from a failed write.
type readErrs struct {
	r   io.Reader
	err *error
}

func (r readErrs) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		*r.err = err
	}
	return n, err
}
