//go:build linux

// Package prefetch records which files a running instance reads, so that the
// next save of its project can put them first in the eStargz layer
// (EncodeOptions.PrioritizedFiles), which the stargz snapshotter fetches in
// one go from the layer's mount on, and the next lazy start reads them ahead
// (Warm) before its first commands run.
//
// Terms: root is a directory on the host, normally a container's rootfs
// mount (the overlay or stargz mount containerd made for the task); a
// recorded path is relative to root, with a leading "/" ("/usr/bin/dot"),
// and ends in "/" when it names a directory ("/usr/lib/").
package prefetch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// Events recorded. FAN_OPEN and FAN_OPEN_EXEC (execve and the loader's
// opens of shared libraries) catch the first use of almost every file;
// FAN_ACCESS adds files read through descriptors opened before Record
// started. The kernel merges repeated unread events of one file and process,
// so a large sequential read costs a few events, not one per read(2).
// FAN_ONDIR reports directories too (opened to be listed); without it the
// kernel leaves them out. FAN_MODIFY and FAN_CLOSE_WRITE tell files opened
// for writing; FAN_CLOSE_NOWRITE, files opened only for reading: a file
// that was written and never read (a log, a file created by the instance)
// is not a first read.
const mask = unix.FAN_OPEN | unix.FAN_OPEN_EXEC | unix.FAN_ACCESS | unix.FAN_ONDIR |
	unix.FAN_MODIFY | unix.FAN_CLOSE_WRITE | unix.FAN_CLOSE_NOWRITE

// readEvents mark a file as read; writeEvents as written.
const (
	readEvents  = unix.FAN_ACCESS | unix.FAN_OPEN_EXEC | unix.FAN_CLOSE_NOWRITE
	writeEvents = unix.FAN_MODIFY | unix.FAN_CLOSE_WRITE
)

// Record watches the mounted rootfs at root (the container's rootfs mount
// on the host, e.g. the path containerd mounted for the task, or any
// directory tree) for file opens and reads for duration d (or until ctx is
// done), and returns the paths (relative to root, with leading "/") in
// first-access order, deduplicated, capped at max entries (max <= 0: no
// cap). Directories that were opened (listed) end in "/". Files that were
// written and never read (opened for writing only) are left out. It returns
// as soon as max paths are recorded. Record is Start, Collect and Close.
//
// Record needs CAP_SYS_ADMIN (fanotify). It marks the whole mount that holds
// root (FAN_MARK_MOUNT) and keeps the events of files under root, so root
// may be any directory; a container's overlay rootfs is a mount of its own,
// so the mark covers exactly it. The events of Record's own process are
// ignored. A file renamed or deleted between its event and Record resolving
// it is dropped; so are events lost when the kernel's queue (16,384 events)
// overflows.
//
// A root that does not exist gives errdefs.ErrNotFound; one that is not a
// directory, errdefs.ErrInvalidArgument. Cancelling ctx ends the recording
// early and returns what was recorded with ctx's error.
func Record(ctx context.Context, root string, d time.Duration, max int) ([]string, error) {
	rec, err := Start(root, max)
	if err != nil {
		return nil, err
	}
	defer rec.Close()
	return rec.Collect(ctx, d)
}

// A Recording holds the fanotify mark of Start: every open and read under
// its root from Start on is queued in the kernel until Collect reads it.
type Recording struct {
	fd int
	// mu guards r and reading fd: Mark drains the queue from another
	// goroutine than Collect's.
	mu     sync.Mutex
	r      *recorder
	closed bool
}

// Start marks root (see Record) and returns once the mark is in place, so a
// caller can make reads after it knowing they are recorded.
func Start(root string, max int) (*Recording, error) {
	abs, err := filepath.Abs(root)
	if err == nil {
		// readlink of /proc/self/fd/N gives the resolved path.
		abs, err = filepath.EvalSymlinks(abs)
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("record %q: %w", root, errors.Join(errdefs.ErrNotFound, err))
		}
		return nil, fmt.Errorf("record %q: %w", root, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("record %q: %w", root, errors.Join(errdefs.ErrNotFound, err))
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("record %q: not a directory: %w", root, errdefs.ErrInvalidArgument)
	}

	fd, err := unix.FanotifyInit(unix.FAN_CLASS_NOTIF|unix.FAN_CLOEXEC|unix.FAN_NONBLOCK,
		unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC|unix.O_NOATIME)
	if err != nil {
		return nil, fmt.Errorf("fanotify_init: %w", err)
	}
	// Mark the path as given, not as resolved here: for a container's
	// /proc/PID/root the kernel follows the magic link to the container's
	// rootfs mount, while the resolved "/" would be the host's root mount.
	if err := unix.FanotifyMark(fd, unix.FAN_MARK_ADD|unix.FAN_MARK_MOUNT, mask, unix.AT_FDCWD, root); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fanotify_mark %q: %w", root, err)
	}
	return &Recording{fd: fd, r: newRecorder(abs, max)}, nil
}

// Collect reads events for d from now (or until ctx is done, or max paths
// are recorded) and returns all paths recorded since Start (as Record
// filters them). Events queued before the call are read even when d is 0;
// Collect may be called again to go on recording, so a caller can use the
// list while it grows.
func (rec *Recording) Collect(ctx context.Context, d time.Duration) ([]string, error) {
	deadline := time.Now().Add(d)
	buf := make([]byte, 64<<10)
	for {
		wait := time.Until(deadline)
		if wait <= 0 || rec.Full() {
			break
		}
		if err := ctx.Err(); err != nil {
			return rec.result(), err
		}
		// Poll in short slices so that a cancelled ctx ends the wait.
		ms := int(min(wait, 50*time.Millisecond) / time.Millisecond)
		if ms < 1 {
			ms = 1
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(rec.fd), Events: unix.POLLIN}}, ms)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return rec.result(), fmt.Errorf("poll fanotify: %w", err)
		}
		if n > 0 {
			if err := rec.drain(buf); err != nil {
				return rec.result(), err
			}
		}
	}
	// Events that arrived just before the deadline are queued already.
	if err := rec.drain(buf); err != nil {
		return rec.result(), err
	}
	return rec.result(), ctx.Err()
}

// drain reads the queued events unless max paths are recorded.
func (rec *Recording) drain(buf []byte) error {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.closed || rec.r.full() {
		return nil
	}
	return rec.r.drain(rec.fd, buf)
}

func (rec *Recording) result() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.r.result()
}

// Mark reads the events queued so far and returns the paths recorded up to
// now (as Collect), while Collect may be running in another goroutine: a
// caller marks a moment (the end of a command whose reads are all queued)
// in the list. After Close it returns nil.
func (rec *Recording) Mark() []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.closed {
		return nil
	}
	if !rec.r.full() {
		_ = rec.r.drain(rec.fd, make([]byte, 64<<10)) // a failure shows in Collect
	}
	return rec.r.result()
}

// Overflows is how many times the kernel's event queue overflowed since
// Start (events were lost in each).
func (rec *Recording) Overflows() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.r.overflows
}

// Full reports whether max paths are recorded: Collect then returns at once.
func (rec *Recording) Full() bool {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.r.full()
}

// Close removes the mark.
func (rec *Recording) Close() error {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.closed {
		return nil
	}
	rec.closed = true
	return unix.Close(rec.fd)
}

type recorder struct {
	root  string
	max   int
	self  int32
	seen  map[string]uint8 // the path's marks: wasRead, wasWritten, ownOutput
	paths []string         // in first-event order
	// files say, per file (inode), whether the instance first read it
	// (fromImage) or first wrote it (instanceMade): a file written before
	// it was first read is the instance's own output under any name it
	// gets later (apt and dpkg write to a temporary name and rename).
	files map[inodeID]uint8
	// overflows counts the kernel's queue overflows: events were lost, so
	// a file's own-output mark may be missing (its write was not seen).
	overflows int
}

type inodeID struct{ dev, ino uint64 }

// Marks of a path.
const (
	wasRead uint8 = 1 << iota
	wasWritten
	// ownOutput: the path was first read from a file the instance had
	// written before (created, or changed, then read back).
	ownOutput
)

// Marks of a file.
const (
	fromImage uint8 = 1 << iota
	instanceMade
)

func newRecorder(root string, max int) *recorder {
	return &recorder{root: root, max: max, self: int32(os.Getpid()),
		seen: make(map[string]uint8), files: make(map[inodeID]uint8)}
}

func (r *recorder) full() bool { return r.max > 0 && len(r.paths) >= r.max }

// result is the recorded paths that were read from the image: without
// those written and never read, and without those the instance wrote
// before it read them (its own output: what apt downloads and unpacks and
// then reads back is not what a new instance of the image reads first).
func (r *recorder) result() []string {
	out := make([]string, 0, len(r.paths))
	for _, p := range r.paths {
		m := r.seen[p]
		if m&ownOutput != 0 || (m&wasWritten != 0 && m&wasRead == 0) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// drain reads and resolves every queued event. Each event carries an open
// descriptor of the file, which is closed here whatever happens.
func (r *recorder) drain(fd int, buf []byte) error {
	const metaLen = int(unsafe.Sizeof(unix.FanotifyEventMetadata{}))
	for {
		n, err := unix.Read(fd, buf)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read fanotify: %w", err)
		}
		if n <= 0 {
			return nil
		}
		for off := 0; off+metaLen <= n; {
			m := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&buf[off]))
			if m.Vers != unix.FANOTIFY_METADATA_VERSION {
				return fmt.Errorf("fanotify metadata version %d, want %d", m.Vers, unix.FANOTIFY_METADATA_VERSION)
			}
			if m.Event_len < uint32(metaLen) {
				return fmt.Errorf("fanotify event of %d bytes", m.Event_len)
			}
			off += int(m.Event_len)
			if m.Fd < 0 { // FAN_NOFD: the queue overflowed
				if m.Mask&unix.FAN_Q_OVERFLOW != 0 {
					r.overflows++
				}
				continue
			}
			r.add(int(m.Fd), m.Pid, m.Mask)
			unix.Close(int(m.Fd))
		}
	}
}

func (r *recorder) add(fd int, pid int32, events uint64) {
	if pid == r.self {
		return
	}
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || strings.HasSuffix(p, " (deleted)") {
		return
	}
	var rel string
	switch {
	case p == r.root:
		rel = "/"
	case r.root == "/":
		rel = p
	case strings.HasPrefix(p, r.root+"/"):
		rel = p[len(r.root):]
	default:
		return // elsewhere on the same mount
	}
	var st unix.Stat_t
	statErr := unix.Fstat(fd, &st)
	if statErr == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR && rel != "/" {
		rel += "/"
	}
	var marks uint8
	if events&readEvents != 0 {
		marks |= wasRead
	}
	if events&writeEvents != 0 {
		marks |= wasWritten
	}
	if statErr == nil {
		// Written means FAN_MODIFY: the kernel merges a process's events of
		// a file while they are queued, so a close of a descriptor opened
		// for writing (FAN_CLOSE_WRITE) can show up at the place of its
		// open, before reads other processes made in between. For the
		// same reason one event may carry a write and a read (apt's store
		// method writes a list and reads it back to hash it): the write
		// counts as first.
		id := inodeID{uint64(st.Dev), st.Ino}
		f := r.files[id]
		if f == 0 {
			switch {
			case events&unix.FAN_MODIFY != 0:
				f = instanceMade
			case marks&wasRead != 0:
				f = fromImage
			}
			if f != 0 {
				r.files[id] = f
			}
		}
		if f == instanceMade && marks&wasRead != 0 {
			marks |= ownOutput
		}
	}
	if old, ok := r.seen[rel]; ok {
		if old&wasRead != 0 {
			marks &^= ownOutput // read from the image before
		}
		r.seen[rel] = old | marks
		return
	}
	if r.full() {
		return
	}
	r.seen[rel] = marks
	r.paths = append(r.paths, rel)
}

// Excluded are the runtime mount points of a container (as
// snapshotter.DefaultExcludes): nothing under them is in a layer.
var Excluded = []string{"/proc", "/sys", "/dev", "/run", "/tmp"}

// Prioritize turns a recorded list into EncodeOptions.PrioritizedFiles: it
// drops directories (paths ending in "/", and "/"), paths under Excluded,
// and duplicates, and keeps the order. Paths stay absolute ("/usr/bin/dot"):
// estargz.WithPrioritizedFiles treats "usr/bin/dot", "/usr/bin/dot" and
// "./usr/bin/dot" alike, as paths from the layer root, and moves each file's
// parent directories (and a hard link's target) up with it; paths that are
// not in the layer are skipped by Encode (WithAllowPrioritizeNotFound).
func Prioritize(recorded []string) []string {
	out := make([]string, 0, len(recorded))
	seen := make(map[string]bool, len(recorded))
	for _, p := range recorded {
		if p == "" || strings.HasSuffix(p, "/") {
			continue
		}
		p = filepath.Clean("/" + p)
		if p == "/" || seen[p] || excluded(p) {
			continue
		}
		seen[p] = true
		out = append(out, p)
	}
	return out
}

func excluded(p string) bool {
	for _, e := range Excluded {
		if p == e || strings.HasPrefix(p, e+"/") {
			return true
		}
	}
	return false
}
