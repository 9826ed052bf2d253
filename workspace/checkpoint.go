package workspace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/internal/tarfs"
)

// A point-in-time copy of a volume, for coordinated checkpoints:
//
//  1. Freeze (FIFREEZE on the volume's mount) flushes the file system and
//     blocks every writer of it, in any instance, until Copy ends; ext4
//     checkpoints its journal and marks itself clean, so the image file is
//     a consistent file system from that moment on. It is called while the
//     instance's processes are frozen, so the volume and the rootfs are
//     read at the same moment.
//  2. Copy copies the image (a reflink where the host file system has
//     them, else its data extents only: the image is sparse) and thaws
//     the file system. The instance's processes run again meanwhile; only
//     their writes to the volume wait.
//  3. ArchiveCopy mounts the copy read-only and writes it to object
//     storage as Archive does; the copy is deleted.
//
// A process that dies between Freeze and Copy leaves the file system
// frozen: Ensure and Thaw thaw it (a node thaws its volumes at start).

// The file-system freeze ioctls of linux/fs.h: _IOWR('X', 119, int) and
// _IOWR('X', 120, int) (golang.org/x/sys/unix does not name them).
const (
	ioctlFIFREEZE = 0xc0045877
	ioctlFITHAW   = 0xc0045878
)

// Frozen is a volume whose file system is frozen by Freeze. Copy (or
// Thaw) must follow.
type Frozen struct {
	v      volume
	fd     int
	unlock func()
	at     time.Time
}

// Freeze flushes and freezes the file system of the volume's mount. The
// volume must be mounted (an instance uses it). Other operations on the
// volume wait until Copy or Thaw.
func (m *Manager) Freeze(ctx context.Context, owner string, s Spec) (*Frozen, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	v, err := m.locate(owner, s.Name)
	if err != nil {
		return nil, err
	}
	unlock := m.lock(v)
	if _, ok, err := mountedAt(v.mnt()); err != nil || !ok {
		unlock()
		if err == nil {
			err = fmt.Errorf("%s is not mounted on this node", v)
		}
		return nil, err
	}
	fd, err := unix.Open(v.mnt(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("freeze %s: %w", v, err)
	}
	if err := unix.IoctlSetInt(fd, ioctlFIFREEZE, 0); err != nil {
		unix.Close(fd)
		unlock()
		return nil, fmt.Errorf("freeze %s: %w", v, err)
	}
	return &Frozen{v: v, fd: fd, unlock: unlock, at: time.Now()}, nil
}

// Thaw thaws the file system and releases the volume; it is safe to call
// after Copy (then it does nothing). It returns how long the file system
// was frozen.
func (f *Frozen) Thaw() time.Duration {
	if f.fd < 0 {
		return 0
	}
	_ = unix.IoctlSetInt(f.fd, ioctlFITHAW, 0)
	unix.Close(f.fd)
	f.fd = -1
	f.unlock()
	return time.Since(f.at)
}

// Copy writes the frozen file system's image to dst (a new file, on the
// same host file system for a reflink), then thaws it. It returns how long
// the file system was frozen.
func (f *Frozen) Copy(ctx context.Context, dst string) (time.Duration, error) {
	err := copySparse(ctx, f.v.image(), dst)
	d := f.Thaw()
	if err != nil {
		_ = os.Remove(dst)
		return d, fmt.Errorf("copy %s: %w", f.v, err)
	}
	return d, nil
}

// thaw thaws the file system mounted at dir if it is frozen (a process
// that froze it died); a file system that is not frozen answers EINVAL.
func thaw(dir string) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	_ = unix.IoctlSetInt(fd, ioctlFITHAW, 0)
}

// ThawAll thaws every mounted volume of this node that a process left
// frozen (Freeze without Copy or Thaw, then a crash).
func (m *Manager) ThawAll(ctx context.Context) error {
	owners, err := m.Owners(ctx)
	if err != nil {
		return err
	}
	for _, o := range owners {
		names, err := m.List(ctx, o)
		if err != nil {
			return err
		}
		for _, n := range names {
			v, err := m.locate(o, n)
			if err != nil {
				continue
			}
			if _, ok, _ := mountedAt(v.mnt()); ok {
				thaw(v.mnt())
			}
		}
	}
	return nil
}

// copySparse copies src to a new file dst: a reflink where the file
// system offers one, else the data extents of src (SEEK_DATA/SEEK_HOLE)
// with copy_file_range, so holes stay holes. dst is not fsynced: it is
// read once and deleted, and a crash fails its checkpoint anyway (an fsync
// would keep the volume's writers waiting for the disk).
func copySparse(ctx context.Context, src, dst string) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil {
			err = cerr
		}
	}()
	if unix.IoctlFileClone(int(out.Fd()), int(in.Fd())) == nil {
		return nil
	}
	if err := out.Truncate(st.Size()); err != nil {
		return err
	}
	size := st.Size()
	for pos := int64(0); pos < size; {
		if err := ctx.Err(); err != nil {
			return err
		}
		start, err := unix.Seek(int(in.Fd()), pos, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // no data after pos
		}
		if err != nil {
			return fmt.Errorf("seek data: %w", err)
		}
		end, err := unix.Seek(int(in.Fd()), start, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("seek hole: %w", err)
		}
		if err := copyRange(in, out, start, end-start); err != nil {
			return err
		}
		pos = end
	}
	return nil
}

// copyRange copies n bytes at off from in to the same offset of out.
func copyRange(in, out *os.File, off, n int64) error {
	roff, woff := off, off
	for n > 0 {
		c, err := unix.CopyFileRange(int(in.Fd()), &roff, int(out.Fd()), &woff, int(min(n, 1<<30)), 0)
		if err != nil {
			if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
				_, err := io.Copy(io.NewOffsetWriter(out, woff), io.NewSectionReader(in, roff, n))
				return err
			}
			return fmt.Errorf("copy_file_range: %w", err)
		}
		if c == 0 {
			return fmt.Errorf("copy_file_range: short copy at %d", roff)
		}
		n -= int64(c)
	}
	return nil
}

// ArchiveCopy writes the file system in the image img (a Copy) to store
// under key as Archive writes a volume, then deletes img. The image is
// mounted read-only, without devices, set-id or exec, beside it.
func ArchiveCopy(ctx context.Context, img string, store objstore.Store, key string) (ArchiveInfo, error) {
	defer os.Remove(img)
	if err := objstore.ValidateKey(key); err != nil {
		return ArchiveInfo{}, err
	}
	mnt := img + ".mnt"
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return ArchiveInfo{}, err
	}
	defer os.Remove(mnt)
	if out, err := execMount(ctx, img, mnt); err != nil {
		return ArchiveInfo{}, fmt.Errorf("mount volume copy %s: %w: %s", filepath.Base(img), err, out)
	}
	// Read through a descriptor of the mount's root and detach the mount
	// at once: if this process dies, the kernel drops the mount with the
	// descriptor (and the loop device with it), leaving nothing mounted.
	fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		_ = unix.Unmount(mnt, 0)
		return ArchiveInfo{}, fmt.Errorf("open volume copy %s: %w", filepath.Base(img), err)
	}
	defer unix.Close(fd)
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
		return ArchiveInfo{}, fmt.Errorf("detach volume copy %s: %w", filepath.Base(img), err)
	}
	return archiveDir(ctx, fmt.Sprintf("/proc/self/fd/%d", fd), store, key)
}

// archiveDir streams the tree at dir to store under key as tar+zstd.
func archiveDir(ctx context.Context, dir string, store objstore.Store, key string) (ArchiveInfo, error) {
	pr, pw := io.Pipe()
	cw := &countingWriter{w: pw}
	type result struct {
		files int
		err   error
	}
	done := make(chan result, 1)
	go func() {
		files, err := writeArchive(ctx, dir, cw)
		pw.CloseWithError(err)
		done <- result{files, err}
	}()
	putErr := store.Put(ctx, key, pr, -1)
	pr.CloseWithError(errors.New("upload stopped"))
	res := <-done
	if res.err != nil {
		return ArchiveInfo{}, res.err
	}
	if putErr != nil {
		return ArchiveInfo{}, putErr
	}
	return ArchiveInfo{Key: key, Bytes: cw.n, Files: res.files}, nil
}

// execMount loop-mounts the ext4 image img read-only on dir.
func execMount(ctx context.Context, img, dir string) ([]byte, error) {
	return exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,ro,nodev,nosuid,noexec", img, dir).CombinedOutput()
}

// RestoreInPlace replaces the content of the volume with the archive at
// key while the volume stays mounted, for instances that have it
// bind-mounted (Restore swaps the image, which it cannot while a container
// holds the mount). The archive is first extracted into a fresh image
// beside the volume, so a missing or corrupt archive leaves the volume
// untouched; then the volume's content is deleted and the staged tree
// copied in, and the root gets the spec's owner. The caller freezes the
// processes that use the volume for the duration. A volume that is not
// mounted is restored as Restore does.
func (m *Manager) RestoreInPlace(ctx context.Context, owner string, s Spec, store objstore.Store, key string) (err error) {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := objstore.ValidateKey(key); err != nil {
		return err
	}
	v, err := m.locate(owner, s.Name)
	if err != nil {
		return err
	}
	if _, ok, err := mountedAt(v.mnt()); err != nil {
		return err
	} else if !ok {
		return m.Restore(ctx, owner, s, store, key)
	}
	defer m.lock(v)()
	rc, err := store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	defer rc.Close()

	stageImg, stageMnt := v.image()+".new", v.mnt()+".new"
	_ = unmount(stageMnt) // left by a crash
	_ = os.Remove(stageImg)
	defer func() {
		_ = unmount(stageMnt)
		_ = os.Remove(stageMnt)
		_ = os.Remove(stageImg)
	}()
	if err := buildImage(ctx, stageImg, s); err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	if err := mountAt(ctx, stageImg, stageMnt); err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	if err := extract(ctx, stageMnt, rc); err != nil {
		return fmt.Errorf("restore %s from %q: %w", v, key, err)
	}

	// The archive is good: replace the content.
	ents, err := os.ReadDir(v.mnt())
	if err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	for _, e := range ents {
		if e.Name() == lostFound {
			continue
		}
		if err := os.RemoveAll(filepath.Join(v.mnt(), e.Name())); err != nil {
			return fmt.Errorf("restore %s: clear: %w", v, err)
		}
	}
	pr, pw := io.Pipe()
	go func() {
		_, err := writeTar(ctx, stageMnt, pw)
		pw.CloseWithError(err)
	}()
	_, err = tarfs.Extract(ctx, v.mnt(), pr, tarfs.ExtractOptions{
		Skip: func(name string) bool { return name == lostFound || strings.HasPrefix(name, lostFound+"/") },
		What: "the volume",
	})
	pr.CloseWithError(errors.New("copy stopped"))
	if err != nil {
		return fmt.Errorf("restore %s: copy: %w", v, err)
	}
	if err := prepareRoot(v.mnt(), s); err != nil {
		return fmt.Errorf("restore %s: %w", v, err)
	}
	if fd, err := unix.Open(v.mnt(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
		_ = unix.Syncfs(fd)
		unix.Close(fd)
	}
	return nil
}
