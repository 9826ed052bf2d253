// Package files is the file API's core: file operations confined to an
// instance's root filesystem, done as the instance's user.
//
// Terms:
//   - root: the directory that is "/" for the instance. For a running
//     instance it is /proc/<init pid>/root, the root as its init sees it,
//     so the volumes' bind mounts (and /proc, /dev) are in it; for a
//     stopped one, a read-only mount of its retained layer (OpenSnapshot).
//     A Root holds it open as an fd; nothing here ever resolves a path
//     from the node's "/".
//   - path: what a request names, absolute as the instance sees it
//     ("/etc/hosts"). Clean refuses a relative path, a ".." element or a
//     NUL (errdefs.ErrInvalidArgument). Every path is resolved with
//     openat2 RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS against the root fd:
//     symlinks (absolute ones and "../.." ones included) resolve as they
//     would for a process chrooted there, so they can lead anywhere inside
//     the root and never out of it; /proc magic links are refused (ELOOP,
//     invalid_argument). An operation's final element is acted on with
//     *at calls on its parent's fd and is never followed when it is
//     replaced, removed or moved.
//   - pseudo filesystems (proc, sysfs, cgroup, devpts, ...) inside the
//     root and device nodes, FIFOs and sockets are refused
//     (invalid_argument): they are the kernel's or another process's, not
//     files.
//   - identity: the user the operations run as (Identity). Each operation
//     runs on an OS thread of its own whose filesystem ids (setfsuid,
//     setfsgid, setgroups, all per thread) are the user's host ids and whose
//     effective capabilities are dropped, so the kernel does every
//     permission check; the thread is never given back to the Go scheduler
//     and dies with its goroutine (as). A stream (an archive in or out)
//     runs as an actor instead, whose thread acts as the identity only
//     while it makes file system calls and is given back, its credentials
//     restored and checked, while it waits on the client (thread.go).
//     Created entries belong to the user.
//     The instance's root (uid 0) keeps the capabilities a container's
//     root has over files (chown, dac_override, fowner, fsetid, setfcap);
//     in a user namespace it acts with host uid 0 and what it creates is
//     given to the mapped root.
package files

import (
	"errors"
	"fmt"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// Identity is the user operations act as, with ids as the instance sees
// them.
type Identity struct {
	UID, GID uint32
	Groups   []uint32 // supplementary groups
	// HostBase and HostSize map the instance's ids to the node's: id i <
	// HostSize is host id HostBase+i (a user namespace). HostSize 0: the
	// ids are the host's.
	HostBase, HostSize uint32
}

// overflowID is what an id without a mapping shows as (the kernel's
// overflowuid).
const overflowID = 65534

func (id Identity) host(i uint32) (uint32, error) {
	if id.HostSize == 0 {
		return i, nil
	}
	if i >= id.HostSize {
		return 0, fmt.Errorf("id %d: outside the instance's user namespace (0-%d): %w", i, id.HostSize-1, errdefs.ErrInvalidArgument)
	}
	return id.HostBase + i, nil
}

// view is the instance's id of host id h.
func (id Identity) view(h uint32) int {
	if id.HostSize == 0 {
		return int(h)
	}
	if h < id.HostBase || h-id.HostBase >= id.HostSize {
		return overflowID
	}
	return int(h - id.HostBase)
}

// Root is an instance's root filesystem, open for file operations as one
// identity. Its methods are safe for concurrent use.
type Root struct {
	fd       int // O_PATH of the root directory
	id       Identity
	readOnly bool
	what     string // names the root in errors
	// Host ids of the identity: fs ids the worker threads take, owner of
	// created entries.
	uid, gid uint32
	groups   []uint32
	closers  []func() error
}

// Option configures Open.
type Option func(*Root) error

// ReadOnly refuses every operation that writes, with
// errdefs.ErrFailedPrecondition and reason in its message. Default: writable.
func ReadOnly(reason string) Option {
	return func(r *Root) error {
		r.readOnly = true
		if reason != "" {
			r.what = reason
		}
		return nil
	}
}

// OnClose runs fn when the Root is closed (after its fd is), e.g. to
// release a mount. Default: nothing.
func OnClose(fn func() error) Option {
	return func(r *Root) error {
		if fn == nil {
			return errors.New("on close: nil func")
		}
		r.closers = append(r.closers, fn)
		return nil
	}
}

// Open opens dir (a node path: the caller's, resolved as usual) as an
// instance's root for identity id.
func Open(dir string, id Identity, opts ...Option) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open root %s: %w", dir, err)
	}
	return openFD(fd, id, opts...)
}

func openFD(fd int, id Identity, opts ...Option) (*Root, error) {
	r := &Root{fd: fd, what: "the instance's files are read-only"}
	for _, o := range opts {
		if err := o(r); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	if err := r.SetIdentity(id); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return r, nil
}

// SetIdentity changes the identity later operations act as. Not safe
// while operations run.
func (r *Root) SetIdentity(id Identity) error {
	uid, err := id.host(id.UID)
	if err != nil {
		return err
	}
	gid, err := id.host(id.GID)
	if err != nil {
		return err
	}
	groups := make([]uint32, 0, len(id.Groups))
	for _, g := range id.Groups {
		h, err := id.host(g)
		if err != nil {
			return err
		}
		groups = append(groups, h)
	}
	r.id, r.uid, r.gid, r.groups = id, uid, gid, groups
	return nil
}

// Identity returns the identity operations act as.
func (r *Root) Identity() Identity { return r.id }

// ReadOnly reports whether the root refuses writes.
func (r *Root) ReadOnly() bool { return r.readOnly }

// Close releases the root.
func (r *Root) Close() error {
	err := unix.Close(r.fd)
	for _, c := range r.closers {
		err = errors.Join(err, c())
	}
	return err
}

func (r *Root) writable(p string) error {
	if r.readOnly {
		return fmt.Errorf("%s: %s: %w", p, r.what, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// Clean checks a request's path and returns it relative to the root ("."
// for the root): it must be absolute, without a ".." element or a NUL.
func Clean(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("path: required: %w", errdefs.ErrInvalidArgument)
	}
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("path %q: must be absolute (as the instance sees it): %w", p, errdefs.ErrInvalidArgument)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q: contains a NUL byte: %w", p, errdefs.ErrInvalidArgument)
	}
	for el := range strings.SplitSeq(p, "/") {
		if el == ".." {
			return "", fmt.Errorf("path %q: a \"..\" element is not allowed: %w", p, errdefs.ErrInvalidArgument)
		}
	}
	rel := strings.TrimPrefix(path.Clean(p), "/")
	if rel == "" {
		rel = "."
	}
	return rel, nil
}

// abs is the request path of rel.
func abs(rel string) string {
	if rel == "." {
		return "/"
	}
	return "/" + rel
}

// split returns rel's parent and last element; the root has none.
func split(rel string) (string, string, error) {
	if rel == "." {
		return "", "", fmt.Errorf("path \"/\": the root itself cannot be replaced, moved or removed: %w", errdefs.ErrInvalidArgument)
	}
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if dir == "" {
		dir = "."
	}
	return dir, base, nil
}

// resolve opens rel in the root with flags (O_CLOEXEC added; O_NOFOLLOW
// unless follow).
func (r *Root) resolve(rel string, flags int, follow bool) (int, error) {
	flags |= unix.O_CLOEXEC
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	how := unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for range 16 {
		fd, err := unix.Openat2(r.fd, rel, &how)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue // a concurrent rename moved something under the walk
		}
		return fd, err
	}
	return -1, unix.EAGAIN
}

// reopen opens the file an O_PATH fd holds with flags, checking
// permissions as the calling thread's identity.
func reopen(fd, flags int) (int, error) {
	return unix.Open("/proc/self/fd/"+strconv.Itoa(fd), flags|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
}

// procPath names the directory an fd holds for path-taking calls.
func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// pseudo filesystems whose files are the kernel's: never served.
var pseudoFS = map[int64]string{
	unix.PROC_SUPER_MAGIC:    "proc",
	unix.SYSFS_MAGIC:         "sysfs",
	unix.CGROUP_SUPER_MAGIC:  "cgroup",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2",
	unix.DEVPTS_SUPER_MAGIC:  "devpts",
	unix.SECURITYFS_MAGIC:    "securityfs",
	unix.DEBUGFS_MAGIC:       "debugfs",
	unix.TRACEFS_MAGIC:       "tracefs",
	unix.BPF_FS_MAGIC:        "bpf",
}

// checkFS refuses an fd on a pseudo filesystem.
func checkFS(fd int, p string) error {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(fd, &sfs); err != nil {
		return fmt.Errorf("statfs %s: %w", p, err)
	}
	if name, ok := pseudoFS[int64(sfs.Type)]; ok {
		return fmt.Errorf("path %q is on the kernel's %s filesystem, which the file API does not serve: %w", p, name, errdefs.ErrInvalidArgument)
	}
	return nil
}

// checkType refuses what is not a regular file, directory or symlink.
func checkType(st *unix.Stat_t, p string) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR, unix.S_IFLNK:
		return nil
	case unix.S_IFCHR, unix.S_IFBLK:
		return fmt.Errorf("path %q is a device node, which the file API does not serve: %w", p, errdefs.ErrInvalidArgument)
	default:
		return fmt.Errorf("path %q is a %s, not a file or directory: %w", p, typeName(st.Mode), errdefs.ErrInvalidArgument)
	}
}

// as runs fn on an OS thread of its own that acts as the root's identity
// (see the package doc), and returns fn's error. The thread is locked and
// never unlocked: when the goroutine ends, the Go runtime ends the thread
// with its changed credentials, so they can never leak to other goroutines.
func (r *Root) as(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer func() {
			if rec := recover(); rec != nil {
				done <- fmt.Errorf("file operation: internal error: %v", rec)
			}
		}()
		if err := r.become(false); err != nil {
			done <- err
			return
		}
		done <- fn()
	}()
	return <-done
}

// Capabilities the instance's root keeps over files (bits of
// CapUserData.Effective).
const rootCaps = 1<<unix.CAP_CHOWN | 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_FOWNER | 1<<unix.CAP_FSETID | 1<<unix.CAP_SETFCAP

// become gives the calling (locked) thread the root's identity. With
// keepInheritable the inheritable (and so the ambient) capabilities stay,
// so that an actor's thread can be given its credentials back whole.
func (r *Root) become(keepInheritable bool) error {
	fsuid, fsgid := r.uid, r.gid
	var keep uint32
	if r.id.UID == 0 {
		// The instance's root: host root with a container root's file
		// capabilities; ownership of new entries is fixed by own.
		fsuid, fsgid, keep = 0, 0, rootCaps
	}
	if unix.Geteuid() == 0 {
		// Raw: unix.Setgroups changes every thread of the process.
		groups := r.groups
		if r.id.UID == 0 {
			groups = nil
		}
		var p unsafe.Pointer
		if len(groups) > 0 {
			p = unsafe.Pointer(&groups[0])
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); e != 0 {
			return fmt.Errorf("act as uid %d: setgroups: %w", r.id.UID, e)
		}
	}
	unix.Setfsgid(int(fsgid))
	if g, _ := unix.SetfsgidRetGid(-1); g != int(fsgid) {
		return fmt.Errorf("act as gid %d: this process cannot take host gid %d: %w", r.id.GID, fsgid, errdefs.ErrPermissionDenied)
	}
	unix.Setfsuid(int(fsuid))
	if u, _ := unix.SetfsuidRetUid(-1); u != int(fsuid) {
		return fmt.Errorf("act as uid %d: this process cannot take host uid %d: %w", r.id.UID, fsuid, errdefs.ErrPermissionDenied)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Effective &= keep
	data[1].Effective = 0
	if !keepInheritable {
		data[0].Inheritable, data[1].Inheritable = 0, 0
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	return nil
}

// own gives the entry name of dirfd to the identity when the thread did
// not create it as such (the instance's root in a user namespace).
func (r *Root) own(dirfd int, name string) error {
	if r.id.UID != 0 || (r.uid == 0 && r.gid == 0) {
		return nil
	}
	if err := unix.Fchownat(dirfd, name, int(r.uid), int(r.gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown %s: %w", name, err)
	}
	return nil
}

// pathError turns an errno of an operation on p into an error of a kind.
func pathError(p string, err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return err
	}
	switch errno {
	case unix.ENOENT:
		return fmt.Errorf("path %q: %w", p, errdefs.ErrNotFound)
	case unix.EACCES, unix.EPERM:
		return fmt.Errorf("path %q: %v: %w", p, errno, errdefs.ErrPermissionDenied)
	case unix.ENOTDIR:
		return fmt.Errorf("path %q: a parent is not a directory: %w", p, errdefs.ErrFailedPrecondition)
	case unix.EISDIR:
		return fmt.Errorf("path %q is a directory: %w", p, errdefs.ErrFailedPrecondition)
	case unix.EEXIST:
		return fmt.Errorf("path %q: %w", p, errdefs.ErrAlreadyExists)
	case unix.ENOTEMPTY:
		return fmt.Errorf("directory %q is not empty: %w", p, errdefs.ErrFailedPrecondition)
	case unix.ELOOP:
		return fmt.Errorf("path %q: too many symlinks, or a /proc magic link: %w", p, errdefs.ErrInvalidArgument)
	case unix.EXDEV:
		return fmt.Errorf("path %q: leads out of the instance's root: %w", p, errdefs.ErrInvalidArgument)
	case unix.ENAMETOOLONG:
		return fmt.Errorf("path %q: name too long: %w", p, errdefs.ErrInvalidArgument)
	case unix.EROFS:
		return fmt.Errorf("path %q: on a read-only filesystem: %w", p, errdefs.ErrFailedPrecondition)
	case unix.EBUSY:
		return fmt.Errorf("path %q: busy (a mount point?): %w", p, errdefs.ErrFailedPrecondition)
	case unix.EINVAL:
		return fmt.Errorf("path %q: %v: %w", p, errno, errdefs.ErrInvalidArgument)
	case unix.ENOSPC, unix.EDQUOT:
		return fmt.Errorf("path %q: %v: %w", p, errno, errdefs.ErrQuotaExceeded)
	}
	return fmt.Errorf("path %q: %w", p, err)
}

// parentError is pathError for the parent dir of p.
func parentError(dir, p string, err error) error {
	if errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("parent directory %q of %q: %w", abs(dir), p, errdefs.ErrNotFound)
	}
	if errors.Is(err, unix.ENOTDIR) {
		return fmt.Errorf("parent %q of %q: not a directory: %w", abs(dir), p, errdefs.ErrFailedPrecondition)
	}
	return pathError(abs(dir), err)
}

// osFile wraps an fd.
func osFile(fd int, name string) *os.File { return os.NewFile(uintptr(fd), name) }
