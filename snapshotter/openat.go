package snapshotter

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/api/errdefs"
)

// The upper dir of a running instance is written by the tenant's processes
// while the first pass reads it: any directory may become a symlink to "/"
// (or to /proc/self/root), any file a fifo, between two system calls. So the
// walkers never resolve a path of more than one component: each directory is
// held open, its entries are looked at with *at calls on its fd, and a child
// is opened with openat2 refusing symlinks and magic links. A regular file's
// content is opened only through an O_PATH handle whose inode was checked to
// be a regular file, so no fifo, device or socket is ever opened for reading.

// resolveNone is what every open of a name in the upper dir allows: nothing
// but the one name, no symlink (none is followed, not even a trailing one:
// O_NOFOLLOW is set too), no /proc magic link, never above the directory.
const resolveNone = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// maxDepth bounds how deep a walk descends, and so the directory fds it
// holds: deeper than any path an unpacker could create (PATH_MAX is 4096,
// which is 2048 levels of one-letter names).
const maxDepth = 2048

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

// dirHandle is an open directory of the upper dir.
type dirHandle struct {
	f    *os.File // owns fd
	fd   int
	proc string // "/proc/self/fd/<fd>/": names below it resolve in this directory only
}

// openRootDir opens the upper dir itself. Its path is the snapshotter's, not
// the tenant's, and is resolved as usual.
func openRootDir(dir string) (*dirHandle, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return newDirHandle(fd, dir), nil
}

// openDirAt opens the directory name of d. A name that is not (or no
// longer) a directory fails with ENOTDIR or ELOOP (a symlink).
func (d *dirHandle) openDirAt(name, full string) (*dirHandle, error) {
	fd, err := openAt(d.fd, name, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: full, Err: err}
	}
	return newDirHandle(fd, full), nil
}

func newDirHandle(fd int, name string) *dirHandle {
	return &dirHandle{f: os.NewFile(uintptr(fd), name), fd: fd, proc: "/proc/self/fd/" + strconv.Itoa(fd) + "/"}
}

func (d *dirHandle) Close() error { return d.f.Close() }

// names returns the directory's entries ("." and ".." left out).
func (d *dirHandle) names() ([]string, error) {
	return d.f.Readdirnames(-1)
}

// lstat is lstat(2) of the entry name.
func (d *dirHandle) lstat(name string, st *unix.Stat_t) error {
	return unix.Fstatat(d.fd, name, st, unix.AT_SYMLINK_NOFOLLOW)
}

// readlink returns the target of the symlink name.
func (d *dirHandle) readlink(name string) (string, error) {
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

// xattrs reads the xattrs of the entry name without following it: with
// listxattrat/getxattrat (Linux 6.13) on d's fd, or else with the l*xattr
// calls on d's /proc/self/fd link (the directory is reached through its own
// fd; the l-variants do not follow name).
func (d *dirHandle) xattrs(name string) xattrReader {
	if noXattrat.Load() {
		return xattrPath(d.proc + name)
	}
	return xattrAt{d: d, name: name}
}

// xattrAt reads xattrs with the *xattrat system calls, falling back to the
// /proc path on kernels without them.
type xattrAt struct {
	d    *dirHandle
	name string
}

// The *xattrat system calls (the same numbers on every architecture).
const (
	sysGetxattrat  = 464
	sysListxattrat = 465
)

// noXattrat is set when the kernel lacks the *xattrat calls (before 6.13).
var noXattrat atomic.Bool

func (x xattrAt) list(buf []byte) (int, error) {
	name, err := unix.BytePtrFromString(x.name)
	if err != nil {
		return 0, err
	}
	var p unsafe.Pointer
	if len(buf) > 0 {
		p = unsafe.Pointer(&buf[0])
	}
	n, _, errno := unix.Syscall6(sysListxattrat, uintptr(x.d.fd), uintptr(unsafe.Pointer(name)), unix.AT_SYMLINK_NOFOLLOW,
		uintptr(p), uintptr(len(buf)), 0)
	if errno == unix.ENOSYS {
		noXattrat.Store(true)
		return xattrPath(x.d.proc + x.name).list(buf)
	}
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// xattrArgs is the kernel's struct xattr_args.
type xattrArgs struct {
	value uint64
	size  uint32
	flags uint32
}

func (x xattrAt) get(attr string, buf []byte) (int, error) {
	name, err := unix.BytePtrFromString(x.name)
	if err != nil {
		return 0, err
	}
	an, err := unix.BytePtrFromString(attr)
	if err != nil {
		return 0, err
	}
	args := xattrArgs{size: uint32(len(buf))}
	if len(buf) > 0 {
		args.value = uint64(uintptr(unsafe.Pointer(&buf[0])))
	}
	n, _, errno := unix.Syscall6(sysGetxattrat, uintptr(x.d.fd), uintptr(unsafe.Pointer(name)), unix.AT_SYMLINK_NOFOLLOW,
		uintptr(unsafe.Pointer(an)), uintptr(unsafe.Pointer(&args)), unsafe.Sizeof(args))
	runtime.KeepAlive(buf)
	if errno == unix.ENOSYS {
		noXattrat.Store(true)
		return xattrPath(x.d.proc+x.name).get(attr, buf)
	}
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// errNotRegular says an entry is no longer a regular file.
var errNotRegular = errors.New("not a regular file")

// openRegular opens the regular file name of d for reading. The entry is
// first opened O_PATH (which opens nothing: no fifo waits, no device driver
// runs) and checked to be a regular file; only that inode is then opened for
// reading, through the O_PATH fd, whatever the name means by then. The
// file's fstat is returned with it. An entry that is not a regular file
// gives errNotRegular; one that vanished or became a symlink, ENOENT or
// ELOOP.
func (d *dirHandle) openRegular(name, full string, st *unix.Stat_t) (*os.File, error) {
	pfd, err := openAt(d.fd, name, unix.O_PATH)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: full, Err: err}
	}
	defer unix.Close(pfd)
	if err := unix.Fstat(pfd, st); err != nil {
		return nil, &os.PathError{Op: "fstat", Path: full, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%q: %w", full, errNotRegular)
	}
	// Reopening an O_PATH fd through its /proc/self/fd link opens the very
	// inode it holds; the link is this process's own, not the tenant's.
	procFD, err := selfFDDir()
	if err != nil {
		return nil, err
	}
	fd, err := unix.Openat(procFD, strconv.Itoa(pfd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: full, Err: err}
	}
	return os.NewFile(uintptr(fd), full), nil
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

// sameInode reports whether two stats are of one inode.
func sameInode(a, b *unix.Stat_t) bool { return a.Dev == b.Dev && a.Ino == b.Ino }

// changedError says an entry changed between two looks at it in a pass that
// needs it not to (a frozen or stopped instance's).
func changedError(full string) error {
	return fmt.Errorf("%q changed while being read: %w", full, errdefs.ErrConflict)
}
