package tarfs

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// A directory being read may be written by a tenant's processes at the same
// time (a running instance's upper dir): any directory may become a symlink
// to "/" (or to /proc/self/root), any file a fifo, between two system calls.
// So a Dir never resolves a path of more than one component: each directory
// is held open, its entries are looked at with *at calls on its fd, and a
// child is opened with openat2 refusing symlinks and magic links. A regular
// file's content is opened only through an O_PATH handle whose inode was
// checked to be a regular file, so no fifo, device or socket is ever opened
// for reading.

// resolveNone is what every open of a name below a Dir allows: nothing but
// the one name, no symlink (none is followed, not even a trailing one:
// O_NOFOLLOW is set too), no /proc magic link, never above the directory.
const resolveNone = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// MaxDepth bounds how deep a walk descends, and so the directory fds it
// holds: deeper than any path an unpacker could create (PATH_MAX is 4096,
// which is 2048 levels of one-letter names).
const MaxDepth = 2048

// noOpenat2 is set when the kernel lacks openat2 (before Linux 5.6). openat
// with O_NOFOLLOW of a single name is then equivalent: the name has no "/"
// to resolve and a trailing symlink is refused.
var noOpenat2 atomic.Bool

// openAt opens name, a single entry of the directory dirfd, with flags
// (O_CLOEXEC and O_NOFOLLOW are added), resolving no symlink or magic link.
func openAt(dirfd int, name string, flags int) (int, error) {
	flags |= unix.O_CLOEXEC | unix.O_NOFOLLOW
	if !noOpenat2.Load() {
		fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{Flags: uint64(flags), Resolve: resolveNone})
		if !errors.Is(err, unix.ENOSYS) {
			return fd, err
		}
		noOpenat2.Store(true)
	}
	return unix.Openat(dirfd, name, flags, 0)
}

// Dir is an open directory of a tree being read. Its methods take the name
// of one entry of it, never a path.
type Dir struct {
	f    *os.File // owns fd
	fd   int
	path string // for errors
	proc string // "/proc/self/fd/<fd>/": names below it resolve in this directory only
	xbuf []byte // scratch for xattrs
}

// OpenDir opens the root of a tree. Its path is the caller's, not the
// tenant's, and is resolved as usual.
func OpenDir(dir string) (*Dir, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return newDir(fd, dir), nil
}

// OpenDir opens the directory name of d. A name that is not (or no longer)
// a directory fails with ENOTDIR or ELOOP (a symlink).
func (d *Dir) OpenDir(name string) (*Dir, error) {
	full := d.Path(name)
	fd, err := openAt(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: full, Err: err}
	}
	return newDir(fd, full), nil
}

func newDir(fd int, path string) *Dir {
	return &Dir{f: os.NewFile(uintptr(fd), path), fd: fd, path: path, proc: "/proc/self/fd/" + strconv.Itoa(fd) + "/"}
}

// Close closes the directory.
func (d *Dir) Close() error { return d.f.Close() }

// Path returns the path of the entry name of d, for messages; "" names d.
func (d *Dir) Path(name string) string {
	if name == "" {
		return d.path
	}
	return d.path + "/" + name
}

// Names returns the directory's entries ("." and ".." left out), unsorted.
func (d *Dir) Names() ([]string, error) {
	return d.f.Readdirnames(-1)
}

// Lstat is lstat(2) of the entry name.
func (d *Dir) Lstat(name string, st *unix.Stat_t) error {
	return unix.Fstatat(d.fd, name, st, unix.AT_SYMLINK_NOFOLLOW)
}

// Readlink returns the target of the symlink name.
func (d *Dir) Readlink(name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(d.fd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// ErrNotRegular says an entry is no longer a regular file.
var ErrNotRegular = errors.New("not a regular file")

// OpenFile opens the regular file name of d for reading. The entry is first
// opened O_PATH (which opens nothing: no fifo waits, no device driver runs)
// and checked to be a regular file; only that inode is then opened for
// reading, through the O_PATH fd, whatever the name means by then. The
// file's fstat is returned in st. An entry that is not a regular file gives
// ErrNotRegular; one that vanished or became a symlink, ENOENT or ELOOP.
func (d *Dir) OpenFile(name string, st *unix.Stat_t) (*os.File, error) {
	pfd, err := openAt(d.fd, name, unix.O_PATH)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.Path(name), Err: err}
	}
	defer unix.Close(pfd)
	if err := unix.Fstat(pfd, st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: d.Path(name), Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%q: %w", d.Path(name), ErrNotRegular)
	}
	// Reopening an O_PATH fd through its /proc/self/fd link opens the very
	// inode it holds; the link is this process's own, not the tenant's.
	procFD, err := selfFDDir()
	if err != nil {
		return nil, err
	}
	fd, err := unix.Openat(procFD, strconv.Itoa(pfd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d.Path(name), Err: err}
	}
	return os.NewFile(uintptr(fd), d.Path(name)), nil
}

// selfFDDir returns a directory fd of /proc/self/fd, opened once: reopening
// through it resolves one name instead of a whole /proc path.
var selfFDDir = sync.OnceValues(func() (int, error) {
	fd, err := unix.Open("/proc/self/fd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /proc/self/fd (is /proc mounted?): %w", err)
	}
	return fd, nil
})

// SameInode reports whether two stats are of one inode.
func SameInode(a, b *unix.Stat_t) bool { return a.Dev == b.Dev && a.Ino == b.Ino }

// ChangedError says the entry at path changed between two looks at it in a
// walk that needs it not to (a frozen or stopped instance's).
func ChangedError(path string) error {
	return fmt.Errorf("%q changed while being read: %w", path, errdefs.ErrConflict)
}
