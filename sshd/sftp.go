package sshd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/files"
	"github.com/envd-dev/envd/errdefs"
)

// SFTP is served by envd, not by an sftp-server inside the instance: most
// images have none (busybox, distroless, slim bases), and one code path
// that works on every image beats two. It is the file API's code path:
// every request is an operation of envd/files' Root, opened as the file
// API opens it (Core.OpenFiles, as the image's user), so SFTP has the file
// API's rights and no more: paths confined to the instance's root, the
// kernel's pseudo filesystems (/proc, /sys, ...), device nodes and FIFOs
// refused, permissions checked by the kernel as the user on a thread whose
// capabilities are dropped. Only the opens run on such a thread; a file's
// content is read and written through its descriptor by pkg/sftp's
// goroutines, so a stalled client holds no OS thread.

// sftp serves the "sftp" subsystem on ch until the client ends it, with
// the session's slot of AdmitSFTP already taken.
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
	root, err := c.s.core.OpenFiles(ctx, c.p, c.instance, types.FileUser{}, true)
	if err != nil {
		fail(err)
		return
	}
	defer root.Close()
	fs := &rootFS{ctx: ctx, root: root, touch: func() { c.s.core.TouchInstance(c.instance) }}
	srv := sftp.NewRequestServer(struct {
		io.Reader
		io.WriteCloser
	}{touchReader{ch, c}, ch}, fs.handlers(), sftp.WithStartDirectory(fs.home()))
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	if err := srv.Serve(); err != nil && !errors.Is(err, io.EOF) {
		c.s.o.log.Debug("sftp session", "instance", c.instance, "err", err)
	}
	_, _ = ch.SendRequest("exit-status", false, []byte{0, 0, 0, 0})
}

// rootFS answers pkg/sftp's requests with a Root's operations.
type rootFS struct {
	ctx   context.Context
	root  *files.Root
	touch func()
}

func (fs *rootFS) handlers() sftp.Handlers {
	return sftp.Handlers{FileGet: fs, FilePut: fs, FileCmd: fs, FileList: fs}
}

// home is the working directory sftp starts in: the user's home from the
// instance's /etc/passwd, else /.
func (fs *rootFS) home() string {
	home := "/"
	f, _, err := fs.root.OpenFile(fs.ctx, "/etc/passwd")
	if err == nil {
		defer f.Close()
		uid := strconv.FormatUint(uint64(fs.root.Identity().UID), 10)
		sc := bufio.NewScanner(io.LimitReader(f, 4<<20))
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) >= 6 && fields[2] == uid && path.IsAbs(fields[5]) {
				home = fields[5]
				break
			}
		}
	}
	if fi, err := fs.root.Stat(fs.ctx, home); err != nil || fi.Type != types.FileTypeDir {
		return "/"
	}
	return home
}

// sftpError carries a Root's error to the client: its message, and the
// SFTP status code of its kind.
type sftpError struct {
	err  error
	code error // one of pkg/sftp's ErrSSHFx* values
}

func (e *sftpError) Error() string   { return e.err.Error() }
func (e *sftpError) Unwrap() []error { return []error{e.err, e.code} }

func toSFTP(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return err
	}
	code := sftp.ErrSSHFxFailure
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		code = sftp.ErrSSHFxNoSuchFile
	case errors.Is(err, errdefs.ErrPermissionDenied), errors.Is(err, errdefs.ErrInvalidArgument):
		// Invalid arguments here are refusals: a pseudo filesystem, a
		// device node, a magic link.
		code = sftp.ErrSSHFxPermissionDenied
	}
	return &sftpError{err: err, code: code}
}

// Fileread opens a regular file for reading.
func (fs *rootFS) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	fs.touch()
	f, _, err := fs.root.OpenFile(fs.ctx, r.Filepath)
	if err != nil {
		return nil, toSFTP(err)
	}
	return f, nil
}

// Filewrite opens a file for writing with the client's flags.
func (fs *rootFS) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	return fs.open(r, false)
}

// OpenFile opens a file for reading and writing.
func (fs *rootFS) OpenFile(r *sftp.Request) (sftp.WriterAtReaderAt, error) {
	return fs.open(r, true)
}

func (fs *rootFS) open(r *sftp.Request, read bool) (*os.File, error) {
	fs.touch()
	pf := r.Pflags()
	fl := files.OpenFlags{Read: read || pf.Read, Create: pf.Creat, Excl: pf.Excl, Trunc: pf.Trunc, Mode: 0o644}
	if r.AttrFlags().Permissions {
		fl.Mode = uint32(r.Attributes().FileMode().Perm())
	}
	// O_APPEND is left out: writes carry their offsets (pwrite ignores
	// them under O_APPEND on Linux, and clients send the file's end).
	f, err := fs.root.OpenWrite(fs.ctx, r.Filepath, fl)
	if err != nil {
		return nil, toSFTP(err)
	}
	return f, nil
}

// Filecmd runs the commands that change the tree.
func (fs *rootFS) Filecmd(r *sftp.Request) error {
	fs.touch()
	ctx := fs.ctx
	switch r.Method {
	case "Setstat":
		return toSFTP(fs.setstat(r))
	case "Rename":
		// SFTP's rename does not replace (draft-02); OpenSSH's
		// posix-rename@openssh.com does.
		_, err := fs.root.Move(ctx, r.Filepath, r.Target, false)
		return toSFTP(err)
	case "PosixRename":
		_, err := fs.root.Move(ctx, r.Filepath, r.Target, true)
		return toSFTP(err)
	case "Link":
		// r.Filepath is the existing file, r.Target the new name.
		return toSFTP(fs.root.Link(ctx, r.Filepath, r.Target))
	case "Symlink":
		// pkg/sftp gives the link's text in r.Filepath (as sent) and the new
		// link in r.Target; the text is resolved inside the root when
		// followed.
		return toSFTP(fs.root.Symlink(ctx, r.Filepath, r.Target))
	case "Mkdir":
		mode := uint32(0o755)
		if r.AttrFlags().Permissions {
			mode = uint32(r.Attributes().FileMode().Perm())
		}
		_, err := fs.root.Mkdir(ctx, r.Filepath, mode, false)
		return toSFTP(err)
	case "Rmdir", "Remove":
		fi, err := fs.root.Lstat(ctx, r.Filepath)
		if err != nil {
			return toSFTP(err)
		}
		if isDir := fi.Type == types.FileTypeDir; isDir != (r.Method == "Rmdir") {
			what := "a directory: use rmdir"
			if !isDir {
				what = "not a directory: use rm"
			}
			return toSFTP(fmt.Errorf("path %q is %s: %w", r.Filepath, what, errdefs.ErrFailedPrecondition))
		}
		return toSFTP(fs.root.Remove(ctx, r.Filepath, false))
	}
	return sftp.ErrSSHFxOpUnsupported
}

func (fs *rootFS) PosixRename(r *sftp.Request) error { return fs.Filecmd(r) }

// setstat changes size, mode and times; owners are not changed: the
// user's files are the user's.
func (fs *rootFS) setstat(r *sftp.Request) error {
	af, attrs := r.AttrFlags(), r.Attributes()
	var a files.Attrs
	if af.Size {
		size := int64(attrs.Size)
		a.Size = &size
	}
	if af.Permissions {
		mode := attrs.Mode & 0o7777
		a.Mode = &mode
	}
	if af.Acmodtime {
		at, mt := time.Unix(int64(attrs.Atime), 0), time.Unix(int64(attrs.Mtime), 0)
		a.Atime, a.Mtime = &at, &mt
	}
	return fs.root.SetAttrs(fs.ctx, r.Filepath, a)
}

// Filelist serves List, Stat and Readlink.
func (fs *rootFS) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	fs.touch()
	switch r.Method {
	case "List":
		d, err := fs.root.OpenDir(fs.ctx, r.Filepath)
		if err != nil {
			return nil, toSFTP(err)
		}
		return &dirLister{ctx: fs.ctx, d: d}, nil
	case "Stat":
		fi, err := fs.root.Stat(fs.ctx, r.Filepath)
		if err != nil {
			return nil, toSFTP(err)
		}
		return listerAt{fileInfo{fi}}, nil
	case "Readlink":
		target, err := fs.Readlink(r.Filepath)
		if err != nil {
			return nil, err
		}
		return listerAt{fileInfo{types.FileInfo{Name: target}}}, nil
	}
	return nil, sftp.ErrSSHFxOpUnsupported
}

// Lstat serves Lstat without following a final symlink.
func (fs *rootFS) Lstat(r *sftp.Request) (sftp.ListerAt, error) {
	fs.touch()
	fi, err := fs.root.Lstat(fs.ctx, r.Filepath)
	if err != nil {
		return nil, toSFTP(err)
	}
	return listerAt{fileInfo{fi}}, nil
}

// Readlink returns a symlink's text.
func (fs *rootFS) Readlink(p string) (string, error) {
	target, err := fs.root.Readlink(fs.ctx, p)
	return target, toSFTP(err)
}

// dirLister reads a directory in the chunks the client asks for (SFTP's
// READDIR: pkg/sftp asks for 100 entries at a time), never the whole
// directory at once.
type dirLister struct {
	ctx  context.Context
	d    *files.Dir
	next int64 // offset of the next entry
}

func (l *dirLister) ListAt(out []os.FileInfo, off int64) (int, error) {
	if off != l.next {
		return 0, toSFTP(fmt.Errorf("directory listing: offset %d, %d expected (entries are read once, in order): %w", off, l.next, errdefs.ErrInvalidArgument))
	}
	if len(out) == 0 {
		return 0, nil
	}
	entries, err := l.d.Next(l.ctx, len(out))
	for i, e := range entries {
		out[i] = fileInfo{e}
	}
	l.next += int64(len(entries))
	if err != nil {
		return len(entries), toSFTP(err)
	}
	return len(entries), nil
}

func (l *dirLister) Close() error { return l.d.Close() }

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

// fileInfo is a Root's FileInfo as pkg/sftp takes it (owners as the
// instance sees them).
type fileInfo struct{ fi types.FileInfo }

func (f fileInfo) Name() string       { return f.fi.Name }
func (f fileInfo) Size() int64        { return f.fi.Size }
func (f fileInfo) ModTime() time.Time { return f.fi.ModTime }
func (f fileInfo) IsDir() bool        { return f.fi.Type == types.FileTypeDir }
func (f fileInfo) Sys() any           { return nil }
func (f fileInfo) Uid() uint32        { return uint32(f.fi.UID) }
func (f fileInfo) Gid() uint32        { return uint32(f.fi.GID) }
func (f fileInfo) Mode() os.FileMode {
	bits, _, _ := files.ParseMode(f.fi.Mode)
	m := os.FileMode(bits & 0o777)
	switch f.fi.Type {
	case types.FileTypeDir:
		m |= os.ModeDir
	case types.FileTypeSymlink:
		m |= os.ModeSymlink
	case types.FileTypeFIFO:
		m |= os.ModeNamedPipe
	case types.FileTypeSocket:
		m |= os.ModeSocket
	case types.FileTypeChar:
		m |= os.ModeDevice | os.ModeCharDevice
	case types.FileTypeBlock:
		m |= os.ModeDevice
	}
	if bits&0o4000 != 0 {
		m |= os.ModeSetuid
	}
	if bits&0o2000 != 0 {
		m |= os.ModeSetgid
	}
	if bits&0o1000 != 0 {
		m |= os.ModeSticky
	}
	return m
}
