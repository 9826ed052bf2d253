package squash

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/pkg/archive"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/tarfs"
)

// Verify checks that the merged layer (an uncompressed tar at merged)
// applied on layers [0, base) gives the same tree as layers [0, n) applied
// in order: every path with the same type, mode, owner, size, content,
// link target, device numbers, xattrs, hard link count and, for files and
// symlinks, modification time. It applies both with containerd's applier,
// an implementation independent of Merge, in two directories under
// scratch. A node runs as root; without root, owners are not restored
// (so both sides have the caller's) and device nodes cannot be made.
func Verify(ctx context.Context, open Opener, base, n int, merged, scratch string) error {
	want, err := applied(ctx, filepath.Join(scratch, "stack"), func(apply func(io.Reader) error) error {
		for i := range n {
			if err := applyLayer(ctx, open, i, apply); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	got, err := applied(ctx, filepath.Join(scratch, "squashed"), func(apply func(io.Reader) error) error {
		for i := range base {
			if err := applyLayer(ctx, open, i, apply); err != nil {
				return err
			}
		}
		f, err := os.Open(merged)
		if err != nil {
			return err
		}
		defer f.Close()
		return apply(f)
	})
	if err != nil {
		return err
	}
	return compareTrees(want, got)
}

func applyLayer(ctx context.Context, open Opener, i int, apply func(io.Reader) error) error {
	rc, err := open(ctx, i)
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := apply(rc); err != nil {
		return fmt.Errorf("apply layer %d: %w", i, err)
	}
	return nil
}

// applied makes dir, applies layers into it with fill, reads its tree and
// removes it.
func applied(ctx context.Context, dir string, fill func(apply func(io.Reader) error) error) (map[string]node, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	var opts []archive.ApplyOpt
	if os.Geteuid() != 0 {
		opts = append(opts, archive.WithNoSameOwner())
	}
	err := fill(func(r io.Reader) error {
		_, err := archive.Apply(ctx, dir, r, opts...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return readTree(dir)
}

// node is what Verify compares of one path.
type node struct {
	Type     string
	Mode     uint32
	UID, GID uint32
	Size     int64
	SHA256   string
	Link     string
	Rdev     uint64
	Nlink    uint64
	MtimeSec int64 // files and symlinks: a directory's is reset by what is added to it
	Xattrs   map[string]string
}

func readTree(root string) (map[string]node, error) {
	out := map[string]node{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		nd := node{Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			nd.Type = "dir"
		case unix.S_IFREG:
			nd.Type, nd.Size, nd.Nlink, nd.MtimeSec = "file", st.Size, uint64(st.Nlink), st.Mtim.Sec
			if nd.SHA256, err = fileSHA256(p); err != nil {
				return err
			}
		case unix.S_IFLNK:
			nd.Type, nd.Mode, nd.MtimeSec = "symlink", 0, st.Mtim.Sec
			if nd.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case unix.S_IFCHR:
			nd.Type, nd.Rdev = "char", uint64(st.Rdev)
		case unix.S_IFBLK:
			nd.Type, nd.Rdev = "block", uint64(st.Rdev)
		case unix.S_IFIFO:
			nd.Type = "fifo"
		default:
			nd.Type = fmt.Sprintf("mode %o", st.Mode&unix.S_IFMT)
		}
		if rel != "." {
			d, err := tarfs.OpenDir(filepath.Dir(p))
			if err != nil {
				return err
			}
			x, err := d.Xattrs(filepath.Base(p))
			d.Close()
			if err != nil {
				return err
			}
			if len(x) > 0 {
				nd.Xattrs = x
			}
		}
		out[filepath.ToSlash(rel)] = nd
		return nil
	})
	return out, err
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// compareTrees lists up to ten differences.
func compareTrees(want, got map[string]node) error {
	var diffs []string
	for _, p := range slices.Sorted(maps.Keys(want)) {
		g, ok := got[p]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s missing", p))
		case !nodeEqual(want[p], g):
			diffs = append(diffs, fmt.Sprintf("%s is %+v, want %+v", p, g, want[p]))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s should not be there", p))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	total, more := len(diffs), ""
	if len(diffs) > 10 {
		more = fmt.Sprintf(" (and %d more)", len(diffs)-10)
		diffs = diffs[:10]
	}
	return fmt.Errorf("the squashed tree differs in %d paths: %s%s", total, strings.Join(diffs, "; "), more)
}

func nodeEqual(a, b node) bool {
	return a.Type == b.Type && a.Mode == b.Mode && a.UID == b.UID && a.GID == b.GID && a.Size == b.Size &&
		a.SHA256 == b.SHA256 && a.Link == b.Link && a.Rdev == b.Rdev && a.Nlink == b.Nlink &&
		a.MtimeSec == b.MtimeSec && maps.Equal(a.Xattrs, b.Xattrs)
}
