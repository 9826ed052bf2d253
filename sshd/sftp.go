package sshd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
	"golang.org/x/sys/unix"
)

// SFTP is served by envd, not by an sftp-server inside the instance: most
// images have none (busybox, distroless, slim bases), and one code path
// that works on every image beats two. It is confined and acts as the
// instance's user:
//
//   - Every path is resolved with openat2(RESOLVE_IN_ROOT |
//     RESOLVE_NO_MAGICLINKS) below a descriptor of /proc/<pid>/root, the
//     instance's root as its init process sees it (volumes included):
//     "..", absolute symlinks and /proc magic links cannot leave it.
//     Operations on a final component that must not follow it (lstat,
//     unlink, rename, mkdir, symlink, readlink) take the parent's
//     descriptor and the base name; those that follow it (stat, chmod,
//     utimes, truncate) act on a descriptor opened inside the root.
//   - Every file system call runs on one OS thread, locked for the
//     session, whose fsuid, fsgid and supplementary groups are those of
//     the instance's init process (host ids, so user namespaces map
//     right): the kernel checks permissions as for that user (a non-zero
//     fsuid drops the capabilities that bypass them) and new files belong
//     to it. The thread is never given back to Go: it ends with the
//     session.

// sftp serves the "sftp" subsystem on ch until the client ends it.
func (c *conn) sftp(ctx context.Context, ch ssh.Channel) {
	defer ch.Close()
	fail := func(err error) {
		fmt.Fprintf(ch.Stderr(), "envd: sftp: %v\n", err)
		_, _ = ch.SendRequest("exit-status", false, []byte{0, 0, 0, 1})
	}
	if err := c.wake(ctx); err != nil {
		fail(err)
		return
	}
	pid, err := c.s.core.InstancePID(ctx, c.p, c.instance)
	if err != nil {
		fail(err)
		return
	}
	fs, err := openRootFS(pid)
	if err != nil {
		fail(err)
		return
	}
	defer fs.close()
	home := fs.home()
	srv := sftp.NewRequestServer(struct {
		io.Reader
		io.WriteCloser
	}{touchReader{ch, c}, ch}, sftp.Handlers{FileGet: fs, FilePut: fs, FileCmd: fs, FileList: fs}, sftp.WithStartDirectory(home))
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	if err := srv.Serve(); err != nil && !errors.Is(err, io.EOF) {
		c.s.o.log.Debug("sftp session", "instance", c.instance, "err", err)
	}
	_, _ = ch.SendRequest("exit-status", false, []byte{0, 0, 0, 0})
}

// rootFS is an instance's root filesystem as one user sees it.
type rootFS struct {
	root int // O_PATH descriptor of /proc/<pid>/root
	uid  int
	ops  chan func()
	quit chan struct{}
}

// openRootFS opens pid's root and starts the thread that acts as pid's
// user.
func openRootFS(pid int) (*rootFS, error) {
	root, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the instance's root: %w", err)
	}
	uid, gid, groups, err := procCreds(pid)
	if err != nil {
		_ = unix.Close(root)
		return nil, err
	}
	fs := &rootFS{root: root, uid: uid, ops: make(chan func()), quit: make(chan struct{})}
	started := make(chan error, 1)
	go fs.loop(uid, gid, groups, started)
	if err := <-started; err != nil {
		_ = unix.Close(root)
		return nil, err
	}
	return fs, nil
}

// loop runs the file system calls on a thread with the user's fs
// credentials. It never unlocks the thread, so the thread exits with it.
func (fs *rootFS) loop(uid, gid int, groups []int, started chan<- error) {
	runtime.LockOSThread()
	gs := make([]uint32, len(groups))
	for i, g := range groups {
		gs[i] = uint32(g)
	}
	var gp unsafe.Pointer
	if len(gs) > 0 {
		gp = unsafe.Pointer(&gs[0])
	}
	// Raw calls: the unix and syscall wrappers of setgroups change every
	// thread of the process.
	_, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gs)), uintptr(gp), 0)
	runtime.KeepAlive(gs)
	if e != 0 {
		started <- fmt.Errorf("setgroups: %w", e)
		return
	}
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
	started <- nil
	for {
		select {
		case f := <-fs.ops:
			f()
		case <-fs.quit:
			return
		}
	}
}

func (fs *rootFS) close() {
	close(fs.quit)
	_ = unix.Close(fs.root)
}

// do runs f on the user's thread.
func (fs *rootFS) do(f func() error) error {
	errc := make(chan error, 1)
	select {
	case fs.ops <- func() { errc <- f() }:
	case <-fs.quit:
		return os.ErrClosed
	}
	return <-errc
}

// procCreds reads the real uid, gid and groups of pid.
func procCreds(pid int) (uid, gid int, groups []int, err error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, nil, err
	}
	defer f.Close()
	uid, gid = -1, -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		switch {
		case k == "Uid" && len(fields) > 0:
			uid, err = strconv.Atoi(fields[0])
		case k == "Gid" && len(fields) > 0:
			gid, err = strconv.Atoi(fields[0])
		case k == "Groups":
			for _, g := range fields {
				n, gerr := strconv.Atoi(g)
				if gerr != nil {
					return 0, 0, nil, gerr
				}
				groups = append(groups, n)
			}
		}
		if err != nil {
			return 0, 0, nil, err
		}
	}
	if uid < 0 || gid < 0 {
		return 0, 0, nil, fmt.Errorf("credentials of process %d: not found", pid)
	}
	return uid, gid, groups, sc.Err()
}

const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// openat opens p (an absolute path in the instance) below the root,
// following symlinks inside it. Called on the user's thread.
func (fs *rootFS) openat(p string, flags int, mode uint32) (int, error) {
	rel := strings.TrimPrefix(path.Clean("/"+p), "/")
	if rel == "" {
		rel = "."
	}
	for {
		fd, err := unix.Openat2(fs.root, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolveFlags})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: p, Err: err}
		}
		return fd, nil
	}
}

// parent opens p's parent directory and returns it with p's base name;
// the root itself has none (errInvalidRoot).
func (fs *rootFS) parent(p string) (int, string, error) {
	p = path.Clean("/" + p)
	if p == "/" {
		return -1, "", &os.PathError{Op: "open", Path: p, Err: unix.EINVAL}
	}
	dir, base := path.Split(p)
	fd, err := fs.openat(dir, unix.O_PATH|unix.O_DIRECTORY, 0)
	return fd, base, err
}

// fileInfo is an os.FileInfo from a stat of the instance's file; Sys
// gives pkg/sftp the owner and times.
type fileInfo struct {
	name string
	st   syscall.Stat_t
}

func (fi *fileInfo) Name() string { return fi.name }
func (fi *fileInfo) Size() int64  { return fi.st.Size }
func (fi *fileInfo) Mode() os.FileMode {
	m := os.FileMode(fi.st.Mode & 0o777)
	switch fi.st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		m |= os.ModeDir
	case syscall.S_IFLNK:
		m |= os.ModeSymlink
	case syscall.S_IFIFO:
		m |= os.ModeNamedPipe
	case syscall.S_IFSOCK:
		m |= os.ModeSocket
	case syscall.S_IFCHR:
		m |= os.ModeDevice | os.ModeCharDevice
	case syscall.S_IFBLK:
		m |= os.ModeDevice
	}
	if fi.st.Mode&syscall.S_ISUID != 0 {
		m |= os.ModeSetuid
	}
	if fi.st.Mode&syscall.S_ISGID != 0 {
		m |= os.ModeSetgid
	}
	if fi.st.Mode&syscall.S_ISVTX != 0 {
		m |= os.ModeSticky
	}
	return m
}
func (fi *fileInfo) ModTime() time.Time { return time.Unix(fi.st.Mtim.Unix()) }
func (fi *fileInfo) IsDir() bool        { return fi.st.Mode&syscall.S_IFMT == syscall.S_IFDIR }
func (fi *fileInfo) Sys() any           { return &fi.st }

func fstatat(dirfd int, name string, flags int) (*fileInfo, error) {
	fi := &fileInfo{name: name}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, flags); err != nil {
		return nil, err
	}
	fi.st = syscall.Stat_t{Dev: st.Dev, Ino: st.Ino, Nlink: st.Nlink, Mode: st.Mode, Uid: st.Uid, Gid: st.Gid,
		Rdev: st.Rdev, Size: st.Size, Blksize: st.Blksize, Blocks: st.Blocks,
		Atim: syscall.Timespec(st.Atim), Mtim: syscall.Timespec(st.Mtim), Ctim: syscall.Timespec(st.Ctim)}
	return fi, nil
}

// stat follows p's final symlink (inside the root), lstat does not.
func (fs *rootFS) stat(p string, follow bool) (*fileInfo, error) {
	var fi *fileInfo
	err := fs.do(func() error {
		if follow || path.Clean("/"+p) == "/" {
			fd, err := fs.openat(p, unix.O_PATH, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			fi, err = fstatat(fd, "", unix.AT_EMPTY_PATH)
			return err
		}
		dir, base, err := fs.parent(p)
		if err != nil {
			return err
		}
		defer unix.Close(dir)
		fi, err = fstatat(dir, base, unix.AT_SYMLINK_NOFOLLOW)
		if err != nil {
			return &os.PathError{Op: "lstat", Path: p, Err: err}
		}
		return nil
	})
	if fi != nil {
		fi.name = path.Base(path.Clean("/" + p))
	}
	return fi, err
}

// home is the working directory sftp starts in: the user's home from the
// instance's /etc/passwd, else /.
func (fs *rootFS) home() string {
	home := "/"
	_ = fs.do(func() error {
		fd, err := fs.openat("/etc/passwd", unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), "passwd")
		defer f.Close()
		sc := bufio.NewScanner(io.LimitReader(f, 4<<20))
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) >= 6 && fields[2] == strconv.Itoa(fs.uid) && path.IsAbs(fields[5]) {
				home = fields[5]
				break
			}
		}
		return nil
	})
	if fi, err := fs.stat(home, true); err != nil || !fi.IsDir() {
		return "/"
	}
	return home
}

// Fileread opens a regular file for reading.
func (fs *rootFS) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	return fs.open(r.Filepath, unix.O_RDONLY)
}

// Filewrite opens a file for writing with the client's flags.
func (fs *rootFS) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	return fs.openMode(r.Filepath, writeFlags(r), createMode(r))
}

// OpenFile opens a file for reading and writing.
func (fs *rootFS) OpenFile(r *sftp.Request) (sftp.WriterAtReaderAt, error) {
	return fs.openMode(r.Filepath, writeFlags(r)&^unix.O_WRONLY|unix.O_RDWR, createMode(r))
}

// createMode is the mode of a file the open creates: the client's, if it
// sent one, else 0644 (the process umask applies).
func createMode(r *sftp.Request) uint32 {
	if r.AttrFlags().Permissions {
		return uint32(r.Attributes().FileMode().Perm())
	}
	return 0o644
}

func writeFlags(r *sftp.Request) int {
	pf := r.Pflags()
	flags := unix.O_WRONLY
	if pf.Creat {
		flags |= unix.O_CREAT
	}
	if pf.Trunc {
		flags |= unix.O_TRUNC
	}
	if pf.Excl {
		flags |= unix.O_EXCL
	}
	// O_APPEND is left out: writes carry their offsets (pwrite ignores
	// them under O_APPEND on Linux, and clients send the file's end).
	return flags
}

// open opens a regular file only: a FIFO would block the session and a
// device is not a file to transfer.
func (fs *rootFS) open(p string, flags int) (*os.File, error) {
	return fs.openMode(p, flags, 0)
}

func (fs *rootFS) openMode(p string, flags int, mode uint32) (*os.File, error) {
	var f *os.File
	err := fs.do(func() error {
		fd, err := fs.openat(p, flags|unix.O_NONBLOCK, mode)
		if err != nil {
			return err
		}
		fi, err := fstatat(fd, "", unix.AT_EMPTY_PATH)
		if err == nil && fi.st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			err = &os.PathError{Op: "open", Path: p, Err: errors.New("not a regular file")}
		}
		if err != nil {
			_ = unix.Close(fd)
			return err
		}
		f = os.NewFile(uintptr(fd), p)
		return nil
	})
	return f, err
}

// Filecmd runs the commands that change the tree.
func (fs *rootFS) Filecmd(r *sftp.Request) error {
	switch r.Method {
	case "Setstat":
		return fs.setstat(r)
	case "Rename", "PosixRename":
		return fs.twoPaths(r.Filepath, r.Target, func(od int, ob string, nd int, nb string) error {
			if r.Method == "Rename" {
				// SFTP's rename does not replace (draft-02); OpenSSH's
				// posix-rename@openssh.com does.
				return unix.Renameat2(od, ob, nd, nb, unix.RENAME_NOREPLACE)
			}
			return unix.Renameat(od, ob, nd, nb)
		})
	case "Link":
		// r.Filepath is the existing file, r.Target the new name.
		return fs.twoPaths(r.Filepath, r.Target, func(od int, ob string, nd int, nb string) error {
			return unix.Linkat(od, ob, nd, nb, 0)
		})
	case "Symlink":
		// pkg/sftp gives the link's text in r.Filepath (as sent) and the new
		// link in r.Target; the text is resolved inside the root when
		// followed.
		return fs.onParent(r.Target, func(dir int, base string) error { return unix.Symlinkat(r.Filepath, dir, base) })
	case "Mkdir":
		return fs.onParent(r.Filepath, func(dir int, base string) error { return unix.Mkdirat(dir, base, 0o755) })
	case "Rmdir":
		return fs.onParent(r.Filepath, func(dir int, base string) error { return unix.Unlinkat(dir, base, unix.AT_REMOVEDIR) })
	case "Remove":
		return fs.onParent(r.Filepath, func(dir int, base string) error { return unix.Unlinkat(dir, base, 0) })
	}
	return sftp.ErrSSHFxOpUnsupported
}

func (fs *rootFS) PosixRename(r *sftp.Request) error { return fs.Filecmd(r) }

func (fs *rootFS) onParent(p string, f func(dir int, base string) error) error {
	return fs.do(func() error {
		dir, base, err := fs.parent(p)
		if err != nil {
			return err
		}
		defer unix.Close(dir)
		if err := f(dir, base); err != nil {
			return &os.PathError{Op: "sftp", Path: p, Err: err}
		}
		return nil
	})
}

func (fs *rootFS) twoPaths(from, to string, f func(od int, ob string, nd int, nb string) error) error {
	return fs.do(func() error {
		od, ob, err := fs.parent(from)
		if err != nil {
			return err
		}
		defer unix.Close(od)
		nd, nb, err := fs.parent(to)
		if err != nil {
			return err
		}
		defer unix.Close(nd)
		if err := f(od, ob, nd, nb); err != nil {
			return &os.PathError{Op: "sftp", Path: from, Err: err}
		}
		return nil
	})
}

// setstat changes mode, times and size of the file p names, following
// a final symlink inside the root. Owners are not changed: the user's
// files are the user's.
func (fs *rootFS) setstat(r *sftp.Request) error {
	af, attrs := r.AttrFlags(), r.Attributes()
	return fs.do(func() error {
		flags := unix.O_PATH
		if af.Size {
			flags = unix.O_WRONLY | unix.O_NONBLOCK
		}
		fd, err := fs.openat(r.Filepath, flags, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		proc := "/proc/self/fd/" + strconv.Itoa(fd)
		if af.Size {
			if err := unix.Ftruncate(fd, int64(attrs.Size)); err != nil {
				return &os.PathError{Op: "truncate", Path: r.Filepath, Err: err}
			}
		}
		if af.Permissions {
			if err := unix.Fchmodat(unix.AT_FDCWD, proc, attrs.Mode&0o7777, 0); err != nil {
				return &os.PathError{Op: "chmod", Path: r.Filepath, Err: err}
			}
		}
		if af.Acmodtime {
			ts := []unix.Timespec{unix.NsecToTimespec(int64(attrs.Atime) * 1e9), unix.NsecToTimespec(int64(attrs.Mtime) * 1e9)}
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, proc, ts, 0); err != nil {
				return &os.PathError{Op: "utimes", Path: r.Filepath, Err: err}
			}
		}
		return nil
	})
}

// listerAt answers a listing from a slice.
type listerAt []os.FileInfo

func (l listerAt) ListAt(out []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(out, l[off:])
	if n < len(out) {
		return n, io.EOF
	}
	return n, nil
}

// Filelist serves List, Stat and Readlink.
func (fs *rootFS) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	switch r.Method {
	case "List":
		return fs.list(r.Filepath)
	case "Stat":
		fi, err := fs.stat(r.Filepath, true)
		if err != nil {
			return nil, err
		}
		return listerAt{fi}, nil
	case "Readlink":
		target, err := fs.Readlink(r.Filepath)
		if err != nil {
			return nil, err
		}
		return listerAt{&fileInfo{name: target}}, nil
	}
	return nil, sftp.ErrSSHFxOpUnsupported
}

// Lstat serves Lstat without following a final symlink.
func (fs *rootFS) Lstat(r *sftp.Request) (sftp.ListerAt, error) {
	fi, err := fs.stat(r.Filepath, false)
	if err != nil {
		return nil, err
	}
	return listerAt{fi}, nil
}

// Readlink returns a symlink's text.
func (fs *rootFS) Readlink(p string) (string, error) {
	var target string
	err := fs.onParent(p, func(dir int, base string) error {
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dir, base, buf)
		target = string(buf[:n])
		return err
	})
	return target, err
}

// maxList bounds one directory listing.
const maxList = 1 << 20

func (fs *rootFS) list(p string) (sftp.ListerAt, error) {
	var out listerAt
	err := fs.do(func() error {
		fd, err := fs.openat(p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		dir := os.NewFile(uintptr(fd), p)
		defer dir.Close()
		names, err := dir.Readdirnames(maxList)
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		for _, name := range names {
			// Relative to the directory's descriptor: never a host path.
			fi, err := fstatat(fd, name, unix.AT_SYMLINK_NOFOLLOW)
			if err != nil {
				continue // removed meanwhile
			}
			out = append(out, fi)
		}
		return nil
	})
	return out, err
}
