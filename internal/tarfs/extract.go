package tarfs

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// ExtractOptions configure Extract. The zero value restores every entry
// but device nodes, owners as the archive has them.
type ExtractOptions struct {
	// Skip, if set, leaves out each entry whose name (as Clean gives it)
	// it returns true for.
	Skip func(name string) bool
	// MapOwner, if set, maps an entry's owner before it is applied (the
	// ownership mapping of a restore). Default: the archive's ids.
	MapOwner func(uid, gid int) (int, int, error)
	// Devices creates character and block devices. Default: they are
	// dropped (a device node restored onto a node is a way to a host
	// device).
	Devices bool
	// What names the directory in errors; default "the root".
	What string
}

// Extract writes the uncompressed tar stream r into the existing directory
// dir, confined to it: names pass Clean and must be relative; each entry's
// parent is opened beneath dir (openat2 RESOLVE_BENEATH), so a symlink made
// by an earlier entry may lead within dir but never out of it; the entry
// itself is made with *at calls on that parent and no symlink is followed.
// A name, hard link target or path that would leave dir gives
// errdefs.ErrInvalidArgument. An entry replaces what its name holds (the
// later of two entries for one path wins). Owners, then modes (setuid,
// setgid, sticky), then xattrs (in that order: chown clears set-id bits
// and file capabilities), then mtimes are applied; directories' mtimes
// last. It returns the number of entries written, the root's excluded.
func Extract(ctx context.Context, dir string, r io.Reader, opts ExtractOptions) (int, error) {
	if opts.What == "" {
		opts.What = "the root"
	}
	root, err := OpenDir(dir)
	if err != nil {
		return 0, err
	}
	defer root.Close()
	x := &extractor{ctx: ctx, opts: opts, root: root}
	type dirTime struct {
		name  string
		mtime unix.Timespec
	}
	var dirs []dirTime
	tr := tar.NewReader(r)
	n := 0
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return n, fmt.Errorf("read archive: %w", err)
		}
		name, err := Clean(hdr.Name)
		if err != nil || strings.HasPrefix(hdr.Name, "/") {
			return n, fmt.Errorf("archive entry %q escapes %s: %w", hdr.Name, opts.What, errdefs.ErrInvalidArgument)
		}
		if opts.Skip != nil && opts.Skip(name) {
			continue
		}
		if err := x.entry(name, hdr, tr); err != nil {
			if errors.Is(err, errdefs.ErrInvalidArgument) {
				return n, err
			}
			return n, fmt.Errorf("archive entry %q: %w", hdr.Name, err)
		}
		if name != "." && x.writes(hdr.Typeflag) {
			n++
		}
		if hdr.Typeflag == tar.TypeDir {
			dirs = append(dirs, dirTime{name, unix.NsecToTimespec(hdr.ModTime.UnixNano())})
		}
	}
	// Directory mtimes last: creating their children changed them.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := x.at(dirs[i].name, func(pfd int, base string) error {
			return unix.UtimesNanoAt(pfd, base, []unix.Timespec{dirs[i].mtime, dirs[i].mtime}, unix.AT_SYMLINK_NOFOLLOW)
		}); err != nil {
			return n, fmt.Errorf("archive entry %q: %w", dirs[i].name, err)
		}
	}
	return n, nil
}

type extractor struct {
	ctx  context.Context
	opts ExtractOptions
	root *Dir
}

// at calls fn with an fd of name's parent, opened beneath the root, and
// name's last element ("." for the root itself, with the root's fd).
func (x *extractor) at(name string, fn func(pfd int, base string) error) error {
	if name == "." {
		return fn(x.root.fd, ".")
	}
	dir, base := path.Split(name)
	if dir == "" {
		return fn(x.root.fd, base)
	}
	dir = strings.TrimSuffix(dir, "/")
	pfd, err := x.openBeneath(dir)
	if err != nil {
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ELOOP) {
			return fmt.Errorf("archive entry %q leads out of %s through a symlink: %w", name, x.opts.What, errdefs.ErrInvalidArgument)
		}
		return &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(pfd)
	return fn(pfd, base)
}

// openBeneath opens the directory dir (relative, clean) of the root as an
// O_PATH fd, resolving symlinks only within the root.
func (x *extractor) openBeneath(dir string) (int, error) {
	const flags = unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC
	if !noOpenat2.Load() {
		fd, err := unix.Openat2(x.root.fd, dir, &unix.OpenHow{Flags: flags,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_MAGICLINKS})
		if !errors.Is(err, unix.ENOSYS) {
			return fd, err
		}
		noOpenat2.Store(true)
	}
	// Without openat2: one element at a time, following no symlink at all
	// (one is ELOOP, refused as an escape even if it would stay inside).
	fd, err := unix.Dup(x.root.fd)
	if err != nil {
		return -1, err
	}
	for part := range strings.SplitSeq(dir, "/") {
		next, err := unix.Openat(fd, part, unix.O_PATH|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = next
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return -1, err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
		case unix.S_IFLNK:
			unix.Close(fd)
			return -1, unix.ELOOP
		default:
			unix.Close(fd)
			return -1, unix.ENOTDIR
		}
	}
	return fd, nil
}

// writes reports whether an entry of type typ is written.
func (x *extractor) writes(typ byte) bool {
	switch typ {
	case tar.TypeDir, tar.TypeReg, tar.TypeRegA, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
		return true
	case tar.TypeChar, tar.TypeBlock:
		return x.opts.Devices
	}
	return false
}

func (x *extractor) entry(name string, hdr *tar.Header, r io.Reader) error {
	uid, gid := hdr.Uid, hdr.Gid
	if x.opts.MapOwner != nil {
		var err error
		if uid, gid, err = x.opts.MapOwner(uid, gid); err != nil {
			return err
		}
	}
	mtime := unix.NsecToTimespec(hdr.ModTime.UnixNano())
	times := []unix.Timespec{mtime, mtime}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.at(name, func(pfd int, base string) error {
			if base != "." {
				var st unix.Stat_t
				if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
					if err := removeAt(pfd, base); err != nil {
						return err
					}
				}
				if err := unix.Mkdirat(pfd, base, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
					return fmt.Errorf("mkdir: %w", err)
				}
			}
			fd, err := openAt(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY)
			if err != nil {
				return fmt.Errorf("open: %w", err)
			}
			defer unix.Close(fd)
			return applyMeta(fd, hdr, uid, gid)
		})

	case tar.TypeReg, tar.TypeRegA:
		return x.at(name, func(pfd int, base string) error {
			if err := x.removeExisting(name, pfd, base); err != nil {
				return err
			}
			fd, err := openAt(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL)
			if err != nil {
				return fmt.Errorf("create: %w", err)
			}
			f := os.NewFile(uintptr(fd), name)
			defer f.Close()
			if _, err := io.Copy(f, ctxReader{x.ctx, r}); err != nil {
				return err
			}
			if err := applyMeta(fd, hdr, uid, gid); err != nil {
				return err
			}
			if err := unix.UtimesNanoAt(pfd, base, times, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("utimes: %w", err)
			}
			return f.Close()
		})

	case tar.TypeSymlink:
		return x.at(name, func(pfd int, base string) error {
			if err := x.removeExisting(name, pfd, base); err != nil {
				return err
			}
			if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
				return fmt.Errorf("symlink: %w", err)
			}
			return x.metaAt(pfd, base, hdr, uid, gid, times, false)
		})

	case tar.TypeLink:
		target, err := Clean(hdr.Linkname)
		if err != nil || target == "." || strings.HasPrefix(hdr.Linkname, "/") {
			return fmt.Errorf("archive entry %q links to %q, which escapes %s: %w", hdr.Name, hdr.Linkname, x.opts.What, errdefs.ErrInvalidArgument)
		}
		return x.at(name, func(pfd int, base string) error {
			if err := x.removeExisting(name, pfd, base); err != nil {
				return err
			}
			return x.at(target, func(tfd int, tbase string) error {
				if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
					return fmt.Errorf("link to %q: %w", target, err)
				}
				return nil
			})
		})

	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		mode := uint32(unix.S_IFIFO)
		switch hdr.Typeflag {
		case tar.TypeChar:
			mode = unix.S_IFCHR
		case tar.TypeBlock:
			mode = unix.S_IFBLK
		}
		if mode != unix.S_IFIFO && !x.opts.Devices {
			return nil
		}
		return x.at(name, func(pfd int, base string) error {
			if err := x.removeExisting(name, pfd, base); err != nil {
				return err
			}
			dev := int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
			if err := unix.Mknodat(pfd, base, mode|0o600, dev); err != nil {
				return fmt.Errorf("mknod: %w", err)
			}
			return x.metaAt(pfd, base, hdr, uid, gid, times, true)
		})
	}
	return nil // other types (GNU long names, globals) are consumed by tar.Reader
}

// applyMeta sets owner, then mode (chown clears set-id bits), then xattrs
// (chown also clears security.capability) on an open file.
func applyMeta(fd int, hdr *tar.Header, uid, gid int) error {
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode&0o7777)); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, PAXXattr); ok {
			if err := unix.Fsetxattr(fd, name, []byte(v), 0); err != nil {
				return fmt.Errorf("xattr %s: %w", name, err)
			}
		}
	}
	return nil
}

// metaAt applies owner, mode (if chmod: not for symlinks, which have none),
// xattrs and mtime to the entry base of pfd, which is not a directory or a
// regular file, without following it.
func (x *extractor) metaAt(pfd int, base string, hdr *tar.Header, uid, gid int, times []unix.Timespec, chmod bool) error {
	if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown: %w", err)
	}
	if chmod {
		// fchmodat follows a symlink, but base was made by this extract and
		// is none.
		if err := unix.Fchmodat(pfd, base, uint32(hdr.Mode&0o7777), 0); err != nil {
			return fmt.Errorf("chmod: %w", err)
		}
	}
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, PAXXattr); ok {
			p := "/proc/self/fd/" + strconv.Itoa(pfd) + "/" + base
			if err := unix.Lsetxattr(p, name, []byte(v), 0); err != nil {
				return fmt.Errorf("xattr %s: %w", name, err)
			}
		}
	}
	if err := unix.UtimesNanoAt(pfd, base, times, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("utimes: %w", err)
	}
	return nil
}

// removeExisting removes base of pfd if it exists (an archive listing a
// path twice: the later entry wins).
func (x *extractor) removeExisting(name string, pfd int, base string) error {
	if base == "." {
		return fmt.Errorf("archive entry for %s must be a directory: %w", x.opts.What, errdefs.ErrInvalidArgument)
	}
	err := removeAt(pfd, base)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove %q: %w", name, err)
	}
	return nil
}

// removeAt removes base of dirfd and, if it is a directory, everything in
// it, following no symlink.
func removeAt(dirfd int, base string) error {
	err := unix.Unlinkat(dirfd, base, 0)
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	fd, err := openAt(dirfd, base, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	d := newDir(fd, base)
	names, err := d.Names()
	if err == nil {
		for _, n := range names {
			if err = removeAt(fd, n); err != nil && !errors.Is(err, unix.ENOENT) {
				break
			}
			err = nil
		}
	}
	d.Close()
	if err != nil {
		return err
	}
	return unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR)
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
