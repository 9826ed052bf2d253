package files

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/tarfs"
)

// ParseMode parses an octal permission mode ("0644", "755"); "" gives ok
// false.
func ParseMode(s string) (mode uint32, ok bool, err error) {
	if s == "" {
		return 0, false, nil
	}
	m, err := strconv.ParseUint(s, 8, 32)
	if err != nil || m > 0o7777 {
		return 0, false, fmt.Errorf("mode %q: an octal mode of at most 07777 is expected: %w", s, errdefs.ErrInvalidArgument)
	}
	return uint32(m), true, nil
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return types.FileTypeDir
	case unix.S_IFLNK:
		return types.FileTypeSymlink
	case unix.S_IFIFO:
		return types.FileTypeFIFO
	case unix.S_IFSOCK:
		return types.FileTypeSocket
	case unix.S_IFCHR:
		return types.FileTypeChar
	case unix.S_IFBLK:
		return types.FileTypeBlock
	}
	return types.FileTypeFile
}

func (r *Root) info(p string, st *unix.Stat_t, target string) types.FileInfo {
	name := path.Base(p)
	if p == "/" {
		name = "/"
	}
	return types.FileInfo{
		Name: name, Path: p, Type: typeName(st.Mode), Size: st.Size,
		Mode:    fmt.Sprintf("%04o", st.Mode&0o7777),
		ModTime: time.Unix(st.Mtim.Unix()).UTC(),
		UID:     r.id.view(st.Uid), GID: r.id.view(st.Gid), LinkTarget: target,
	}
}

// Stat describes the entry at p, following a final symlink.
func (r *Root) Stat(ctx context.Context, p string) (types.FileInfo, error) {
	rel, err := Clean(p)
	if err != nil {
		return types.FileInfo{}, err
	}
	var fi types.FileInfo
	err = r.as(func() error {
		fd, err := r.resolve(rel, unix.O_PATH, true)
		if err != nil {
			return pathError(abs(rel), err)
		}
		defer unix.Close(fd)
		if err := checkFS(fd, abs(rel)); err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return pathError(abs(rel), err)
		}
		fi = r.info(abs(rel), &st, "")
		return nil
	})
	return fi, err
}

// Listing pages.
const (
	// MaxPageEntries is the most entries one page of a listing holds, and
	// its size when none is asked.
	MaxPageEntries = 1000
)

// ListOptions ask for one page of a listing.
type ListOptions struct {
	// Limit is the most entries returned, 1 to MaxPageEntries; 0 =
	// MaxPageEntries.
	Limit int
	// Token is the NextPageToken of the page before; "" = from the start.
	Token string
}

// List lists the directory at p, sorted by name, one page at a time
// (opts): a page is the first entries by name after the last one of the
// page before, so an entry added or removed between two calls never makes
// another one skipped or repeated; NextPageToken is set when there are
// more. Entries are described as they are (a symlink as a symlink, with
// its target). However large the directory, a page holds its entries'
// names and no more.
func (r *Root) List(ctx context.Context, p string, opts ListOptions) (types.FileList, error) {
	rel, err := Clean(p)
	if err != nil {
		return types.FileList{}, err
	}
	limit := opts.Limit
	if limit == 0 {
		limit = MaxPageEntries
	}
	if limit < 1 || limit > MaxPageEntries {
		return types.FileList{}, fmt.Errorf("limit %d: 1 to %d expected: %w", limit, MaxPageEntries, errdefs.ErrInvalidArgument)
	}
	after, err := decodeToken(opts.Token)
	if err != nil {
		return types.FileList{}, err
	}
	out := types.FileList{Path: abs(rel), Entries: []types.FileInfo{}, ReadOnly: r.readOnly}
	err = r.as(func() error {
		fd, err := r.resolve(rel, unix.O_RDONLY|unix.O_DIRECTORY, true)
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) {
				return fmt.Errorf("path %q is not a directory: %w", abs(rel), errdefs.ErrFailedPrecondition)
			}
			return pathError(abs(rel), err)
		}
		f := osFile(fd, abs(rel))
		defer f.Close()
		if err := checkFS(fd, abs(rel)); err != nil {
			return err
		}
		// The smallest limit+1 names after the token, kept as the
		// directory is read: never all of them at once.
		var names []string
		trim := func() {
			sort.Strings(names)
			if len(names) > limit+1 {
				names = names[:limit+1]
			}
		}
		for {
			if err := ctx.Err(); err != nil {
				return err
			}
			chunk, err := f.Readdirnames(4096)
			for _, n := range chunk {
				if opts.Token == "" || n > after {
					names = append(names, n)
				}
			}
			if len(names) > 4*(limit+1)+4096 {
				trim()
			}
			if err == io.EOF || (err == nil && len(chunk) == 0) {
				break
			}
			if err != nil {
				return pathError(abs(rel), err)
			}
		}
		trim()
		if len(names) > limit {
			names = names[:limit]
			out.NextPageToken = encodeToken(names[limit-1])
		}
		out.Entries = r.describe(fd, abs(rel), names)
		return nil
	})
	return out, err
}

// A page token is the last name of the page before, opaque to clients.
func encodeToken(name string) string {
	return "n1." + base64.RawURLEncoding.EncodeToString([]byte(name))
}

func decodeToken(tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(tok, "n1."))
	if err != nil || !strings.HasPrefix(tok, "n1.") || len(b) == 0 {
		return "", fmt.Errorf("page_token %q: not one this listing gave: %w", tok, errdefs.ErrInvalidArgument)
	}
	return string(b), nil
}

func readlinkAt(dirfd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// OpenFile opens the regular file at p (a final symlink followed) for
// reading as the identity. The file is the caller's to close.
func (r *Root) OpenFile(ctx context.Context, p string) (*os.File, types.FileInfo, error) {
	rel, err := Clean(p)
	if err != nil {
		return nil, types.FileInfo{}, err
	}
	var (
		f  *os.File
		fi types.FileInfo
	)
	err = r.as(func() error {
		fd, st, err := r.openTyped(rel)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			return fmt.Errorf("path %q is a directory, not a file: %w", abs(rel), errdefs.ErrFailedPrecondition)
		}
		if err := checkFS(fd, abs(rel)); err != nil {
			return err
		}
		rfd, err := reopen(fd, unix.O_RDONLY)
		if err != nil {
			return pathError(abs(rel), err)
		}
		f, fi = osFile(rfd, abs(rel)), r.info(abs(rel), &st, "")
		return nil
	})
	return f, fi, err
}

// WriteOptions configure WriteFile.
type WriteOptions struct {
	// Mode is the file's permission bits when SetMode; otherwise an
	// existing file's mode is kept and a new file gets 0644.
	Mode    uint32
	SetMode bool
	// Parents makes missing parent directories (0755, mkdir -p).
	Parents bool
	// MaxBytes is the most content accepted; more is errdefs.ErrTooLarge
	// and nothing changes. 0 = no limit.
	MaxBytes int64
}

// tempName is a fresh hidden name beside base.
func tempName(base string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := ".envd-" + hex.EncodeToString(b[:]) + "-" + base
	if len(name) > 255 {
		name = name[:255]
	}
	return name
}

// WriteFile replaces the file at p with content, atomically: a temp file in
// the same directory, synced, renamed over p, the directory synced. A
// reader sees the old content or the new, never a part. A symlink at p is
// written through (followLinks): its target is the file replaced; a
// directory is refused. The file belongs to the identity.
func (r *Root) WriteFile(ctx context.Context, p string, content io.Reader, opts WriteOptions) (types.FileInfo, error) {
	rel, err := Clean(p)
	if err != nil {
		return types.FileInfo{}, err
	}
	if err := r.writable(abs(rel)); err != nil {
		return types.FileInfo{}, err
	}
	if rel, err = r.followLinks(rel); err != nil {
		return types.FileInfo{}, err
	}
	dir, base, err := split(rel)
	if err != nil {
		return types.FileInfo{}, err
	}
	var (
		pfd  = -1
		f    *os.File
		tmp  = tempName(base)
		mode = opts.Mode
	)
	defer func() {
		if pfd >= 0 {
			unix.Close(pfd)
		}
	}()
	err = r.as(func() error {
		if opts.Parents {
			if err := r.mkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		var err error
		if pfd, err = r.parent(dir, abs(rel)); err != nil {
			return err
		}
		var st unix.Stat_t
		switch err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); {
		case err == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR:
			return fmt.Errorf("path %q is a directory, not a file: %w", abs(rel), errdefs.ErrFailedPrecondition)
		case err == nil && !opts.SetMode && st.Mode&unix.S_IFMT == unix.S_IFREG:
			mode = st.Mode & 0o7777
		case err == nil || errors.Is(err, unix.ENOENT):
			if !opts.SetMode {
				mode = 0o644
			}
		default:
			return pathError(abs(rel), err)
		}
		fd, err := unix.Openat(pfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
		if err != nil {
			return pathError(abs(rel), err)
		}
		f = osFile(fd, abs(rel))
		return r.own(pfd, tmp)
	})
	if err != nil {
		if f != nil {
			f.Close()
			_ = r.as(func() error { return unix.Unlinkat(pfd, tmp, 0) })
		}
		return types.FileInfo{}, err
	}
	done := false
	defer func() {
		f.Close()
		if !done {
			_ = r.as(func() error { return unix.Unlinkat(pfd, tmp, 0) })
		}
	}()
	src := content
	if opts.MaxBytes > 0 {
		src = io.LimitReader(content, opts.MaxBytes+1)
	}
	n, err := io.Copy(f, ctxReader{ctx, src})
	if err != nil {
		return types.FileInfo{}, pathError(abs(rel), fmt.Errorf("write: %w", err))
	}
	if opts.MaxBytes > 0 && n > opts.MaxBytes {
		return types.FileInfo{}, tooLarge(abs(rel), opts.MaxBytes)
	}
	if err := f.Chmod(os.FileMode(mode&0o777) | modeBits(mode)); err != nil {
		return types.FileInfo{}, pathError(abs(rel), err)
	}
	if err := f.Sync(); err != nil {
		return types.FileInfo{}, pathError(abs(rel), err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return types.FileInfo{}, pathError(abs(rel), err)
	}
	err = r.as(func() error {
		if err := unix.Renameat(pfd, tmp, pfd, base); err != nil {
			return pathError(abs(rel), err)
		}
		return syncDir(pfd)
	})
	if err != nil {
		return types.FileInfo{}, err
	}
	done = true
	return r.info(abs(rel), &st, ""), nil
}

// followLinks returns the path a write to rel lands on: while rel names a
// symlink, its target (an absolute one from the root, a relative one from
// the link's directory; ".." taken lexically, and never above the root).
// A dangling link gives its target's path, where the write creates the
// file, as a shell's "echo > link" would.
func (r *Root) followLinks(rel string) (string, error) {
	for range 40 {
		var target string
		isLink := false
		err := r.as(func() error {
			fd, err := r.resolve(rel, unix.O_PATH, false)
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			if err != nil {
				return pathError(abs(rel), err)
			}
			defer unix.Close(fd)
			var st unix.Stat_t
			if err := unix.Fstat(fd, &st); err != nil {
				return pathError(abs(rel), err)
			}
			if st.Mode&unix.S_IFMT != unix.S_IFLNK {
				return nil
			}
			isLink = true
			target, err = readlinkAt(fd, "")
			return pathError(abs(rel), err)
		})
		if err != nil || !isLink {
			return rel, err
		}
		next := target
		if !strings.HasPrefix(target, "/") {
			next = path.Join(path.Dir(abs(rel)), target)
		}
		rel = strings.TrimPrefix(path.Clean("/"+next), "/")
		if rel == "" {
			rel = "."
		}
	}
	return "", fmt.Errorf("path %q: too many symlinks: %w", abs(rel), errdefs.ErrInvalidArgument)
}

// tooLarge is the error of content over a limit.
func tooLarge(p string, limit int64) error {
	return errdefs.WithDetails(fmt.Errorf("%s: more than the node's limit of %d bytes: %w", p, limit, errdefs.ErrTooLarge),
		map[string]any{"limit_bytes": limit})
}

// modeBits turns setuid, setgid and sticky into os.FileMode bits.
func modeBits(mode uint32) os.FileMode {
	var m os.FileMode
	if mode&unix.S_ISUID != 0 {
		m |= os.ModeSetuid
	}
	if mode&unix.S_ISGID != 0 {
		m |= os.ModeSetgid
	}
	if mode&unix.S_ISVTX != 0 {
		m |= os.ModeSticky
	}
	return m
}

// syncDir fsyncs the directory an fd (O_PATH or not) holds.
func syncDir(fd int) error {
	dfd, err := reopen(fd, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil // no read permission: the rename stands, unsynced
	}
	defer unix.Close(dfd)
	return unix.Fsync(dfd)
}

// parent opens the directory dir (relative) as O_PATH, on a worker thread.
func (r *Root) parent(dir, p string) (int, error) {
	fd, err := r.resolve(dir, unix.O_PATH|unix.O_DIRECTORY, true)
	if err != nil {
		return -1, parentError(dir, p, err)
	}
	if err := checkFS(fd, abs(dir)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// mkdirAll makes the directory rel and its missing parents with mode, on
// a worker thread.
func (r *Root) mkdirAll(rel string, mode uint32) error {
	if rel == "." {
		return nil
	}
	fd, err := r.resolve(rel, unix.O_PATH|unix.O_DIRECTORY, true)
	if err == nil {
		unix.Close(fd)
		return nil
	}
	if !errors.Is(err, unix.ENOENT) {
		return pathError(abs(rel), err)
	}
	dir, base, _ := split(rel)
	if err := r.mkdirAll(dir, mode); err != nil {
		return err
	}
	return r.mkdirAt(dir, base, abs(rel), mode, true)
}

// mkdirAt makes base in dir; with existOK an existing directory is
// success.
func (r *Root) mkdirAt(dir, base, p string, mode uint32, existOK bool) error {
	pfd, err := r.parent(dir, p)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
		if errors.Is(err, unix.EEXIST) && existOK {
			if fd, err := r.resolve(path.Join(dir, base), unix.O_PATH|unix.O_DIRECTORY, true); err == nil {
				unix.Close(fd)
				return nil
			}
			return fmt.Errorf("path %q exists and is not a directory: %w", p, errdefs.ErrFailedPrecondition)
		}
		return pathError(p, err)
	}
	if err := r.own(pfd, base); err != nil {
		return err
	}
	// The mode explicitly, umask notwithstanding, on the directory just
	// made (opened without following, so never a swapped-in symlink).
	dfd, err := unix.Openat(pfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return pathError(p, err)
	}
	defer unix.Close(dfd)
	if err := unix.Fchmod(dfd, mode); err != nil {
		return pathError(p, err)
	}
	return nil
}

// Mkdir makes the directory p with mode; with parents, missing parents
// too and an existing directory is no error.
func (r *Root) Mkdir(ctx context.Context, p string, mode uint32, parents bool) (types.FileInfo, error) {
	rel, err := Clean(p)
	if err != nil {
		return types.FileInfo{}, err
	}
	if err := r.writable(abs(rel)); err != nil {
		return types.FileInfo{}, err
	}
	dir, base, err := split(rel)
	if err != nil && !parents {
		return types.FileInfo{}, err
	}
	err = r.as(func() error {
		if parents {
			if err := r.mkdirAll(dir, 0o755); err != nil {
				return err
			}
			return r.mkdirAt(dir, base, abs(rel), mode, true)
		}
		return r.mkdirAt(dir, base, abs(rel), mode, false)
	})
	if err != nil {
		return types.FileInfo{}, err
	}
	return r.Stat(ctx, abs(rel))
}

// Remove removes the entry at p (a symlink itself, never its target); a
// non-empty directory only when recursive.
func (r *Root) Remove(ctx context.Context, p string, recursive bool) error {
	rel, err := Clean(p)
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
	return r.as(func() error {
		pfd, err := r.parent(dir, abs(rel))
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return pathError(abs(rel), err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return pathError(abs(rel), unix.Unlinkat(pfd, base, 0))
		}
		if !recursive {
			if err := unix.Unlinkat(pfd, base, unix.AT_REMOVEDIR); err != nil {
				if errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
					return fmt.Errorf("directory %q is not empty (recursive=1 removes it with its contents): %w", abs(rel), errdefs.ErrFailedPrecondition)
				}
				return pathError(abs(rel), err)
			}
			return nil
		}
		return removeAll(ctx, pfd, base, abs(rel), 0)
	})
}

// removeAll removes name of dirfd and everything below, never following a
// symlink.
func removeAll(ctx context.Context, dirfd int, name, p string, depth int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
		return pathError(p, err)
	}
	if depth > tarfs.MaxDepth {
		return fmt.Errorf("path %q: deeper than %d levels: %w", p, tarfs.MaxDepth, errdefs.ErrInvalidArgument)
	}
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
	if err != nil {
		return pathError(p, err)
	}
	d := osFile(fd, p)
	defer d.Close()
	for {
		names, err := d.Readdirnames(1024)
		for _, n := range names {
			if err := removeAll(ctx, fd, n, path.Join(p, n), depth+1); err != nil {
				return err
			}
		}
		if err == io.EOF || len(names) == 0 {
			break
		}
		if err != nil {
			return pathError(p, err)
		}
	}
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return pathError(p, err)
	}
	return nil
}

// fromTo cleans the two paths of a move or copy and checks that the
// target may be written.
func (r *Root) fromTo(from, to string) (frel, trel string, err error) {
	if frel, err = Clean(from); err != nil {
		return "", "", err
	}
	if trel, err = Clean(to); err != nil {
		return "", "", err
	}
	if err := r.writable(abs(trel)); err != nil {
		return "", "", err
	}
	return frel, trel, nil
}

// Move renames from to to. Without overwrite an existing to is
// errdefs.ErrAlreadyExists; with it, to is replaced (a directory only by a
// directory, and only when empty). A move the kernel cannot do as a rename
// (across a volume's mount, or an image directory of an overlay) is a copy
// and a removal.
func (r *Root) Move(ctx context.Context, from, to string, overwrite bool) (types.FileInfo, error) {
	frel, trel, err := r.fromTo(from, to)
	if err != nil {
		return types.FileInfo{}, err
	}
	fdir, fbase, err := split(frel)
	if err != nil {
		return types.FileInfo{}, err
	}
	tdir, tbase, err := split(trel)
	if err != nil {
		return types.FileInfo{}, err
	}
	crossDevice := false
	err = r.as(func() error {
		pf, err := r.parent(fdir, abs(frel))
		if err != nil {
			return err
		}
		defer unix.Close(pf)
		pt, err := r.parent(tdir, abs(trel))
		if err != nil {
			return err
		}
		defer unix.Close(pt)
		var flags uint
		if !overwrite {
			flags = unix.RENAME_NOREPLACE
		}
		err = unix.Renameat2(pf, fbase, pt, tbase, flags)
		if errors.Is(err, unix.EXDEV) {
			crossDevice = true
			return nil
		}
		if errors.Is(err, unix.ENOENT) {
			var st unix.Stat_t
			if unix.Fstatat(pf, fbase, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				return pathError(abs(frel), err)
			}
		}
		return pathError(abs(trel), err)
	})
	if err != nil {
		return types.FileInfo{}, fmt.Errorf("move %q to %q: %w", abs(frel), abs(trel), err)
	}
	if crossDevice {
		if _, err := r.Copy(ctx, abs(frel), abs(trel), overwrite); err != nil {
			return types.FileInfo{}, err
		}
		if err := r.Remove(ctx, abs(frel), true); err != nil {
			return types.FileInfo{}, fmt.Errorf("move %q: copied to %q, but removing the source: %w", abs(frel), abs(trel), err)
		}
	}
	return r.lstat(abs(trel))
}

func (r *Root) lstat(p string) (types.FileInfo, error) {
	rel, err := Clean(p)
	if err != nil {
		return types.FileInfo{}, err
	}
	var fi types.FileInfo
	err = r.as(func() error {
		fd, err := r.resolve(rel, unix.O_PATH, false)
		if err != nil {
			return pathError(p, err)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return pathError(p, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			// A symlink's O_PATH fd is on its directory's filesystem.
			if err := checkFS(fd, p); err != nil {
				return err
			}
		}
		target := ""
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			target, _ = readlinkAt(fd, "")
		}
		fi = r.info(p, &st, target)
		return nil
	})
	return fi, err
}

// Copy copies the entry at from (a symlink as a symlink, a directory with
// everything below it, as an archive would) to to. Modes, times and
// symlinks are kept; the copy belongs to the identity; device nodes are
// left out. Without overwrite an existing to is errdefs.ErrAlreadyExists;
// with it, to is replaced. The copy appears at to at once (built under a
// temp name beside it, then renamed).
func (r *Root) Copy(ctx context.Context, from, to string, overwrite bool) (types.FileInfo, error) {
	frel, trel, err := r.fromTo(from, to)
	if err != nil {
		return types.FileInfo{}, err
	}
	tdir, tbase, err := split(trel)
	if err != nil {
		return types.FileInfo{}, err
	}
	src, err := r.lstat(abs(frel))
	if err != nil {
		return types.FileInfo{}, err
	}
	if !overwrite {
		if _, err := r.lstat(abs(trel)); err == nil {
			return types.FileInfo{}, fmt.Errorf("path %q: %w", abs(trel), errdefs.ErrAlreadyExists)
		}
	}
	switch src.Type {
	case types.FileTypeFile:
		f, _, err := r.OpenFile(ctx, abs(frel))
		if err != nil {
			return types.FileInfo{}, err
		}
		defer f.Close()
		mode, _, _ := ParseMode(src.Mode)
		return r.WriteFile(ctx, abs(trel), f, WriteOptions{Mode: mode, SetMode: true})
	case types.FileTypeSymlink:
		err := r.as(func() error {
			pfd, err := r.parent(tdir, abs(trel))
			if err != nil {
				return err
			}
			defer unix.Close(pfd)
			tmp := tempName(tbase)
			if err := unix.Symlinkat(src.LinkTarget, pfd, tmp); err != nil {
				return pathError(abs(trel), err)
			}
			if err := r.own(pfd, tmp); err == nil {
				err = unix.Renameat(pfd, tmp, pfd, tbase)
				if err == nil {
					return nil
				}
			}
			_ = unix.Unlinkat(pfd, tmp, 0)
			return pathError(abs(trel), err)
		})
		if err != nil {
			return types.FileInfo{}, err
		}
		return r.lstat(abs(trel))
	case types.FileTypeDir:
		if trel == frel || strings.HasPrefix(trel, frel+"/") || frel == "." {
			return types.FileInfo{}, fmt.Errorf("copy %q to %q: a directory cannot be copied into itself: %w", abs(frel), abs(trel), errdefs.ErrInvalidArgument)
		}
		return r.copyDir(ctx, frel, trel, tdir, tbase, overwrite)
	}
	return types.FileInfo{}, fmt.Errorf("path %q is a %s: only files, directories and symlinks are copied: %w", abs(frel), src.Type, errdefs.ErrInvalidArgument)
}

// copyDir copies a directory tree through a tar stream: tarfs reads the
// source (never following a symlink) and extracts into a temp directory
// beside the target (confined to it), each on a thread acting as the
// identity.
func (r *Root) copyDir(ctx context.Context, frel, trel, tdir, tbase string, overwrite bool) (types.FileInfo, error) {
	tmp := tempName(tbase)
	tmpRel := path.Join(tdir, tmp)
	if _, err := r.Mkdir(ctx, abs(tmpRel), 0o700, false); err != nil {
		return types.FileInfo{}, err
	}
	committed := false
	defer func() {
		if !committed {
			_ = r.Remove(context.WithoutCancel(ctx), abs(tmpRel), true)
		}
	}()
	pr, pw := io.Pipe()
	readErr := make(chan error, 1)
	go func() {
		err := r.WriteArchive(ctx, abs(frel), pw, "tar")
		pw.CloseWithError(err)
		readErr <- err
	}()
	_, err := r.ExtractArchive(ctx, abs(tmpRel), pr, ExtractOptions{})
	pr.CloseWithError(err)
	if rerr := <-readErr; rerr != nil {
		return types.FileInfo{}, rerr
	}
	if err != nil {
		return types.FileInfo{}, err
	}
	if overwrite {
		if fi, err := r.lstat(abs(trel)); err == nil {
			if fi.Type != types.FileTypeDir {
				if err := r.Remove(ctx, abs(trel), false); err != nil {
					return types.FileInfo{}, err
				}
			} else if err := r.Remove(ctx, abs(trel), true); err != nil {
				return types.FileInfo{}, err
			}
		}
	}
	err = r.as(func() error {
		pfd, err := r.parent(tdir, abs(trel))
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		if err := unix.Renameat2(pfd, tmp, pfd, tbase, unix.RENAME_NOREPLACE); err != nil {
			return pathError(abs(trel), err)
		}
		return nil
	})
	if err != nil {
		return types.FileInfo{}, err
	}
	committed = true
	return r.lstat(abs(trel))
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
