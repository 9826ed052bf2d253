package snapshotter

import (
	"archive/tar"
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

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/tarfs"
)

// Terms used by TwoPass:
//   - stamp: what lstat says of a file that any change to it also changes:
//     device and inode number, type and mode, uid/gid, link count, size,
//     mtime and ctime to the nanosecond. The kernel sets ctime to "now" on
//     every change of content or metadata (write, truncate, fallocate, a
//     store through a shared mapping after writeback, chmod, chown, link,
//     rename, utimes, setxattr); no system call sets it to a chosen value.
//   - Prepare copy: the content of a regular file copied by Prepare into the
//     data file while the instance runs, together with the file's stamp.
//   - trusted copy: a Prepare copy whose stamp did not change while it was
//     copied and whose ctime is older than the start of the copy by more than
//     TornMargin. Only trusted copies are kept.
//   - plan: the tar headers Frozen records, in Spool's order, each regular
//     file with the offset of its content in the data file.

// TornMargin is how much older than the start of its copy a file's ctime must
// be for Prepare to trust the copy. The kernel stamps ctime from a coarse
// clock (one tick, 1-10 ms, behind the real time); a write in the same tick as
// the previous change may leave ctime as it was. A copy started more than
// TornMargin after the last change is safe: any later write is stamped with a
// time after the copy started, so ctime moves.
const TornMargin = 50 * time.Millisecond

// FrozenStats describe what one Frozen pass planned.
type FrozenStats struct {
	// SpoolStats are those Spool would report for the same upper dir:
	// entries, whiteouts and opaque dirs planned, Bytes the size of the tar
	// WriteTar writes, Duration the time the Frozen pass took (the part of
	// the save that needs the instance frozen).
	SpoolStats
	// RecopiedFiles and RecopiedBytes count the regular files (and their
	// content bytes) that Frozen copied itself because they are new, changed
	// since Prepare, or their Prepare copy may be torn. Their content is
	// what the freeze window grows with.
	RecopiedFiles int
	RecopiedBytes int64
}

// PrepareStats describe what Prepare copied.
type PrepareStats struct {
	Files int   // regular files whose copy is trusted, or held (a hard-linked inode counts once)
	Bytes int64 // content bytes of those files
	// Held counts the files of Files that Prepare held open instead of
	// copying (see TwoPass, "Held files"); HeldBytes their content bytes.
	Held      int
	HeldBytes int64
	Torn      int // copies dropped: changed while copied, or changed less than TornMargin before
	Duration  time.Duration
}

// Held files: Prepare does not copy a regular file of at least HeldMinSize
// bytes. It keeps the file open instead, with the stamp it had right after
// its dirty pages were written back, and the encoder reads it in place after
// the thaw. Each read is followed by an fstat; if the stamp is no longer the
// one recorded, the read fails with ErrChangedAfterThaw. By the argument of
// TwoPass, an unchanged stamp at any time after Prepare means the content is
// what it was when Prepare recorded the stamp, which Frozen confirmed is what
// it was while frozen; so a read whose stamp is unchanged afterwards returned
// the frozen content. A held file changed after the thaw has lost that
// content: the caller captures again with SpoolOptions.CopyContent. At most
// maxHeld files are held; the rest are copied.
const (
	HeldMinSize = 64 << 10
	maxHeld     = 1024
)

// ErrChangedAfterThaw is the error of a read of a held file that changed
// after the frozen pass (see "Held files"). It is a conflict: the capture
// can be redone with SpoolOptions.CopyContent, which holds nothing.
var ErrChangedAfterThaw = fmt.Errorf("changed after the frozen pass: %w", errdefs.ErrConflict)

// TwoPass makes the same layer tar as Spool, in passes, so that the instance
// needs to be frozen only for the second:
//
//	p, err := Prepare(ctx, upperDir, workDir, opts) // not frozen: copies small files' content into workDir, holds large files open (see "Held files"), records metadata
//	stats, err := p.Frozen(ctx)                     // frozen: re-walks metadata only; copies the content of files that are new or changed since Prepare (or whose Prepare copy may be torn); records the final plan
//	err = p.WriteTar(ctx, w)                        // thawed: writes the tar from the plan, content from the Prepare copies or the Frozen copies
//	p.Close()                                       // removes workDir's files
//
// The tar WriteTar writes is byte for byte the one Spool would have written
// at the moment of Frozen. Frozen reads every entry's metadata (type, mode,
// owner, times, xattrs, opaque and whiteout markers, symlink targets, hard
// link groups) afresh, exactly as Spool does; only the content of a regular
// file is taken from Prepare, and only when the file's stamp is the one
// Prepare recorded for that path and the copy was trusted.
//
// Why an unchanged stamp means unchanged content: Prepare starts each copy at
// time t0 by writing back the file's dirty pages (so that every later store
// through a shared mapping faults and updates the file's times, as plain
// writes do), stats the open file, copies Size bytes, and stats it again. It
// keeps the copy only if the two stats are equal and ctime < t0-TornMargin.
// Any modification the copy could have missed happens after t0, and is
// stamped with a ctime no earlier than t0 minus one clock tick, which is later
// than the recorded ctime: either the second stat sees it (copy dropped) or
// Frozen does (file copied again). A path that now names another inode has a
// different inode number or, if the number was reused, a newer ctime. The
// argument assumes the wall clock does not step back by more than TornMargin
// between Prepare and Frozen, and that nothing writes to the upper dir's
// block device below the filesystem.
//
// Memory holds metadata only (one record per regular file, one header per
// entry); content goes to one unlinked, append-only data file in workDir, so
// workDir needs room for the upper dir's regular files plus what Frozen
// copies, except for held files (regular files of at least HeldMinSize,
// below), which are not copied but kept open and read in place after the
// thaw. A TwoPass is not safe for concurrent use.
type TwoPass struct {
	root     string
	excludes []string
	shift    *IDShift
	data     *os.File // unlinked; content copies appended at dataEnd
	dataEnd  int64
	prepEnd  int64              // dataEnd when Prepare returned
	copies   map[string]copyRec // trusted Prepare copies by upper-dir path
	byInode  map[inode]copyRec  // trusted Prepare copies of inodes with several links
	buf      []byte
	prepared PrepareStats
	copyAll  bool        // SpoolOptions.CopyContent: hold no file
	held     []*heldFile // files read in place, closed by Close

	plan   []planEntry
	stats  FrozenStats
	frozen bool
}

// stamp is what Frozen compares with Prepare's record of a path.
type stamp struct {
	dev, ino     uint64
	mode         uint32
	uid, gid     uint32
	nlink        uint64
	size         int64
	mtime, ctime unix.Timespec
}

func stampOf(st *unix.Stat_t) stamp {
	return stamp{
		dev: st.Dev, ino: st.Ino, mode: st.Mode, uid: st.Uid, gid: st.Gid,
		nlink: uint64(st.Nlink), size: st.Size, mtime: st.Mtim, ctime: st.Ctim,
	}
}

// inode names a file for hard link groups.
type inode struct{ dev, ino uint64 }

// copyRec is a trusted Prepare copy: stamp.size bytes at off in the data
// file, or, if held is set, the file itself.
type copyRec struct {
	stamp stamp
	off   int64
	held  *heldFile
}

// planEntry is one tar entry; a regular file's content is hdr.Size bytes at
// off in the data file, or at the start of held.
type planEntry struct {
	hdr  *tar.Header
	off  int64
	held *heldFile
}

// content returns where the entry's content is: a reader and the offset of
// the content in it.
func (e planEntry) content(data *os.File) (io.ReaderAt, int64) {
	if e.held != nil {
		return e.held, 0
	}
	return data, e.off
}

// heldFile is a regular file Prepare left in place (see "Held files").
type heldFile struct {
	f     *os.File
	path  string
	stamp stamp
}

// ReadAt reads from the file, then checks that its stamp is still the one
// Prepare recorded: if not, what was read may not be the frozen content,
// and the error is ErrChangedAfterThaw.
func (h *heldFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := h.f.ReadAt(b, off)
	var st unix.Stat_t
	if serr := unix.Fstat(int(h.f.Fd()), &st); serr != nil {
		return n, fmt.Errorf("fstat %q: %w", h.path, serr)
	}
	if stampOf(&st) != h.stamp {
		return n, fmt.Errorf("%q: %w", h.path, ErrChangedAfterThaw)
	}
	return n, err
}

// Prepare walks upperDir as Spool would and copies the content of every
// regular file smaller than HeldMinSize into an unlinked data file in
// workDir (every one with opts.CopyContent), holding the larger ones open
// instead (see "Held files"), and records each file's stamp. The instance keeps running. workDir must exist and must not be in
// upperDir. See TwoPass.
func Prepare(ctx context.Context, upperDir, workDir string, opts SpoolOptions) (*TwoPass, error) {
	start := time.Now()
	excludes, err := cleanExcludes(opts.Excludes)
	if err != nil {
		return nil, err
	}
	for _, d := range []string{upperDir, workDir} {
		fi, err := os.Stat(d)
		if err != nil {
			return nil, fmt.Errorf("directory %q: %w", d, errors.Join(errdefs.ErrNotFound, err))
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("%q is not a directory: %w", d, errdefs.ErrInvalidArgument)
		}
	}
	if inside, err := isWithin(workDir, upperDir); err != nil {
		return nil, err
	} else if inside {
		return nil, fmt.Errorf("work dir %q is inside upper dir %q: %w", workDir, upperDir, errdefs.ErrInvalidArgument)
	}
	data, err := os.CreateTemp(workDir, ".envd-twopass-*.data")
	if err != nil {
		return nil, fmt.Errorf("create data file in %q: %w", workDir, err)
	}
	// Unlinked now, so that neither Close nor a crash can leave it behind.
	if err := os.Remove(data.Name()); err != nil {
		data.Close()
		return nil, fmt.Errorf("unlink data file: %w", err)
	}
	p := &TwoPass{
		root:     upperDir,
		excludes: excludes,
		shift:    opts.IDShift,
		data:     data,
		copies:   make(map[string]copyRec),
		byInode:  make(map[inode]copyRec),
		buf:      make([]byte, 1<<20),
		copyAll:  opts.CopyContent,
	}
	root, err := tarfs.OpenDir(upperDir)
	if err != nil {
		p.Close()
		return nil, err
	}
	err = p.prepareDir(ctx, root, "", 0)
	root.Close()
	if err != nil {
		p.Close()
		return nil, fmt.Errorf("prepare %q: %w", upperDir, err)
	}
	p.prepEnd = p.dataEnd
	p.prepared.Duration = time.Since(start)
	return p, nil
}

// isWithin reports whether dir is root or below it, symlinks resolved.
func isWithin(dir, root string) (bool, error) {
	d, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false, fmt.Errorf("resolve %q: %w", dir, err)
	}
	r, err := filepath.EvalSymlinks(root)
	if err != nil {
		return false, fmt.Errorf("resolve %q: %w", root, err)
	}
	if d, err = filepath.Abs(d); err != nil {
		return false, err
	}
	if r, err = filepath.Abs(r); err != nil {
		return false, err
	}
	rel, err := filepath.Rel(r, d)
	if err != nil {
		return false, nil
	}
	return rel == "." || (rel != ".." && !strings.HasPrefix(rel, "../")), nil
}

// Prepared returns what Prepare copied.
func (p *TwoPass) Prepared() PrepareStats { return p.prepared }

// excluded applies the excludes as Spool does.
func (p *TwoPass) excluded(rel string) bool { return excluded(p.excludes, rel) }

// prepareDir copies the regular files below the directory d, at rel.
// Entries that vanish or change type while it runs are skipped: Frozen sees
// them as they end up. Like tarfs.Walk, it looks at entries only relative
// to d's fd and follows nothing: the tenant may be swapping directories for
// symlinks while it runs.
func (p *TwoPass) prepareDir(ctx context.Context, d *tarfs.Dir, rel string, depth int) error {
	if depth > tarfs.MaxDepth {
		return nil // Frozen refuses it
	}
	names, err := d.Names()
	if err != nil {
		return fmt.Errorf("read dir %q: %w", d.Path(""), err)
	}
	slices.Sort(names) // the order Frozen and WriteTar read the copies in, near enough
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		childRel := path.Join(rel, name)
		if p.excluded(childRel) {
			continue
		}
		var st unix.Stat_t
		if err := d.Lstat(name, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return fmt.Errorf("lstat %q: %w", d.Path(name), err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			// Refuse redirect_dir upper dirs now rather than in the freeze.
			if _, err := d.OverlayXattrs(name); err != nil && !errors.Is(err, unix.ENOENT) {
				return err
			}
			sub, err := d.OpenDir(name)
			if err != nil {
				if vanished(err) {
					continue
				}
				return err
			}
			err = p.prepareDir(ctx, sub, childRel, depth+1)
			sub.Close()
			if err != nil {
				return err
			}
		case unix.S_IFREG:
			if _, err := d.OverlayXattrs(name); err != nil && !errors.Is(err, unix.ENOENT) {
				return err // metacopy
			}
			if err := p.prepareFile(ctx, d, name, childRel, &st); err != nil {
				return err
			}
		}
	}
	return nil
}

// vanished reports whether an open failed because the entry is gone or is
// no longer what it was (a directory or file swapped for a symlink, a fifo,
// a device): the first pass skips it, the frozen pass sees what it became.
func vanished(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) ||
		errors.Is(err, unix.EXDEV) || errors.Is(err, tarfs.ErrNotRegular)
}

// prepareFile copies the content of the regular file name of d (rel in the
// upper dir) and records it if the copy is trusted (see TwoPass for the
// argument). It copies at most the size fstat gives when the copy starts.
func (p *TwoPass) prepareFile(ctx context.Context, d *tarfs.Dir, name, rel string, lst *unix.Stat_t) error {
	if lst.Nlink > 1 {
		if rec, ok := p.byInode[inode{dev: lst.Dev, ino: lst.Ino}]; ok && rec.stamp == stampOf(lst) {
			p.copies[rel] = rec // another name of an inode already copied
			return nil
		}
	}
	full := d.Path(name)
	t0 := time.Now()
	var before, after unix.Stat_t
	f, err := d.OpenFile(name, &before)
	if err != nil {
		if vanished(err) {
			return nil
		}
		return err
	}
	keep := false
	defer func() {
		if !keep {
			f.Close()
		}
	}()
	fd := int(f.Fd())

	// Write back dirty pages: writeback write-protects them in every shared
	// mapping, so a later store through a mapping faults and updates the
	// file's times like write(2) does. Without this, stores to a page
	// dirtied before the copy would change the content and not the ctime.
	synced := unix.SyncFileRange(fd, 0, 0,
		unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER) == nil
	if err := unix.Fstat(fd, &before); err != nil {
		return fmt.Errorf("fstat %q: %w", full, err)
	}
	if !p.copyAll && before.Size >= HeldMinSize && len(p.held) < maxHeld {
		// Held, not copied: trusted under the same rule as a copy made
		// now, which would have been checked against this stamp.
		ctime := time.Unix(before.Ctim.Unix())
		if !synced || !ctime.Before(t0.Add(-TornMargin)) {
			p.prepared.Torn++
			return nil
		}
		h := &heldFile{f: f, path: full, stamp: stampOf(&before)}
		keep = true
		p.held = append(p.held, h)
		rec := copyRec{stamp: h.stamp, held: h}
		p.copies[rel] = rec
		if before.Nlink > 1 {
			p.byInode[inode{dev: before.Dev, ino: before.Ino}] = rec
		}
		p.prepared.Files++
		p.prepared.Bytes += before.Size
		p.prepared.Held++
		p.prepared.HeldBytes += before.Size
		return nil
	}
	off := p.dataEnd
	n, err := p.copyContent(ctx, f, before.Size)
	if err != nil {
		return fmt.Errorf("copy %q: %w", full, err)
	}
	if err := unix.Fstat(fd, &after); err != nil {
		return fmt.Errorf("fstat %q: %w", full, err)
	}
	s := stampOf(&after)
	ctime := time.Unix(after.Ctim.Unix())
	if !synced || n != before.Size || stampOf(&before) != s || !ctime.Before(t0.Add(-TornMargin)) {
		// Possibly torn: drop the copy, Frozen copies the file again.
		p.prepared.Torn++
		if err := p.data.Truncate(off); err != nil {
			return fmt.Errorf("truncate data file: %w", err)
		}
		p.dataEnd = off
		return nil
	}
	rec := copyRec{stamp: s, off: off}
	p.copies[rel] = rec
	if after.Nlink > 1 {
		p.byInode[inode{dev: after.Dev, ino: after.Ino}] = rec
	}
	p.prepared.Files++
	p.prepared.Bytes += n
	return nil
}

// copyContent appends up to size bytes of src (from its start) to the data
// file and returns how many it copied: fewer if src is shorter.
func (p *TwoPass) copyContent(ctx context.Context, src *os.File, size int64) (int64, error) {
	const chunk = 8 << 20
	var done int64
	useCFR := true
	for done < size {
		if err := ctx.Err(); err != nil {
			return done, err
		}
		want := min(size-done, chunk)
		var n int
		var err error
		if useCFR {
			srcOff, dstOff := done, p.dataEnd
			n, err = unix.CopyFileRange(int(src.Fd()), &srcOff, int(p.data.Fd()), &dstOff, int(want), 0)
			if err != nil && done == 0 && (errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) ||
				errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP)) {
				useCFR = false
				continue
			}
		} else {
			n, err = src.ReadAt(p.buf[:min(want, int64(len(p.buf)))], done)
			if n > 0 {
				if _, werr := p.data.WriteAt(p.buf[:n], p.dataEnd); werr != nil {
					return done, fmt.Errorf("write data file: %w", werr)
				}
			}
			if errors.Is(err, io.EOF) {
				err = nil
				if n == 0 {
					return done, nil
				}
			}
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, nil // src shorter than size
		}
		done += int64(n)
		p.dataEnd += int64(n)
	}
	return done, nil
}

// Frozen walks the upper dir again, as Spool does, and records the plan of
// the tar: every entry's header read now, and for each regular file written
// with content either its trusted Prepare copy, if the file's stamp is the
// one Prepare recorded for that path, or a copy made now. Call it with the
// instance frozen. It may be called again (after a failure, say): each call
// starts from Prepare's copies.
func (p *TwoPass) Frozen(ctx context.Context) (FrozenStats, error) {
	start := time.Now()
	if p.data == nil {
		return FrozenStats{}, fmt.Errorf("two-pass spool of %q is closed: %w", p.root, errdefs.ErrFailedPrecondition)
	}
	p.frozen = false
	p.plan = p.plan[:0]
	p.stats = FrozenStats{}
	if p.dataEnd != p.prepEnd { // copies of an earlier Frozen call
		if err := p.data.Truncate(p.prepEnd); err != nil {
			return p.stats, fmt.Errorf("truncate data file: %w", err)
		}
		p.dataEnd = p.prepEnd
	}
	fi, err := os.Stat(p.root)
	if err != nil {
		return p.stats, fmt.Errorf("upper dir %q: %w", p.root, errors.Join(errdefs.ErrNotFound, err))
	}
	if !fi.IsDir() {
		return p.stats, fmt.Errorf("upper dir %q is not a directory: %w", p.root, errdefs.ErrInvalidArgument)
	}
	fz := &freezer{TwoPass: p, ctx: ctx}
	ts, err := tarfs.Walk(ctx, p.root, walkOptions(p.excludes, p.shift), fz.entry)
	p.stats.Entries, p.stats.Whiteouts, p.stats.OpaqueDirs = ts.Entries, ts.Whiteouts, ts.OpaqueDirs
	if err == nil {
		p.stats.Bytes, err = planSize(p.plan)
	}
	p.stats.Duration = time.Since(start)
	if err != nil {
		return p.stats, fmt.Errorf("frozen pass of %q: %w", p.root, err)
	}
	p.frozen = true
	return p.stats, nil
}

// freezer is the handler of the frozen pass: it plans the entries the
// walker gives, a regular file's content taken from its Prepare copy when
// the file is unchanged, else copied now.
type freezer struct {
	*TwoPass
	ctx context.Context
}

// entry plans one entry; a regular file's content is its Prepare copy if
// the file's stamp is the one Prepare recorded for that path, else a copy
// made now of exactly the size lstat gave.
func (z *freezer) entry(e *tarfs.Entry) error {
	if !e.HasContent() {
		z.plan = append(z.plan, planEntry{hdr: e.Header})
		return nil
	}
	off, held, err := z.content(e)
	if err != nil {
		return err
	}
	z.plan = append(z.plan, planEntry{hdr: e.Header, off: off, held: held})
	return nil
}

func (z *freezer) content(e *tarfs.Entry) (int64, *heldFile, error) {
	s := stampOf(&e.Stat)
	if rec, ok := z.copies[e.Header.Name]; ok && rec.stamp == s {
		return rec.off, rec.held, nil
	}
	var now unix.Stat_t
	f, err := e.Open(&now)
	if errors.Is(err, tarfs.ErrNotRegular) {
		return 0, nil, tarfs.ChangedError(e.Path())
	}
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	if stampOf(&now) != s {
		return 0, nil, fmt.Errorf("%q changed while frozen: %w", e.Path(), errdefs.ErrConflict)
	}
	off := z.dataEnd
	n, err := z.copyContent(z.ctx, f, e.Stat.Size)
	if err != nil {
		return 0, nil, fmt.Errorf("copy %q: %w", e.Path(), err)
	}
	if n != e.Stat.Size {
		return 0, nil, fmt.Errorf("%q shrank from %d to %d bytes while frozen: %w", e.Path(), e.Stat.Size, n, errdefs.ErrConflict)
	}
	z.stats.RecopiedFiles++
	z.stats.RecopiedBytes += n
	return off, nil, nil
}

// planSize returns the size of the tar the plan makes: each header as
// tar.Writer encodes it, content padded to 512-byte blocks, and the two zero
// blocks that end the archive.
func planSize(plan []planEntry) (int64, error) {
	var size int64
	for _, e := range plan {
		cw := &countingWriter{w: io.Discard}
		if err := tar.NewWriter(cw).WriteHeader(e.hdr); err != nil {
			return 0, fmt.Errorf("encode header %q: %w", e.hdr.Name, err)
		}
		size += cw.n + (e.hdr.Size+511)/512*512
	}
	return size + 2*512, nil
}

// WriteTar writes the tar Frozen planned to w, the content of regular files
// from the data file or from held files. The instance need not be frozen,
// but if a held file changed after Frozen, WriteTar fails with
// ErrChangedAfterThaw (what it wrote of that file may be wrong; the error
// says so). It may be called more than once.
func (p *TwoPass) WriteTar(ctx context.Context, w io.Writer) error {
	if p.data == nil {
		return fmt.Errorf("two-pass spool of %q is closed: %w", p.root, errdefs.ErrFailedPrecondition)
	}
	if !p.frozen {
		return fmt.Errorf("two-pass spool of %q has no plan (call Frozen first): %w", p.root, errdefs.ErrFailedPrecondition)
	}
	cw := &countingWriter{w: w}
	tw := tar.NewWriter(cw)
	for _, e := range p.plan {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := tw.WriteHeader(e.hdr); err != nil {
			return fmt.Errorf("write header %q: %w", e.hdr.Name, err)
		}
		if e.hdr.Typeflag != tar.TypeReg || e.hdr.Size == 0 {
			continue
		}
		// Hide ReaderFrom/WriterTo so the 1 MiB buffer is used.
		src, off := e.content(p.data)
		n, err := io.CopyBuffer(struct{ io.Writer }{tw}, struct{ io.Reader }{io.NewSectionReader(src, off, e.hdr.Size)}, p.buf)
		if err != nil {
			return fmt.Errorf("write content of %q: %w", e.hdr.Name, err)
		}
		if n != e.hdr.Size {
			return fmt.Errorf("data file holds %d of the %d bytes of %q", n, e.hdr.Size, e.hdr.Name)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("close tar: %w", err)
	}
	if cw.n != p.stats.Bytes {
		return fmt.Errorf("wrote %d bytes of tar, planned %d", cw.n, p.stats.Bytes)
	}
	return nil
}

// Close releases the data file (already unlinked, so its space is freed).
// It is safe to call more than once.
func (p *TwoPass) Close() error {
	if p.data == nil {
		return nil
	}
	err := p.data.Close()
	for _, h := range p.held {
		h.f.Close()
	}
	p.held = nil
	p.data = nil
	p.plan = nil
	p.copies = nil
	p.byInode = nil
	p.frozen = false
	return err
}
