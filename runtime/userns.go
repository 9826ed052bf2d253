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
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/envd-dev/envd/errdefs"
)

// User namespaces (Config.UserNS, off by default).
//
// With it on, an instance runs in a user namespace that maps the
// container's ids 0..UserNSSize-1 to the node's host range
// Config.UserNSBase..+UserNSSize-1: root inside is an unprivileged id on
// the host, and its capabilities (harden.go) count only inside the
// namespace. The network namespace stays the host's (made by the runtime,
// owned by the initial user namespace), so root inside cannot change its
// own addresses, routes or firewall either.
//
// The runc this runtime targets (1.1) has no id-mapped mounts, so the
// rootfs is remapped by chown: containerd's WithUserNSRemappedSnapshot
// chowns the image's snapshot chain once per image and mapping into a
// committed parent (shared by every instance of that image on the node),
// and each instance's writable layer sits on it. That copy-up reads every
// file, so through the stargz snapshotter it would fetch the whole image:
// with UserNS on, images are pulled in full for overlayfs (lazy.go), and
// lazy restore is lost. The upper dir then holds shifted ids: a save maps
// them back with the instance's LabelUserNS (snapshotter.IDShift), so
// layers record the container's ids. Containers with InstanceSpec.HostIDs
// run without a user namespace, hardened as before.
//
// Bind mounts keep their host owners: a host file owned by root is
// "nobody" inside and cannot be changed. A Mount with Owned (envd's
// volumes) has its top directory given to the instance's root when it is
// still owned by host root; files already in it keep their owners.

// UserNSSize is how many ids an instance's user namespace maps.
const UserNSSize = 65536

// defaultUserNSBase is the first host id of the default range: far above
// the ids useradd hands out to users and to /etc/subuid ranges.
const defaultUserNSBase = 1 << 30

// LabelUserNS is the container label recording an instance's mapping,
// "BASE:SIZE" of the host range container id 0 maps to.
const LabelUserNS = "envd.userns"

// UserNS reports whether instances run in a user namespace, and the host id
// the instances' root maps to.
func (r *Runtime) UserNS() (hostRoot uint32, on bool) {
	return r.cfg.UserNSBase, r.cfg.UserNS
}

func (r *Runtime) idMaps() []specs.LinuxIDMapping {
	return []specs.LinuxIDMapping{{ContainerID: 0, HostID: r.cfg.UserNSBase, Size: UserNSSize}}
}

func (r *Runtime) usernsLabel() string {
	return strconv.FormatUint(uint64(r.cfg.UserNSBase), 10) + ":" + strconv.Itoa(UserNSSize)
}

// usernsOpts are the container and spec options of a user namespace
// instance of img: the remapped snapshot and the mapping.
func (r *Runtime) usernsOpts(id string, img client.Image) (client.NewContainerOpts, oci.SpecOpts) {
	m := r.idMaps()
	return client.WithUserNSRemappedSnapshot(id, img, m, m), oci.Compose(oci.WithUserNamespace(m, m), withUserNSPath(r.net.usernsPath(id)))
}

// withUserNSPath makes the instance join the user namespace pinned at path
// (made with its network namespace at each start, network.go) instead of
// creating one: the network namespace is owned by it, so runc can enter
// both at create and at every exec, and sysfs can be mounted. runc writes
// no mapping for a joined namespace, but wants the spec's mappings.
func withUserNSPath(path string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		for i, ns := range s.Linux.Namespaces {
			if ns.Type == specs.UserNamespace {
				s.Linux.Namespaces[i].Path = path
			}
		}
		return nil
	}
}

// giveToRoot chowns path (not following a symlink) to the instance's root
// when it is owned by host root, so a volume is writable inside.
func (r *Runtime) giveToRoot(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("mount source %s: %w", path, errdefs.ErrInvalidArgument)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 || st.Gid != 0 {
		return nil
	}
	root := int(r.cfg.UserNSBase)
	if err := os.Lchown(path, root, root); err != nil {
		return fmt.Errorf("give mount source %s to the instance's root: %w", path, err)
	}
	return nil
}

// chownInstanceFiles gives the instance files bound into the container
// (resolv.conf, hosts, hostname) to the instance's root, which may rewrite
// them as it may without a user namespace. Rewrites at each start keep the
// owner (they write in place).
func (r *Runtime) chownInstanceFiles(id string) error {
	root := int(r.cfg.UserNSBase)
	for _, name := range []string{"resolv.conf", "hosts", "hostname"} {
		if err := os.Lchown(filepath.Join(r.instanceDir(id), name), root, root); err != nil {
			return fmt.Errorf("instance file %s of %q: %w", name, id, err)
		}
	}
	return nil
}

func (n *network) usernsPath(id string) string { return filepath.Join(n.nsDir, id+".user") }

// pinUserNS makes a user namespace with idmap (for both uids and gids) and
// a network namespace owned by it, and pins them by bind mounts at userns
// and netPath (both existing files). A child process makes them: a Go
// process cannot enter a new user namespace itself.
func pinUserNS(userns, netPath string, idmap []specs.LinuxIDMapping) (retErr error) {
	f, err := os.OpenFile(userns, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	defer func() {
		if retErr != nil {
			_ = removeNSFile(userns)
		}
	}()
	var maps []syscall.SysProcIDMap
	for _, m := range idmap {
		maps = append(maps, syscall.SysProcIDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)})
	}
	// cat waits for its stdin to close: it holds the namespaces until
	// both are bind-mounted.
	cmd := exec.Command("cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET,
		UidMappings: maps,
		GidMappings: maps,
		// Go writes "deny" to setgroups otherwise, and that is final for
		// the namespace: apt's sandbox (setgroups to _apt) would fail.
		GidMappingsEnableSetgroups: true,
		Pdeathsig:                  syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("user namespace: %w", err)
	}
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	for _, p := range [][2]string{{"user", userns}, {"net", netPath}} {
		src := fmt.Sprintf("/proc/%d/ns/%s", cmd.Process.Pid, p[0])
		if err := unix.Mount(src, p[1], "none", unix.MS_BIND, ""); err != nil {
			if p[0] == "net" {
				return fmt.Errorf("pin network namespace: %w", err)
			}
			return fmt.Errorf("pin user namespace: %w", err)
		}
	}
	return nil
}

// removeNSFile unmounts a pinned namespace file and removes it; a missing
// one is not an error.
func removeNSFile(path string) error {
	if err := unix.Unmount(path, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return err
	}
	if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// ParseUserNSLabel is the mapping recorded in an instance's LabelUserNS:
// the instance keeps the one it was made with (its remapped layer is owned
// by it), also when the node's range changes; a save shifts its upper dir's
// ids back with it.
func ParseUserNSLabel(v string) ([]specs.LinuxIDMapping, error) {
	b, sz, ok := strings.Cut(v, ":")
	base, err1 := strconv.ParseUint(b, 10, 32)
	size, err2 := strconv.ParseUint(sz, 10, 32)
	if !ok || err1 != nil || err2 != nil || size == 0 {
		return nil, fmt.Errorf("user namespace label %q: %w", v, errdefs.ErrInvalidArgument)
	}
	return []specs.LinuxIDMapping{{ContainerID: 0, HostID: uint32(base), Size: uint32(size)}}, nil
}
