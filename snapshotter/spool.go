package snapshotter

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/api/errdefs"
)

// DefaultExcludes are the runtime mount points of a container. Their content
// in the upper dir is whatever the runtime left behind (mount points, sockets,
// tmpfs shadows), never user data; /run/secrets is under /run. Callers apply
// them explicitly: Spool uses only SpoolOptions.Excludes.
var DefaultExcludes = []string{"/proc", "/sys", "/dev", "/run", "/tmp"}

// Names of the OCI whiteout markers (image-spec layer.md).
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// markerTime is the mtime of whiteout and opaque markers: the Unix epoch, as
// containerd (v2.0+) writes them, so that the same changes give the same
// layer whenever they were made.
var markerTime = time.Unix(0, 0)

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
	sink := &tarSink{tw: tar.NewWriter(cw), buf: make([]byte, 1<<20)}
	wk := newWalker(ctx, upperDir, excludes, sink, &stats)
	wk.shift = opts.IDShift
	err = wk.walk()
	if err == nil {
		err = sink.tw.Close()
	}
	stats.Bytes = cw.n
	stats.Duration = time.Since(start)
	if err != nil {
		return stats, fmt.Errorf("spool %q: %w", upperDir, err)
	}
	return stats, nil
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

type inode struct{ dev, ino uint64 }

// entrySink receives the entries of a layer tar in order. Spool's sink
// writes them; the frozen pass of TwoPass plans them, taking content from
// copies. Both see the same entries because one walker makes them.
type entrySink interface {
	// entry takes an entry without content (everything but a regular file).
	entry(h *tar.Header) error
	// file takes a regular file: h.Size bytes of content of the entry name
	// of dir (full names it in errors), whose lstat is st.
	file(h *tar.Header, rel string, dir *dirHandle, name, full string, st *unix.Stat_t) error
}

// walker walks an upper dir in layer order and turns each entry into a tar
// header for its sink: whiteouts and opaque markers translated, excludes
// skipped, hard links grouped, xattrs kept.
type walker struct {
	ctx      context.Context
	root     string
	excludes []string
	links    map[inode]string // first name given for an inode with more than one link
	shift    *IDShift         // nil: ids as they are
	sink     entrySink
	stats    *SpoolStats
}

func newWalker(ctx context.Context, root string, excludes []string, sink entrySink, stats *SpoolStats) *walker {
	return &walker{ctx: ctx, root: root, excludes: excludes, links: make(map[inode]string), sink: sink, stats: stats}
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

// child is one directory entry about to be written.
type child struct {
	name    string // name in the upper dir
	outName string // base name written to the tar
	st      unix.Stat_t
}

func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

// walk writes the entries below the walker's root.
func (s *walker) walk() error {
	d, err := openRootDir(s.root)
	if err != nil {
		return err
	}
	defer d.Close()
	return s.walkDir(d, "", 0)
}

// walkDir writes the entries below the directory d, at rel ("" for the
// root). Every look at an entry is relative to d's fd (see openat.go).
func (s *walker) walkDir(d *dirHandle, rel string, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("%q is nested more than %d directories deep: %w", rel, maxDepth, errdefs.ErrFailedPrecondition)
	}
	names, err := d.names()
	if err != nil {
		return fmt.Errorf("read dir %q: %w", filepath.Join(s.root, rel), err)
	}
	children := make([]child, 0, len(names))
	for _, name := range names {
		childRel := path.Join(rel, name)
		if excluded(s.excludes, childRel) {
			continue
		}
		c := child{name: name, outName: name}
		if err := d.lstat(name, &c.st); err != nil {
			return fmt.Errorf("lstat %q: %w", filepath.Join(s.root, childRel), err)
		}
		if isWhiteout(&c.st) {
			c.outName = whiteoutPrefix + name
		}
		children = append(children, c)
	}
	slices.SortFunc(children, func(a, b child) int { return strings.Compare(a.outName, b.outName) })
	for i := range children {
		if err := s.ctx.Err(); err != nil {
			return err
		}
		if err := s.writeEntry(d, rel, &children[i], depth); err != nil {
			return err
		}
	}
	return nil
}

func (s *walker) writeHeader(h *tar.Header) error {
	s.stats.Entries++
	return s.sink.entry(h)
}

func (s *walker) writeEntry(d *dirHandle, dirRel string, c *child, depth int) error {
	rel := path.Join(dirRel, c.name)
	full := filepath.Join(s.root, rel)
	st := &c.st
	mtime := time.Unix(st.Mtim.Sec, 0)

	// Whiteouts first: since Linux 5.8 overlay may create a whiteout as a hard
	// link to a shared 0/0 device in its work dir, so whiteouts can have
	// nlink > 1 and must not go through the hard link logic below.
	if isWhiteout(st) {
		s.stats.Whiteouts++
		return s.writeHeader(&tar.Header{
			Typeflag: tar.TypeReg,
			Name:     path.Join(dirRel, c.outName),
			ModTime:  markerTime,
			Format:   tar.FormatPAX,
		})
	}

	xattrs, opaque, err := readXattrs(d.xattrs(c.name), full)
	if err != nil {
		return err
	}
	h := &tar.Header{
		Name:    rel,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: mtime,
		// PAX holds xattrs, long names and large ids; with an unspecified
		// format the writer would pick USTAR or GNU per entry.
		Format: tar.FormatPAX,
	}
	for k, v := range xattrs {
		if h.PAXRecords == nil {
			h.PAXRecords = make(map[string]string, len(xattrs))
		}
		h.PAXRecords["SCHILY.xattr."+k] = v
	}
	if err := s.shift.header(h, full); err != nil {
		return err
	}

	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		h.Typeflag = tar.TypeDir
		h.Name = rel + "/"
		if err := s.writeHeader(h); err != nil {
			return err
		}
		if opaque {
			s.stats.OpaqueDirs++
			if err := s.writeHeader(&tar.Header{
				Typeflag: tar.TypeReg,
				Name:     path.Join(rel, whiteoutOpaque),
				ModTime:  markerTime,
				Format:   tar.FormatPAX,
			}); err != nil {
				return err
			}
		}
		sub, err := d.openDirAt(c.name, full)
		if err != nil {
			return err
		}
		defer sub.Close()
		var now unix.Stat_t
		if err := unix.Fstat(sub.fd, &now); err != nil {
			return fmt.Errorf("fstat %q: %w", full, err)
		}
		if !sameInode(&now, st) {
			return changedError(full)
		}
		return s.walkDir(sub, rel, depth+1)
	case unix.S_IFLNK:
		target, err := d.readlink(c.name)
		if err != nil {
			return fmt.Errorf("readlink %q: %w", full, err)
		}
		h.Typeflag = tar.TypeSymlink
		h.Linkname = target
		return s.writeHeader(h)
	case unix.S_IFIFO:
		h.Typeflag = tar.TypeFifo
		return s.writeHeader(h)
	case unix.S_IFCHR, unix.S_IFBLK:
		h.Typeflag = tar.TypeChar
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			h.Typeflag = tar.TypeBlock
		}
		h.Devmajor = int64(unix.Major(st.Rdev))
		h.Devminor = int64(unix.Minor(st.Rdev))
		return s.writeHeader(h)
	case unix.S_IFSOCK:
		return nil
	case unix.S_IFREG:
		if st.Nlink > 1 {
			key := inode{dev: st.Dev, ino: st.Ino}
			if first, ok := s.links[key]; ok {
				h.Typeflag = tar.TypeLink
				h.Linkname = first
				return s.writeHeader(h)
			}
			s.links[key] = rel
		}
		h.Typeflag = tar.TypeReg
		h.Size = st.Size
		s.stats.Entries++
		return s.sink.file(h, rel, d, c.name, full, st)
	default:
		return fmt.Errorf("%q has unknown file type %o", full, st.Mode&unix.S_IFMT)
	}
}

// tarSink writes entries to a tar, content read from the files themselves.
type tarSink struct {
	tw  *tar.Writer
	buf []byte
}

func (s *tarSink) entry(h *tar.Header) error {
	if err := s.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write header %q: %w", h.Name, err)
	}
	return nil
}

// file copies exactly h.Size bytes, the size lstat gave: a file that grew
// since is cut there, one that shrank fails the spool, so the header never
// disagrees with the content written.
func (s *tarSink) file(h *tar.Header, _ string, d *dirHandle, name, full string, st *unix.Stat_t) error {
	var now unix.Stat_t
	f, err := d.openRegular(name, full, &now)
	if errors.Is(err, errNotRegular) {
		return changedError(full)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if !sameInode(&now, st) {
		return changedError(full)
	}
	if err := s.entry(h); err != nil {
		return err
	}
	// Hide ReaderFrom/WriterTo so the 1 MiB buffer is used (tar.Writer's
	// ReadFrom copies through a 32 KiB one).
	n, err := io.CopyBuffer(struct{ io.Writer }{s.tw}, struct{ io.Reader }{io.LimitReader(f, h.Size)}, s.buf)
	if err != nil {
		return fmt.Errorf("copy %q: %w", full, err)
	}
	if n != h.Size {
		return fmt.Errorf("%q shrank from %d to %d bytes while spooling: %w", full, h.Size, n, errdefs.ErrConflict)
	}
	return nil
}

// readXattrs returns the xattrs of the entry x to store in the layer, and
// whether it is an opaque overlay directory. A symlink's own xattrs are
// read, never its target's; full names the entry in errors.
func readXattrs(x xattrReader, full string) (map[string]string, bool, error) {
	names, err := listXattrsOf(x, full)
	if err != nil || len(names) == 0 {
		return nil, false, err
	}
	var (
		out    map[string]string
		opaque bool
	)
	for _, name := range names {
		v, err := getXattrOf(x, name)
		if err != nil {
			if errors.Is(err, unix.ENODATA) {
				continue
			}
			return nil, false, fmt.Errorf("get xattr %s of %q: %w", name, full, err)
		}
		if rest, ok := cutOverlayPrefix(name); ok {
			switch rest {
			case "opaque":
				// "y" is opaque; "x" (Linux 6.7+) only marks a lower-layer
				// directory holding xattr whiteouts, never written to an upper.
				opaque = opaque || string(v) == "y"
			case "redirect", "metacopy":
				return nil, false, fmt.Errorf("%q has xattr %s: overlay redirect_dir/metacopy upper dirs cannot be captured as a layer: %w",
					full, name, errdefs.ErrFailedPrecondition)
			}
			continue
		}
		if out == nil {
			out = make(map[string]string, len(names))
		}
		out[name] = string(v)
	}
	return out, opaque, nil
}

// cutOverlayPrefix reports whether name is one of overlayfs's own xattrs.
func cutOverlayPrefix(name string) (string, bool) {
	if rest, ok := strings.CutPrefix(name, "trusted.overlay."); ok {
		return rest, true
	}
	return strings.CutPrefix(name, "user.overlay.")
}

// xattrReader reads the xattrs of one entry, not following it if it is a
// symlink: llistxattr(2) and lgetxattr(2) semantics.
type xattrReader interface {
	list(buf []byte) (int, error)
	get(name string, buf []byte) (int, error)
}

// xattrPath reads the xattrs of a path (its last component not followed).
type xattrPath string

func (p xattrPath) list(buf []byte) (int, error) { return unix.Llistxattr(string(p), buf) }
func (p xattrPath) get(name string, buf []byte) (int, error) {
	return unix.Lgetxattr(string(p), name, buf)
}

func listXattrs(p string) ([]string, error) { return listXattrsOf(xattrPath(p), p) }

func getXattr(p, name string) ([]byte, error) { return getXattrOf(xattrPath(p), name) }

func listXattrsOf(x xattrReader, full string) ([]string, error) {
	buf := make([]byte, 256)
	for {
		n, err := x.list(buf)
		if errors.Is(err, unix.ERANGE) {
			sz, err := x.list(nil)
			if err != nil {
				return nil, fmt.Errorf("list xattrs of %q: %w", full, err)
			}
			buf = make([]byte, sz*2+1)
			continue
		}
		if errors.Is(err, unix.ENOTSUP) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list xattrs of %q: %w", full, err)
		}
		var names []string
		for _, b := range bytes.Split(buf[:n], []byte{0}) {
			if len(b) > 0 {
				names = append(names, string(b))
			}
		}
		return names, nil
	}
}

func getXattrOf(x xattrReader, name string) ([]byte, error) {
	buf := make([]byte, 256)
	for {
		n, err := x.get(name, buf)
		if errors.Is(err, unix.ERANGE) {
			sz, err := x.get(name, nil)
			if err != nil {
				return nil, err
			}
			buf = make([]byte, sz*2+1)
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
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
