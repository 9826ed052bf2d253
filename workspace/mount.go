package workspace

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/mountinfo"
)

// Facts this file relies on (checked on Linux 6.x, util-linux 2.38,
// e2fsprogs 1.47):
//
//   - `mount -o loop IMG DIR` attaches a free loop device with the autoclear
//     flag: the device is detached by the kernel when the last reference to
//     the file system goes, so a plain umount(2) frees it (`losetup -a` shows
//     nothing left). No losetup bookkeeping is needed.
//   - A file system bind-mounted into a container lives in the container's
//     mount namespace too: umount(2) on the host then succeeds without EBUSY
//     while the container keeps writing to the image. So "busy" is checked
//     across all mount namespaces (/proc/*/mountinfo) before unmounting.
//   - Mounts do not survive a reboot, and a private mount namespace of envd
//     (systemd PrivateMounts) would hide them from runc: ensureMounted checks
//     /proc/self/mountinfo each time.

// mountedAt returns the mount on dir in this process's namespace (the last,
// topmost one), if any.
func mountedAt(dir string) (mountinfo.Info, bool, error) {
	infos, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return mountinfo.Info{}, false, fmt.Errorf("read mounts: %w", err)
	}
	var found mountinfo.Info
	ok := false
	for _, mi := range infos {
		if mi.MountPoint == dir {
			found, ok = mi, true
		}
	}
	return found, ok, nil
}

// loopBacking returns the backing file of a /dev/loopN source.
func loopBacking(source string) string {
	name := filepath.Base(source)
	if !strings.HasPrefix(name, "loop") {
		return ""
	}
	b, err := os.ReadFile(filepath.Join("/sys/block", name, "loop", "backing_file"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// loopOf returns the loop device backed by img, "" when none is.
func loopOf(img string) string {
	devs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range devs {
		b, err := os.ReadFile(f)
		if err == nil && strings.TrimSpace(string(b)) == img {
			return "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		}
	}
	return ""
}

// transientUse is how long another mount namespace may hold a volume's
// mount before it counts as a user: a container being set up holds a copy
// of every host mount until it pivots into its rootfs.
const transientUse = 3 * time.Second

// detached waits for img's loop device to go. The kernel detaches an
// autoclear loop device after the last mount of it is gone, but not at
// once: when the last holder was a mount namespace whose process just
// exited, the namespace's mounts and then the device are released by
// deferred kernel work, seconds later on a loaded node. So the device
// may stay a while with no holder. A namespace that still mounts it is a
// holder, refused with its pid once it has held it for transientUse: a
// container being set up anywhere on the node holds a copy of every host
// mount for a moment (see unmount; a CI run's workspace test met one).
func detached(img string) error {
	deadline := time.Now().Add(10 * time.Second)
	var heldSince time.Time
	for {
		dev := loopOf(img)
		if dev == "" {
			return nil
		}
		b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "dev"))
		if err == nil {
			who, err := usedElsewhere(strings.TrimSpace(string(b)))
			if err != nil {
				return err
			}
			switch {
			case who == "":
				heldSince = time.Time{}
			case heldSince.IsZero():
				heldSince = time.Now()
			case time.Since(heldSince) > transientUse:
				return fmt.Errorf("image still attached to %s, used by %s: %w", dev, who, errdefs.ErrFailedPrecondition)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("image still attached to %s: %w", dev, errdefs.ErrFailedPrecondition)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mountImage loop-mounts the ext4 image img on dir. nodev and nosuid: a
// volume holds user data, never device nodes or set-id programs that
// should take effect. exec is allowed: tools live in volumes.
func mountImage(ctx context.Context, img, dir string) error {
	out, err := exec.CommandContext(ctx, "mount", "-t", "ext4", "-o", "loop,nodev,nosuid", img, dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("mount %s on %s: %w: %s", img, dir, err, bytes.TrimSpace(out))
	}
	return nil
}

// usedElsewhere reports whether the file system with device number dev
// (major:minor) is mounted in a mount namespace other than ours (a
// container's bind mount), naming a process that holds it.
func usedElsewhere(dev string) (string, error) {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return "", fmt.Errorf("own mount namespace: %w", err)
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return "", err
	}
	seen := map[string]bool{self: true}
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		ns, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "mnt"))
		if err != nil || seen[ns] {
			continue // exited, or a namespace already read
		}
		seen[ns] = true
		infos, err := mountinfo.Read(filepath.Join("/proc", e.Name(), "mountinfo"))
		if err != nil {
			continue
		}
		for _, mi := range infos {
			if mi.Dev == dev {
				return fmt.Sprintf("pid %s (mounted at %s in its namespace)", e.Name(), mi.MountPoint), nil
			}
		}
	}
	return "", nil
}

// unmount unmounts dir if something is mounted there, refusing with
// errdefs.ErrFailedPrecondition while the file system is in use: open
// files or working directories under dir (EBUSY), or a bind mount in
// another mount namespace. Never lazy: a lazy unmount would let a
// deleted image keep receiving writes.
func unmount(dir string) error {
	mi, ok, err := mountedAt(dir)
	if err != nil || !ok {
		return err
	}
	// A container being set up on this node (any, not only one using the
	// volume) briefly holds a copy of every host mount in its new mount
	// namespace, until it pivots into its rootfs: a use that goes away
	// within a few seconds is that, not a real user.
	deadline := time.Now().Add(transientUse)
	for {
		who, err := usedElsewhere(mi.Dev)
		if err != nil {
			return err
		}
		if who == "" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("volume at %s is in use by %s: %w", dir, who, errdefs.ErrFailedPrecondition)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// An open file is also held for a moment by a child this process
	// forks (a mount, a mkfs) until it execs: it inherits every descriptor
	// open at the fork, close-on-exec or not, and on a loaded node may wait
	// hundreds of milliseconds to run. A restore's unmount right after its
	// extraction met one (CI, load 15). So EBUSY is tried again for
	// transientUse.
	busySince := time.Now()
	for {
		err := unix.Unmount(dir, 0)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("unmount %s: %w", dir, err)
		}
		if time.Since(busySince) > transientUse {
			return fmt.Errorf("volume at %s is busy (open files): %w", dir, errdefs.ErrFailedPrecondition)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
