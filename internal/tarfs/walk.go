package tarfs

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// Names of the OCI whiteout markers (image-spec layer.md).
const (
	WhiteoutPrefix = ".wh."
	WhiteoutOpaque = ".wh..wh..opq"
)

// markerTime is the mtime of whiteout and opaque markers: the Unix epoch, as
// containerd (v2.0+) writes them, so that the same changes give the same
// layer whenever they were made.
var markerTime = time.Unix(0, 0)

// Times says how a walk records modification times.
type Times int

const (
	// Seconds truncates to whole seconds (containerd's layers do the same).
	Seconds Times = iota
	// Nanoseconds keeps them whole (PAX "mtime" records).
	Nanoseconds
	// RoundSeconds rounds to the nearest second, as archive/tar does for a
	// header of unspecified format.
	RoundSeconds
)

// Options configure Walk and Write. The zero value writes every entry
// below the root as it is.
type Options struct {
	// Root writes the root directory itself first, named "./". Default: the
	// root is not an entry.
	Root bool
	// Skip, if set, is asked about each entry by its path relative to the
	// root ("usr/bin", no leading or trailing "/") before anything else is
	// read of it; true leaves out the entry and everything below it.
	Skip func(rel string) bool
	// NoDevices leaves out character and block devices. Default: kept, with
	// their device numbers.
	NoDevices bool
	// Overlay reads the root as an overlayfs upper dir (the save path's
	// hook): an overlay whiteout (a 0/0 character device) at P becomes an
	// empty regular file ".wh.<base>" in P's directory, mode 0, mtime the
	// Unix epoch, sorted under that name; an opaque directory (xattr
	// trusted.overlay.opaque=y, or user.overlay.opaque=y on a "userxattr"
	// overlay) becomes its directory entry followed by an empty file
	// "<dir>/.wh..wh..opq" (same mode and mtime); user.overlay.* xattrs are
	// dropped too; and an upper dir using redirect_dir or metacopy
	// (xattrs *.overlay.redirect, *.overlay.metacopy), which a tar layer
	// cannot express, fails with errdefs.ErrFailedPrecondition.
	Overlay bool
	// MapIDs, if set, maps the ids of each header (not of whiteout and
	// opaque markers) before it is written: Uid, Gid and the ids inside
	// xattr records (file capabilities, ACLs). path names the entry in
	// errors. Default: ids as they are on disk.
	MapIDs func(h *tar.Header, path string) error
	// Times is the precision of modification times; default Seconds.
	Times Times
}

// Stats count what a walk gave.
type Stats struct {
	Entries    int // headers, whiteout and opaque markers and the root included
	Whiteouts  int // deletions written as ".wh.<name>"
	OpaqueDirs int // directories followed by a ".wh..wh..opq" marker
}

// Entry is one header of a walk, in tar order.
type Entry struct {
	// Header is the entry's tar header. A regular file's content is
	// Header.Size bytes; the handler of a walk reads it with Open.
	Header *tar.Header
	// Stat is the entry's lstat, as the header was made from it (zero for
	// whiteout and opaque markers).
	Stat unix.Stat_t
	dir  *Dir
	name string
}

// Path returns the path of the entry on disk, for messages.
func (e *Entry) Path() string { return e.dir.Path(e.name) }

// Open opens the content of a regular file, confined to the tree (see
// Dir.OpenFile), and fills st with the fstat of what it opened: compare it
// with Stat (SameInode) before trusting the content.
func (e *Entry) Open(st *unix.Stat_t) (*os.File, error) {
	if e.name == "" || e.Header.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("%q: %w", e.Path(), ErrNotRegular)
	}
	return e.dir.OpenFile(e.name, st)
}

// Walk reads the tree at root and calls fn for each header in tar order:
// depth-first, a directory before its entries, the entries of a directory
// sorted byte-wise by the name written; names relative without a leading
// "/", directories ending in "/" ("usr/", "usr/bin/dot").
//
//   - Regular files, directories, symlinks, fifos and character and block
//     devices get mode (setuid, setgid, sticky included), uid/gid, mtime
//     and xattrs (PAX "SCHILY.xattr.NAME" records), never overlay's own
//     trusted.overlay.* xattrs. Sockets are skipped: tar cannot hold them.
//   - A regular file whose inode was already given under another name
//     becomes a hard link (tar.TypeLink) to the first name.
//   - Entries are read only through Dir: no symlink is ever followed, not
//     even one swapped in during the walk.
//
// fn's Entry is valid only during the call; the Header it holds is the
// caller's to keep.
func Walk(ctx context.Context, root string, opts Options, fn func(*Entry) error) (Stats, error) {
	w := &walker{ctx: ctx, opts: opts, fn: fn, links: make(map[inode]string)}
	d, err := OpenDir(filepath.Clean(root))
	if err != nil {
		return w.stats, err
	}
	defer d.Close()
	if opts.Root {
		if err := w.root(d); err != nil {
			return w.stats, err
		}
	}
	err = w.walkDir(d, "", 0)
	return w.stats, err
}

// Write writes the tree at root to tw as Walk reads it, with the content of
// regular files. A regular file's content is exactly the size lstat gave:
// one that grew since is cut there, one that shrank or was replaced fails
// with errdefs.ErrConflict, so a header never disagrees with its content.
// tw is not closed.
func Write(ctx context.Context, root string, tw *tar.Writer, opts Options) (Stats, error) {
	buf := make([]byte, 1<<20)
	return Walk(ctx, root, opts, func(e *Entry) error {
		if e.Header.Typeflag != tar.TypeReg || e.name == "" {
			return writeHeader(tw, e.Header)
		}
		return writeFile(tw, e, buf)
	})
}

func writeHeader(tw *tar.Writer, h *tar.Header) error {
	if err := tw.WriteHeader(h); err != nil {
		return fmt.Errorf("write header %q: %w", h.Name, err)
	}
	return nil
}

func writeFile(tw *tar.Writer, e *Entry, buf []byte) error {
	var now unix.Stat_t
	f, err := e.Open(&now)
	if errors.Is(err, ErrNotRegular) {
		return ChangedError(e.Path())
	}
	if err != nil {
		return err
	}
	defer f.Close()
	if !SameInode(&now, &e.Stat) {
		return ChangedError(e.Path())
	}
	if err := writeHeader(tw, e.Header); err != nil {
		return err
	}
	// Hide ReaderFrom/WriterTo so that buf is used (tar.Writer's ReadFrom
	// copies through a 32 KiB one).
	size := e.Header.Size
	n, err := io.CopyBuffer(struct{ io.Writer }{tw}, struct{ io.Reader }{io.LimitReader(f, size)}, buf)
	if err != nil {
		return fmt.Errorf("copy %q: %w", e.Path(), err)
	}
	if n != size {
		return fmt.Errorf("%q shrank from %d to %d bytes while being read: %w", e.Path(), size, n, errdefs.ErrConflict)
	}
	return nil
}

type inode struct{ dev, ino uint64 }

type walker struct {
	ctx   context.Context
	opts  Options
	fn    func(*Entry) error
	stats Stats
	links map[inode]string // first name given for an inode with more than one link
	xbuf  []byte           // scratch for xattrs
	e     Entry            // reused for every call of fn
}

// child is one directory entry about to be given.
type child struct {
	name    string // name on disk
	outName string // base name in the tar
	st      unix.Stat_t
}

func isWhiteout(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

func (w *walker) emit(h *tar.Header, d *Dir, name string, st *unix.Stat_t) error {
	w.stats.Entries++
	w.e.Header, w.e.dir, w.e.name = h, d, name
	if st != nil {
		w.e.Stat = *st
	} else {
		w.e.Stat = unix.Stat_t{}
	}
	return w.fn(&w.e)
}

func (w *walker) mtime(ts unix.Timespec) time.Time {
	switch w.opts.Times {
	case Nanoseconds:
		return time.Unix(ts.Unix())
	case RoundSeconds:
		return time.Unix(ts.Unix()).Round(time.Second)
	default:
		return time.Unix(ts.Sec, 0)
	}
}

// header makes the header of an entry from its lstat and xattrs.
func (w *walker) header(rel string, st *unix.Stat_t, xattrs map[string]string) *tar.Header {
	h := &tar.Header{
		Name:    rel,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: w.mtime(st.Mtim),
		// PAX holds xattrs, long names and large ids; with an unspecified
		// format the writer would pick USTAR or GNU per entry.
		Format: tar.FormatPAX,
	}
	if len(xattrs) > 0 {
		h.PAXRecords = make(map[string]string, len(xattrs))
		for k, v := range xattrs {
			h.PAXRecords[PAXXattr+k] = v
		}
	}
	return h
}

// xattrs reads the xattrs to record of the entry name of d ("" for d),
// and whether it is an opaque overlay directory.
func (w *walker) xattrs(d *Dir, name string) (map[string]string, bool, error) {
	xs, err := d.readXattrs(name, &w.xbuf)
	if err != nil || len(xs) == 0 {
		return nil, false, err
	}
	if w.opts.Overlay {
		opaque, err := overlayXattrs(xs, d.Path(name))
		return xs, opaque, err
	}
	for k := range xs {
		if strings.HasPrefix(k, "trusted.overlay.") {
			delete(xs, k)
		}
	}
	return xs, false, nil
}

// root gives the root directory itself, as "./".
func (w *walker) root(d *Dir) error {
	var st unix.Stat_t
	if err := unix.Fstat(d.fd, &st); err != nil {
		return fmt.Errorf("fstat %q: %w", d.path, err)
	}
	xs, _, err := w.xattrs(d, "")
	if err != nil {
		return err
	}
	h := w.header("./", &st, xs)
	h.Typeflag = tar.TypeDir
	if err := w.mapIDs(h, d, ""); err != nil {
		return err
	}
	return w.emit(h, d, "", &st)
}

// walkDir gives the entries below the directory d, at rel ("" for the
// root).
func (w *walker) walkDir(d *Dir, rel string, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("%q is nested more than %d directories deep: %w", d.path, MaxDepth, errdefs.ErrFailedPrecondition)
	}
	names, err := d.Names()
	if err != nil {
		return fmt.Errorf("read dir %q: %w", d.path, err)
	}
	children := make([]child, 0, len(names))
	for _, name := range names {
		if w.opts.Skip != nil && w.opts.Skip(join(rel, name)) {
			continue
		}
		c := child{name: name, outName: name}
		if err := d.Lstat(name, &c.st); err != nil {
			return fmt.Errorf("lstat %q: %w", d.Path(name), err)
		}
		if w.opts.Overlay && isWhiteout(&c.st) {
			c.outName = WhiteoutPrefix + name
		}
		children = append(children, c)
	}
	slices.SortFunc(children, func(a, b child) int { return strings.Compare(a.outName, b.outName) })
	for i := range children {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		if err := w.entry(d, rel, &children[i], depth); err != nil {
			return err
		}
	}
	return nil
}

// join joins a relative directory path and a name read from it (which has
// no "/" and is neither "." nor ".."): already clean.
func join(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

func (w *walker) entry(d *Dir, dirRel string, c *child, depth int) error {
	st := &c.st
	typ := st.Mode & unix.S_IFMT

	// Whiteouts first: since Linux 5.8 overlay may create a whiteout as a hard
	// link to a shared 0/0 device in its work dir, so whiteouts can have
	// nlink > 1 and must not go through the hard link logic below.
	if w.opts.Overlay && isWhiteout(st) {
		w.stats.Whiteouts++
		return w.emit(&tar.Header{
			Typeflag: tar.TypeReg,
			Name:     join(dirRel, c.outName),
			ModTime:  markerTime,
			Format:   tar.FormatPAX,
		}, d, "", nil)
	}
	switch {
	case typ == unix.S_IFSOCK:
		return nil
	case w.opts.NoDevices && (typ == unix.S_IFCHR || typ == unix.S_IFBLK):
		return nil
	}

	rel := join(dirRel, c.name)
	xattrs, opaque, err := w.xattrs(d, c.name)
	if err != nil {
		return err
	}
	h := w.header(rel, st, xattrs)

	switch typ {
	case unix.S_IFDIR:
		h.Typeflag = tar.TypeDir
		h.Name = rel + "/"
		if err := w.mapIDs(h, d, c.name); err != nil {
			return err
		}
		if err := w.emit(h, d, c.name, st); err != nil {
			return err
		}
		if opaque {
			w.stats.OpaqueDirs++
			if err := w.emit(&tar.Header{
				Typeflag: tar.TypeReg,
				Name:     rel + "/" + WhiteoutOpaque,
				ModTime:  markerTime,
				Format:   tar.FormatPAX,
			}, d, "", nil); err != nil {
				return err
			}
		}
		sub, err := d.OpenDir(c.name)
		if err != nil {
			return err
		}
		defer sub.Close()
		var now unix.Stat_t
		if err := unix.Fstat(sub.fd, &now); err != nil {
			return fmt.Errorf("fstat %q: %w", sub.path, err)
		}
		if !SameInode(&now, st) {
			return ChangedError(sub.path)
		}
		return w.walkDir(sub, rel, depth+1)
	case unix.S_IFLNK:
		target, err := d.Readlink(c.name)
		if err != nil {
			return fmt.Errorf("readlink %q: %w", d.Path(c.name), err)
		}
		h.Typeflag = tar.TypeSymlink
		h.Linkname = target
	case unix.S_IFIFO:
		h.Typeflag = tar.TypeFifo
	case unix.S_IFCHR, unix.S_IFBLK:
		h.Typeflag = tar.TypeChar
		if typ == unix.S_IFBLK {
			h.Typeflag = tar.TypeBlock
		}
		h.Devmajor = int64(unix.Major(st.Rdev))
		h.Devminor = int64(unix.Minor(st.Rdev))
	case unix.S_IFREG:
		h.Typeflag = tar.TypeReg
		h.Size = st.Size
		if st.Nlink > 1 {
			key := inode{dev: st.Dev, ino: st.Ino}
			if first, ok := w.links[key]; ok {
				h.Typeflag = tar.TypeLink
				h.Linkname = first
				h.Size = 0
			} else {
				w.links[key] = rel
			}
		}
	default:
		return fmt.Errorf("%q has unknown file type %o", d.Path(c.name), typ)
	}
	if err := w.mapIDs(h, d, c.name); err != nil {
		return err
	}
	return w.emit(h, d, c.name, st)
}

func (w *walker) mapIDs(h *tar.Header, d *Dir, name string) error {
	if w.opts.MapIDs == nil {
		return nil
	}
	return w.opts.MapIDs(h, d.Path(name))
}

// HasContent reports whether the entry is a regular file whose content
// follows its header (not a hard link, not a whiteout or opaque marker).
func (e *Entry) HasContent() bool {
	return e.name != "" && e.Header.Typeflag == tar.TypeReg
}
