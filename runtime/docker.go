package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/envd-dev/envd/errdefs"
)

// Docker inside an instance (InstanceSpec.Docker).
//
// Terms:
//   - docker instance: an instance in which the tenant may run dockerd (or
//     any container engine: BuildKit, podman) and nested containers.
//   - nested container: a container that engine makes inside the instance.
//
// Only ClassGVisor runs docker instances. dockerd needs CAP_SYS_ADMIN
// (mounts, namespaces, cgroups), CAP_NET_ADMIN and system calls that
// containerd's default profile refuses (keyctl for runc's session keyring,
// mount, unshare); on runc those are the node's kernel's, and with them a
// tenant can leave a shared-kernel container. On gVisor they are granted by
// the sandbox's own kernel (the sentry) and reach only it: the node sees
// the same sandbox as for any gVisor instance (the sentry under runsc's own
// host seccomp filter, its file proxy, no added host capability), and every
// nested container is a set of processes of that sentry, under the
// instance's cgroup limits. A docker instance differs from a gVisor
// instance in what it is allowed inside that kernel only (withDocker):
//   - every capability, for the instance's processes in the sandbox;
//   - no OCI seccomp profile (runsc's --oci-seccomp then filters nothing):
//     nested runc joins a session keyring and mounts; the sentry's own
//     host-side filter is unchanged;
//   - /proc/sys writable (dockerd sets ip_forward of the sandbox's
//     network stack) and its cgroups writable (gVisor's cgroupfs: nested
//     containers' cgroups are inside the instance's own limits);
//   - a tmpfs of the sandbox at DockerDataPath: gVisor's overlayfs takes
//     only tmpfs as an upper layer, so dockerd's overlay2 driver needs one.
//     Images and nested containers live in the instance's memory (counted
//     in its memory limit), are never in a save or retained layer, and are
//     gone after a stop.
//
// Not granted: raw sockets (runsc's --net-raw stays off, so no tenant
// crafts packets on the bridge). dockerd must run with --iptables=false
// --ip6tables=false (gVisor's iptables needs raw sockets); nested
// containers on docker's bridge reach each other and the instance, not
// beyond; --network=host gives one the instance's own network.
//
// ErrDockerNeedsGVisor is in the error of a docker instance of any other
// class (with ErrNotOnClass and errdefs.ErrFailedPrecondition), returned
// before anything is made.
var ErrDockerNeedsGVisor = errors.New("docker inside an instance needs runtime class gvisor: dockerd needs privileges (CAP_SYS_ADMIN, mounts, no seccomp filter) that on runc are the node's shared kernel's, with which a tenant can leave the container")

// LabelDocker is "true" on the container of a docker instance.
const LabelDocker = "envd.docker"

// DockerDataPath is where a docker instance gets a tmpfs for dockerd.
const DockerDataPath = "/var/lib/docker"

// CheckDocker refuses docker on class unless it is ClassGVisor
// (ErrDockerNeedsGVisor with ErrNotOnClass, errdefs.ErrFailedPrecondition
// and the details feature, runtime_class, required_runtime_class). The
// runtime checks the class an instance resolved to; a project checks the
// class it names, where "" (each node's default) is refused too.
func CheckDocker(class Class) error {
	if class == ClassGVisor {
		return nil
	}
	name := string(class)
	if class == "" {
		name = "the node's default"
	}
	return errdefs.WithDetails(fmt.Errorf("runtime class %s: %w: use runtime class %s: %w: %w", name, ErrDockerNeedsGVisor, ClassGVisor, ErrNotOnClass, errdefs.ErrFailedPrecondition),
		map[string]any{"feature": "docker", "runtime_class": string(class), "required_runtime_class": string(ClassGVisor)})
}

// allCaps are the capabilities a docker instance's processes get inside
// the sandbox.
var allCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE",
	"CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT",
	"CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ",
}

// withDocker is what a docker instance gets over a gVisor instance's
// hardening (see the comment of ErrDockerNeedsGVisor). It runs after
// hardenOpts. CAP_NET_RAW in the spec gives no raw socket: runsc removes
// it unless --net-raw, which gvisorFlags leave out.
func withDocker() oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		s.Process.Capabilities = &specs.LinuxCapabilities{
			Bounding: slices.Clone(allCaps), Effective: slices.Clone(allCaps), Permitted: slices.Clone(allCaps),
		}
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		s.Linux.Seccomp = nil
		// A new list: DeleteFunc edits in place, and the spec's list may be
		// shared (it once was the package's readonlyPaths, so a docker
		// instance made /proc/sys writable in every later instance).
		s.Linux.ReadonlyPaths = slices.DeleteFunc(slices.Clone(s.Linux.ReadonlyPaths), func(p string) bool { return p == "/proc/sys" })
		for i, m := range s.Mounts {
			if m.Destination == "/sys/fs/cgroup" {
				s.Mounts[i].Options = slices.DeleteFunc(slices.Clone(m.Options), func(o string) bool { return o == "ro" })
				s.Mounts[i].Options = append(s.Mounts[i].Options, "rw")
			}
		}
		s.Mounts = append(s.Mounts, specs.Mount{Destination: DockerDataPath, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", "mode=0711"}})
		return nil
	}
}
