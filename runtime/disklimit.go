package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// Writable-layer size limit.
//
// An instance created with Limits.DiskBytes > 0 keeps its writable layer on
// a filesystem of its own: a sparse ext4 image of exactly DiskBytes,
// StateDir/disks/ID.img, attached to a loop device and mounted over the
// directory of the instance's active snapshot (snapshots/N, the parent of
// the overlay's upperdir fs/ and workdir work/, which overlayfs needs on one
// filesystem), in either snapshotter. A write past the limit fails inside
// the instance with ENOSPC, and the instance never takes more than DiskBytes
// of the node's disk: the image is the whole of it. The mount option
// discard punches freed blocks out of the image again.
//
// Terms:
//   - The disk record StateDir/disks/ID.mnt holds the snapshot directory the
//     image is mounted on; it is written before the first mount and is what
//     every later mount, unmount and removal goes by.
//   - A disk is attached when its image is mounted on that directory.
//
// Contracts:
//   - Create makes the image (mkfs runs while the image is unpacked and the
//     container made) and mounts it before the task starts.
//   - Start, Mounts (and so every save) and New attach a recorded disk that
//     is not attached, so a reboot, or anything else unmounting it, never
//     shows an instance or a save the empty directory underneath.
//   - Stop keeps the disk attached; Remove unmounts it before the
//     snapshotter deletes the snapshot, then deletes the image.
//   - The node's disk is thinly provisioned: a Create with a limit is
//     refused (ErrInsufficientCapacity, a node-level answer, not the
//     tenant's quota) unless the real free space of StateDir's filesystem,
//     measured at the Create, less (the room every limited layer may still
//     fill + the new limit) / Config.DiskOvercommit, stays at or above
//     Config.DiskReserveBytes. Layers without a limit are not counted.
//     Idle development layers use a small part of their limit, so with the
//     default 10x a node takes ten times the instances a full reservation
//     allows; and as layers fill, the free space they take is measured, so
//     new instances are refused before the disk fills. What is not done:
//     a running instance is never stopped or hibernated for the node's
//     disk; a node whose layers together write past the reserve fills,
//     and their writes then fail (EIO/ENOSPC inside the instances).
//
// Per-instance images rather than project quotas on one shared filesystem:
// a quota answers EDQUOT, not ENOSPC; XFS quotas answer ENOSPC but many
// kernels (this one) are built without them; and ext4 quota files need
// CONFIG_QFMT_V2. An image needs only loop devices (made on demand) and
// mkfs.ext4; making one is about 0.1 s for 10 GiB, overlapped with the
// unpack.

// minDiskBytes is the smallest writable-layer limit: an ext4 of less holds
// little beyond its own journal and metadata.
const minDiskBytes = 32 << 20

// defaultDiskReserve is Config.DiskReserveBytes' default.
const defaultDiskReserve = 1 << 30

// DefaultDiskOvercommit is Config.DiskOvercommit's default. Idle
// development instances write a few MB of their 10 GiB default limit
// (4.5 MB for busybox); at 10, a node with 71 GB free took 65 of them
// (bench capacity, docs/BENCHMARKS.md), short of the 120 the capacity
// target holds. At 50 a 10 GiB layer sets aside about 200 MiB until it
// really writes, and the node still refuses new instances on its real
// free space before the disk fills.
const DefaultDiskOvercommit = 50.0

// mkfsArgs make a sparse ext4 image fast: 4 KiB blocks and an inode per 16
// KiB at every size (mke2fs's "default" type; small filesystems would
// otherwise get 1 KiB blocks), no reserved blocks (the instance's root
// would use them), inode tables and journal left to be initialized lazily,
// no discard pass over the new file. The filesystem's own metadata comes out
// of the limit: about 2% of 10 GiB, 8% of 64 MiB.
var mkfsArgs = []string{"-q", "-F", "-t", "ext4", "-T", "default", "-m", "0",
	"-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard"}

// diskMountOptions: the loop device does direct IO (the page cache holds the
// layer's files once, not also the image's blocks); discard returns freed
// blocks to the node; noinit_itable leaves the inode tables' zeroing undone
// rather than have a kernel thread write them in the background.
var diskMountOptions = []string{"loop", "direct-io", "discard", "noinit_itable"}

func (r *Runtime) disksDir() string             { return filepath.Join(r.cfg.StateDir, "disks") }
func (r *Runtime) diskImage(id string) string   { return filepath.Join(r.disksDir(), id+".img") }
func (r *Runtime) diskRecord(id string) string  { return filepath.Join(r.disksDir(), id+".mnt") }
func (r *Runtime) diskLimited(spec Limits) bool { return spec.DiskBytes > 0 && !r.cfg.DisableDiskLimit }
func (r *Runtime) hasDisk(id string) bool       { _, err := os.Stat(r.diskRecord(id)); return err == nil }
func (r *Runtime) diskImageExists(id string) bool {
	_, err := os.Stat(r.diskImage(id))
	return err == nil
}

// checkDiskLimit finds mkfs.ext4 and loop devices, and records why limits
// cannot be honoured if they are missing: a Create with a limit then fails,
// it never runs unlimited.
func (r *Runtime) checkDiskLimit() {
	if r.cfg.DisableDiskLimit {
		return
	}
	if err := os.MkdirAll(r.disksDir(), 0o700); err != nil {
		r.diskErr = fmt.Errorf("disk images dir: %w", err)
		return
	}
	mkfs, err := lookSbin("mkfs.ext4")
	if err != nil {
		r.diskErr = fmt.Errorf("writable-layer limits need mkfs.ext4 (Debian e2fsprogs): %w", errdefs.ErrUnavailable)
		return
	}
	r.mkfs = mkfs
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		r.diskErr = fmt.Errorf("writable-layer limits need loop devices (/dev/loop-control): %w", errdefs.ErrUnavailable)
	}
}

// DiskLimitErr says why writable-layer limits cannot be honoured (a Create
// with one fails); nil when they can or when Config.DisableDiskLimit is set.
func (r *Runtime) DiskLimitErr() error { return r.diskErr }

func lookSbin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// makeDiskImage checks the node's free space and makes id's formatted,
// unmounted image of size bytes. The check and the file's creation hold
// diskMu, so two Creates cannot both take the last room.
func (r *Runtime) makeDiskImage(ctx context.Context, id string, size int64) error {
	if r.diskErr != nil {
		return r.diskErr
	}
	size = (size + 4095) &^ 4095
	img := r.diskImage(id)
	if err := func() error {
		r.diskMu.Lock()
		defer r.diskMu.Unlock()
		if err := r.checkDiskRoom(size); err != nil {
			return err
		}
		f, err := os.OpenFile(img, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("disk image of instance %q: %w", id, err)
		}
		defer f.Close()
		if err := f.Truncate(size); err != nil {
			return fmt.Errorf("disk image of instance %q: %w", id, err)
		}
		return nil
	}(); err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, r.mkfs, append(mkfsArgs, img)...).CombinedOutput()
	if err != nil {
		_ = os.Remove(img)
		return fmt.Errorf("format disk image of instance %q: %v: %s", id, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// checkDiskRoom refuses size more bytes of limited layers when the node's
// real free space, less the overcommitted share of the room they and the
// others may still take, would fall below the reserve.
func (r *Runtime) checkDiskRoom(size int64) error {
	free, room, err := r.diskState()
	if err != nil {
		return err
	}
	set := int64(float64(room+size) / r.cfg.DiskOvercommit)
	if free-set < r.cfg.DiskReserveBytes {
		return errdefs.WithDetails(fmt.Errorf("node disk: %d bytes free, %d may still be written by limited layers and %d by this one "+
			"(%d set aside at overcommit %g), %d kept in reserve: no room for the layer on this node: %w",
			free, room, size, set, r.cfg.DiskOvercommit, r.cfg.DiskReserveBytes, errdefs.ErrInsufficientCapacity),
			map[string]any{"resource": "disk", "free_bytes": free, "reserve_bytes": r.cfg.DiskReserveBytes,
				"set_aside_bytes": set, "overcommit": r.cfg.DiskOvercommit})
	}
	return nil
}

// diskState is the real free space of the disks' filesystem and the room
// the limited layers on it may still fill (their images' unwritten parts).
func (r *Runtime) diskState() (free, room int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(r.disksDir(), &st); err != nil {
		return 0, 0, fmt.Errorf("node disk: %w", err)
	}
	free = int64(st.Bavail) * st.Bsize
	imgs, _ := filepath.Glob(filepath.Join(r.disksDir(), "*.img"))
	for _, img := range imgs {
		var s unix.Stat_t
		if unix.Stat(img, &s) == nil {
			room += max(0, s.Size-s.Blocks*512)
		}
	}
	return free, room, nil
}

// DiskRoom is the most bytes of new writable-layer limits a Create takes
// now (the largest size checkDiskRoom passes, 0 when none); ok false when
// limits are off or cannot be honoured on this node.
func (r *Runtime) DiskRoom() (bytes int64, ok bool) {
	if r.cfg.DisableDiskLimit || r.diskErr != nil {
		return 0, false
	}
	r.diskMu.Lock()
	defer r.diskMu.Unlock()
	free, room, err := r.diskState()
	if err != nil {
		return 0, false
	}
	return max(0, int64(float64(free-r.cfg.DiskReserveBytes)*r.cfg.DiskOvercommit)-room), true
}

// attachNewDisk records the snapshot directory of id's active snapshot
// (snapshotter sn) and mounts the image made by makeDiskImage on it.
func (r *Runtime) attachNewDisk(ctx context.Context, id, sn string) error {
	ms, err := r.client.SnapshotService(sn).Mounts(ctx, id)
	if err != nil {
		return translate(err, "snapshot of instance %q", id)
	}
	dir, err := snapshotDir(ms)
	if err != nil {
		return fmt.Errorf("snapshot of instance %q: %w", id, err)
	}
	if err := writeFileSync(r.diskRecord(id), []byte(dir+"\n")); err != nil {
		return fmt.Errorf("disk record of instance %q: %w", id, err)
	}
	return r.attachDisk(id)
}

// snapshotDir is the directory holding an active snapshot's upperdir fs/
// and workdir work/, from its mounts.
func snapshotDir(ms []mount.Mount) (string, error) {
	var upper string
	for _, m := range ms {
		for _, o := range m.Options {
			if v, ok := strings.CutPrefix(o, "upperdir="); ok {
				upper = v
			}
		}
		if upper == "" && m.Type == "bind" && len(ms) == 1 {
			upper = m.Source // a snapshot without parents
		}
	}
	if upper == "" || filepath.Base(upper) != "fs" || !filepath.IsAbs(upper) {
		return "", fmt.Errorf("no upper directory .../fs in the snapshot's mounts: %w", errdefs.ErrFailedPrecondition)
	}
	return filepath.Dir(upper), nil
}

// attachDisk mounts id's image on its recorded snapshot directory unless
// it is mounted there already, and makes fs/ and work/ in it as the
// snapshotter made them underneath (mode and owner).
func (r *Runtime) attachDisk(id string) error {
	b, err := os.ReadFile(r.diskRecord(id))
	if err != nil {
		return fmt.Errorf("disk record of instance %q: %w", id, err)
	}
	dir := strings.TrimSpace(string(b))
	img := r.diskImage(id)
	r.diskMu.Lock()
	defer r.diskMu.Unlock()
	ok, err := diskMounted(dir, img)
	if err != nil || ok {
		return err
	}
	if !r.diskImageExists(id) {
		return fmt.Errorf("disk image of instance %q is missing: %w", id, errdefs.ErrFailedPrecondition)
	}
	// Never a second mount of the image: a mount detached while the
	// instance's overlay still used it lives on, and two ext4 mounts of one
	// image corrupt it. A loop device that was only just released is
	// cleared within moments.
	for deadline := time.Now().Add(2 * time.Second); ; {
		dev := loopOf(img)
		if dev == "" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("disk image of instance %q is still attached to %s (a mount detached while in use; stop the instance): %w",
				id, dev, errdefs.ErrFailedPrecondition)
		}
		time.Sleep(50 * time.Millisecond)
	}
	type perm struct {
		mode     os.FileMode
		uid, gid int
	}
	perms := map[string]perm{"fs": {0o755, 0, 0}, "work": {0o700, 0, 0}}
	for name := range perms {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, name), &st); err != nil {
			return fmt.Errorf("snapshot of instance %q: %w", id, err)
		}
		perms[name] = perm{os.FileMode(st.Mode & 0o7777), int(st.Uid), int(st.Gid)}
	}
	m := mount.Mount{Type: "ext4", Source: img, Options: diskMountOptions}
	if err := m.Mount(dir); err != nil {
		return fmt.Errorf("mount disk image of instance %q on %s: %w", id, dir, err)
	}
	for name, p := range perms {
		path := filepath.Join(dir, name)
		if err := os.Mkdir(path, p.mode); err != nil {
			if os.IsExist(err) {
				continue // a disk attached before
			}
			_ = unmountAll(dir)
			return fmt.Errorf("disk of instance %q: %w", id, err)
		}
		if err := errors.Join(os.Chmod(path, p.mode), os.Lchown(path, p.uid, p.gid)); err != nil {
			_ = unmountAll(dir)
			return fmt.Errorf("disk of instance %q: %w", id, err)
		}
	}
	return nil
}

// ensureDisk attaches id's disk if it has one.
func (r *Runtime) ensureDisk(id string) error {
	if !r.hasDisk(id) {
		return nil
	}
	return r.attachDisk(id)
}

// attachDisks attaches every recorded disk (after a reboot, say). A disk
// that fails is left for Start or Mounts to report.
func (r *Runtime) attachDisks() {
	recs, _ := filepath.Glob(filepath.Join(r.disksDir(), "*.mnt"))
	for _, rec := range recs {
		id := strings.TrimSuffix(filepath.Base(rec), ".mnt")
		if validID.MatchString(id) && r.diskImageExists(id) {
			_ = r.attachDisk(id)
		}
	}
}

// detachDisk unmounts id's disk (lazily: a save still reading it keeps it
// until it is done). The image and record stay until removeDisk.
func (r *Runtime) detachDisk(id string) error {
	b, err := os.ReadFile(r.diskRecord(id))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("disk record of instance %q: %w", id, err)
	}
	r.diskMu.Lock()
	defer r.diskMu.Unlock()
	if err := unmountAll(strings.TrimSpace(string(b))); err != nil {
		return fmt.Errorf("unmount disk of instance %q: %w", id, err)
	}
	return nil
}

// removeDisk deletes id's image and record; call it after detachDisk and
// after the snapshot is gone.
func (r *Runtime) removeDisk(id string) error {
	var errs []error
	for _, p := range []string{r.diskImage(id), r.diskRecord(id)} {
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			errs = append(errs, fmt.Errorf("disk of instance %q: %w", id, err))
		}
	}
	return errors.Join(errs...)
}

// DiskUsage is how much of an instance's writable-layer limit is used.
type DiskUsage struct {
	LimitBytes int64 // the image's size; 0 = the instance has no limit
	UsedBytes  int64 // blocks the image takes on the node's disk
}

// DiskUsage reports id's writable-layer limit and what its image takes on
// the node's disk.
func (r *Runtime) DiskUsage(id string) (DiskUsage, error) {
	var st unix.Stat_t
	if err := unix.Stat(r.diskImage(id), &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return DiskUsage{}, nil
		}
		return DiskUsage{}, fmt.Errorf("disk image of instance %q: %w", id, err)
	}
	return DiskUsage{LimitBytes: st.Size, UsedBytes: st.Blocks * 512}, nil
}

// diskMounted reports whether dir is a mount point of img's loop device;
// another filesystem mounted there is an error.
func diskMounted(dir, img string) (bool, error) {
	var d, p unix.Stat_t
	if err := unix.Stat(dir, &d); err != nil {
		return false, fmt.Errorf("snapshot directory: %w", err)
	}
	if err := unix.Stat(filepath.Dir(dir), &p); err != nil {
		return false, fmt.Errorf("snapshot directory: %w", err)
	}
	if d.Dev == p.Dev {
		return false, nil
	}
	bf, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/loop/backing_file", unix.Major(d.Dev), unix.Minor(d.Dev)))
	if err != nil || strings.TrimSpace(string(bf)) != img {
		return false, fmt.Errorf("%s has another filesystem mounted on it, not the disk image %s: %w", dir, img, errdefs.ErrFailedPrecondition)
	}
	return true, nil
}

// loopOf is the loop device backed by img, "" when none is.
func loopOf(img string) string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimSpace(string(b)) == img {
			return "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		}
	}
	return ""
}

// unmountAll detaches every mount stacked on dir.
func unmountAll(dir string) error {
	for range 16 {
		err := unix.Unmount(dir, unix.MNT_DETACH)
		switch {
		case err == unix.EINTR:
		case err == unix.EINVAL || err == unix.ENOENT:
			return nil // not a mount point (any more)
		case err != nil:
			return err
		}
	}
	return fmt.Errorf("%s: still mounted after 16 unmounts", dir)
}

// writeFileSync writes path through a synced temp file and rename.
func writeFileSync(path string, data []byte) error {
	tmp := path + ".tmp-" + strconv.Itoa(os.Getpid())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// DiskOvercommit is Config.DiskOvercommit, its default filled in.
func (r *Runtime) DiskOvercommit() float64 { return r.cfg.DiskOvercommit }
