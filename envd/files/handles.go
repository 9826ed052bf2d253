package files

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// The operations of an open-handle protocol (SFTP): files opened for
// writing in place, attributes, links, and directories read in chunks.
// Each is checked as the others are (confinement, pseudo filesystems,
// device nodes and FIFOs refused, the identity's permissions); a file's
// content is then read or written through its descriptor on any
// goroutine, without a thread of the identity.

// OpenFlags say how OpenWrite opens a file.
type OpenFlags struct {
	Read   bool   // for reading too
	Create bool   // make the file when it is missing, with Mode (less the process's umask)
	Excl   bool   // with Create: an existing file is errdefs.ErrAlreadyExists
	Trunc  bool   // empty an existing file
	Mode   uint32 // permission bits of a file it makes
}

// OpenWrite opens the regular file at p for writing in place as the
// identity (a final symlink followed as WriteFile follows it). Unlike
// WriteFile, writes land in the file as they are made. The file is the
// caller's to close.
func (r *Root) OpenWrite(ctx context.Context, p string, fl OpenFlags) (*os.File, error) {
	rel, err := Clean(p)
	if err != nil {
		return nil, err
	}
	if err := r.writable(abs(rel)); err != nil {
		return nil, err
	}
	if rel, err = r.followLinks(rel); err != nil {
		return nil, err
	}
	dir, base, err := split(rel)
	if err != nil {
		return nil, err
	}
	acc := unix.O_WRONLY
	if fl.Read {
		acc = unix.O_RDWR
	}
	var f *os.File
	err = r.as(func() error {
		pfd, err := r.parent(dir, abs(rel))
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		for range 8 {
			// An existing entry is looked at (O_PATH opens nothing) before
			// it is opened for writing: no FIFO, device or pseudo file is.
			fd, err := unix.Openat(pfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err == nil {
				f, err = r.reopenRegular(fd, abs(rel), acc, fl)
				unix.Close(fd)
				return err
			}
			if !errors.Is(err, unix.ENOENT) || !fl.Create {
				return pathError(abs(rel), err)
			}
			nfd, err := unix.Openat(pfd, base, acc|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, fl.Mode&0o7777)
			if errors.Is(err, unix.EEXIST) {
				continue // made meanwhile: open it as an existing one
			}
			if err != nil {
				return pathError(abs(rel), err)
			}
			f = osFile(nfd, abs(rel))
			if err := r.own(pfd, base); err != nil {
				f.Close()
				f = nil
				return err
			}
			return nil
		}
		return fmt.Errorf("path %q: keeps changing: %w", abs(rel), errdefs.ErrConflict)
	})
	return f, err
}

// reopenRegular opens the regular file an O_PATH fd holds with acc and
// fl's truncation; anything else is refused.
func (r *Root) reopenRegular(fd int, p string, acc int, fl OpenFlags) (*os.File, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, pathError(p, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil, fmt.Errorf("path %q: became a symlink while it was opened: %w", p, errdefs.ErrConflict)
	}
	if err := checkType(&st, p); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return nil, fmt.Errorf("path %q is a directory, not a file: %w", p, errdefs.ErrFailedPrecondition)
	}
	if err := checkFS(fd, p); err != nil {
		return nil, err
	}
	if fl.Create && fl.Excl {
		return nil, fmt.Errorf("path %q: %w", p, errdefs.ErrAlreadyExists)
	}
	flags := acc
	if fl.Trunc {
		flags |= unix.O_TRUNC
	}
	rfd, err := reopen(fd, flags)
	if err != nil {
		return nil, pathError(p, err)
	}
	return osFile(rfd, p), nil
}

// Attrs are the attributes SetAttrs changes; nil fields are kept.
type Attrs struct {
	Size         *int64
	Mode         *uint32 // permission bits, setuid, setgid and sticky
	Atime, Mtime *time.Time
}

// SetAttrs changes the size, mode and times of the entry at p (a final
// symlink followed). Owners are not changed here: a user's files are the
// user's.
func (r *Root) SetAttrs(ctx context.Context, p string, a Attrs) error {
	rel, err := Clean(p)
	if err != nil {
		return err
	}
	if err := r.writable(abs(rel)); err != nil {
		return err
	}
	return r.as(func() error {
		fd, st, err := r.openTyped(rel)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := checkFS(fd, abs(rel)); err != nil {
			return err
		}
		if a.Size != nil {
			if st.Mode&unix.S_IFMT != unix.S_IFREG {
				return fmt.Errorf("path %q is not a file: only a file has a size to set: %w", abs(rel), errdefs.ErrFailedPrecondition)
			}
			wfd, err := reopen(fd, unix.O_WRONLY)
			if err != nil {
				return pathError(abs(rel), err)
			}
			err = unix.Ftruncate(wfd, *a.Size)
			unix.Close(wfd)
			if err != nil {
				return pathError(abs(rel), err)
			}
		}
		if a.Mode != nil {
			if err := unix.Fchmodat(unix.AT_FDCWD, procPath(fd), *a.Mode&0o7777, 0); err != nil {
				return pathError(abs(rel), err)
			}
		}
		if a.Atime != nil || a.Mtime != nil {
			ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
			if a.Atime != nil {
				ts[0] = unix.NsecToTimespec(a.Atime.UnixNano())
			}
			if a.Mtime != nil {
				ts[1] = unix.NsecToTimespec(a.Mtime.UnixNano())
			}
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, procPath(fd), ts, 0); err != nil {
				return pathError(abs(rel), err)
			}
		}
		return nil
	})
}

// Lstat describes the entry at p without following a final symlink.
func (r *Root) Lstat(ctx context.Context, p string) (types.FileInfo, error) {
	return r.lstat(p)
}

// Readlink returns the text of the symlink at p.
func (r *Root) Readlink(ctx context.Context, p string) (string, error) {
	rel, err := Clean(p)
	if err != nil {
		return "", err
	}
	dir, base, err := split(rel)
	if err != nil {
		return "", err
	}
	var target string
	err = r.as(func() error {
		pfd, err := r.parent(dir, abs(rel))
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		if target, err = readlinkAt(pfd, base); err != nil {
			if errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("path %q is not a symlink: %w", abs(rel), errdefs.ErrInvalidArgument)
			}
			return pathError(abs(rel), err)
		}
		return nil
	})
	return target, err
}

// Symlink makes a symlink at link whose text is target (resolved inside
// the root when followed, never outside). It belongs to the identity.
func (r *Root) Symlink(ctx context.Context, target, link string) error {
	rel, err := Clean(link)
	if err != nil {
		return err
	}
	if err := r.writable(abs(rel)); err != nil {
		return err
	}
	dir, base, err := split(rel)
	if err != nil {
		return err
	}
	if target == "" || len(target) >= unix.PathMax {
		return fmt.Errorf("symlink %q: a target of 1 to %d bytes is expected: %w", abs(rel), unix.PathMax-1, errdefs.ErrInvalidArgument)
	}
	return r.as(func() error {
		pfd, err := r.parent(dir, abs(rel))
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		if err := unix.Symlinkat(target, pfd, base); err != nil {
			return pathError(abs(rel), err)
		}
		return r.own(pfd, base)
	})
}

// Link makes a hard link at to of the file or symlink at from (not
// followed). Directories, devices, FIFOs and sockets are refused.
func (r *Root) Link(ctx context.Context, from, to string) error {
	frel, trel, err := r.fromTo(from, to)
	if err != nil {
		return err
	}
	fdir, fbase, err := split(frel)
	if err != nil {
		return err
	}
	tdir, tbase, err := split(trel)
	if err != nil {
		return err
	}
	return r.as(func() error {
		pf, err := r.parent(fdir, abs(frel))
		if err != nil {
			return err
		}
		defer unix.Close(pf)
		var st unix.Stat_t
		if err := unix.Fstatat(pf, fbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return pathError(abs(frel), err)
		}
		if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFLNK {
			return fmt.Errorf("path %q is a %s: only files and symlinks are linked: %w", abs(frel), typeName(st.Mode), errdefs.ErrInvalidArgument)
		}
		pt, err := r.parent(tdir, abs(trel))
		if err != nil {
			return err
		}
		defer unix.Close(pt)
		if err := unix.Linkat(pf, fbase, pt, tbase, 0); err != nil {
			return pathError(abs(trel), err)
		}
		return nil
	})
}

// Dir is a directory open for reading its entries in chunks, in the order
// the filesystem gives them (an SFTP listing). Not safe for concurrent
// use.
type Dir struct {
	r *Root
	f *os.File
	p string
}

// OpenDir opens the directory at p (a final symlink followed).
func (r *Root) OpenDir(ctx context.Context, p string) (*Dir, error) {
	rel, err := Clean(p)
	if err != nil {
		return nil, err
	}
	var d *Dir
	err = r.as(func() error {
		fd, err := r.resolve(rel, unix.O_RDONLY|unix.O_DIRECTORY, true)
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) {
				return fmt.Errorf("path %q is not a directory: %w", abs(rel), errdefs.ErrFailedPrecondition)
			}
			return pathError(abs(rel), err)
		}
		if err := checkFS(fd, abs(rel)); err != nil {
			unix.Close(fd)
			return err
		}
		d = &Dir{r: r, f: osFile(fd, abs(rel)), p: abs(rel)}
		return nil
	})
	return d, err
}

// Next returns up to n more entries (1 to MaxPageEntries), described as
// List describes them, and io.EOF after the last.
func (d *Dir) Next(ctx context.Context, n int) ([]types.FileInfo, error) {
	n = min(max(n, 1), MaxPageEntries)
	var out []types.FileInfo
	err := d.r.as(func() error {
		names, err := d.f.Readdirnames(n)
		if err != nil {
			if err == io.EOF {
				return io.EOF
			}
			return pathError(d.p, err)
		}
		out = d.r.describe(int(d.f.Fd()), d.p, names)
		return nil
	})
	return out, err
}

// Close closes the directory.
func (d *Dir) Close() error { return d.f.Close() }

// describe lstats names of the directory dirfd (path p), on a thread of
// the identity; names gone since they were read are left out.
func (r *Root) describe(dirfd int, p string, names []string) []types.FileInfo {
	out := make([]types.FileInfo, 0, len(names))
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		target := ""
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			target, _ = readlinkAt(dirfd, name)
		}
		out = append(out, r.info(path.Join(p, name), &st, target))
	}
	return out
}
