package snapshotter

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/tarfs"
)

// DefaultExcludes are the runtime mount points of a container. Their content
// in the upper dir is whatever the runtime left behind (mount points, sockets,
// tmpfs shadows), never user data; /run/secrets is under /run. Callers apply
// them explicitly: Spool uses only SpoolOptions.Excludes.
var DefaultExcludes = []string{"/proc", "/sys", "/dev", "/run", "/tmp"}

// SpoolOptions configure Spool.
type SpoolOptions struct {
	// Excludes are absolute paths inside the rootfs ("/proc", "/workspace",
	// "/run/secrets") whose entries (the path itself and everything below)
	// are left out of the layer, deletions (whiteouts) of them included. The
	// defaults (DefaultExcludes) are applied by the caller, not implicitly.
	//
	// An excluded path below an opaque directory is left out of the layer,
	// but the opaque marker still hides the lower layers' copy of it.
	Excludes []string
	// IDShift, for an upper dir of a user namespace instance, records the
	// container's ids instead of the host's (idshift.go); nil: as they are.
	IDShift *IDShift
	// CopyContent (Prepare only) copies every regular file's content, so
	// that the encode after the thaw never reads the upper dir: no file is
	// held (see TwoPass, "Held files"), so ErrChangedAfterThaw cannot occur.
	CopyContent bool
}

// SpoolStats describe what one Spool wrote.
type SpoolStats struct {
	Entries    int   // tar entries written, whiteout and opaque markers included
	Whiteouts  int   // deletions written as ".wh.<name>"
	OpaqueDirs int   // directories written with a ".wh..wh..opq" marker
	Bytes      int64 // size of the tar written
	Duration   time.Duration
}

// Spool walks upperDir directly and writes an uncompressed OCI layer tar of
// it to w. It is what runs while the container is frozen, so it only reads
// and copies; compression is Encode's job.
//
//   - Regular files, directories, symlinks, fifos and character and block
//     devices are written with mode (setuid, setgid, sticky included),
//     uid/gid, mtime (whole seconds) and xattrs (PAX "SCHILY.xattr.NAME"
//     records), never overlay's own trusted.overlay.* and user.overlay.*
//     xattrs. Sockets are skipped: tar cannot hold them.
//   - A file whose inode was already written under another name in the upper
//     dir becomes a hard link (tar.TypeLink) to the first name.
//   - An overlay whiteout (a 0/0 character device) at P becomes an empty
//     regular file ".wh.<base>" in P's directory, mode 0, mtime the Unix
//     epoch as containerd writes them (so are opaque markers).
//   - An opaque directory (xattr trusted.overlay.opaque=y, or
//     user.overlay.opaque=y on a "userxattr" overlay) becomes its directory
//     entry followed by an empty file "<dir>/.wh..wh..opq".
//   - Entries come depth-first, parents before children, the entries of a
//     directory sorted byte-wise by the name written; names are relative
//     without a leading "/", directories end in "/" ("usr/", "usr/bin/dot").
//     The upper dir's root itself is not written.
//   - Excluded paths are skipped entirely, deletions of them included.
//
// An upper dir that depends on its lower layers in ways a tar layer cannot
// express (overlay's redirect_dir or metacopy features: xattrs
// trusted.overlay.redirect, trusted.overlay.metacopy) gives
// errdefs.ErrFailedPrecondition rather than a wrong layer.
func Spool(ctx context.Context, upperDir string, w io.Writer, opts SpoolOptions) (SpoolStats, error) {
	start := time.Now()
	var stats SpoolStats
	excludes, err := cleanExcludes(opts.Excludes)
	if err != nil {
		return stats, err
	}
	fi, err := os.Stat(upperDir)
	if err != nil {
		return stats, fmt.Errorf("upper dir %q: %w", upperDir, errors.Join(errdefs.ErrNotFound, err))
	}
	if !fi.IsDir() {
		return stats, fmt.Errorf("upper dir %q is not a directory: %w", upperDir, errdefs.ErrInvalidArgument)
	}
	cw := &countingWriter{w: w}
	tw := tar.NewWriter(cw)
	ts, err := tarfs.Write(ctx, upperDir, tw, walkOptions(excludes, opts.IDShift))
	if err == nil {
		err = tw.Close()
	}
	stats.Entries, stats.Whiteouts, stats.OpaqueDirs = ts.Entries, ts.Whiteouts, ts.OpaqueDirs
	stats.Bytes = cw.n
	stats.Duration = time.Since(start)
	if err != nil {
		return stats, fmt.Errorf("spool %q: %w", upperDir, err)
	}
	return stats, nil
}

// walkOptions are the options of the walk of an upper dir, the same for
// Spool and TwoPass's frozen pass.
func walkOptions(excludes []string, shift *IDShift) tarfs.Options {
	o := tarfs.Options{Overlay: true}
	if len(excludes) > 0 {
		o.Skip = func(rel string) bool { return excluded(excludes, rel) }
	}
	if shift != nil {
		o.MapIDs = shift.header
	}
	return o
}

func cleanExcludes(in []string) ([]string, error) {
	out := make([]string, 0, len(in))
	for _, e := range in {
		if !strings.HasPrefix(e, "/") {
			return nil, fmt.Errorf("exclude %q is not an absolute path: %w", e, errdefs.ErrInvalidArgument)
		}
		c := strings.TrimPrefix(path.Clean(e), "/")
		if c == "" {
			return nil, fmt.Errorf("exclude %q would exclude the whole rootfs: %w", e, errdefs.ErrInvalidArgument)
		}
		out = append(out, c)
	}
	return out, nil
}

// excluded reports whether rel (relative, clean) is at or under an exclude.
func excluded(excludes []string, rel string) bool {
	for _, e := range excludes {
		if rel == e || (strings.HasPrefix(rel, e) && rel[len(e)] == '/') {
			return true
		}
	}
	return false
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
