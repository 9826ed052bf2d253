package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/envd-dev/envd/errdefs"
)

// Hardening of every instance (and so of every build and trial container):
//
//   - capabilities: Docker's default set without CAP_NET_RAW (raw sockets,
//     ARP spoofing on the bridge) and CAP_MKNOD (device nodes). Root inside
//     keeps CHOWN, DAC_OVERRIDE, FOWNER, FSETID, SETUID, SETGID, SETPCAP,
//     SETFCAP, KILL, NET_BIND_SERVICE, SYS_CHROOT, AUDIT_WRITE: enough for
//     apt's _apt sandbox, dpkg, compilers and root's sudo;
//   - containerd's default seccomp profile (built for those capabilities:
//     no keyctl, no unshare of a user namespace, no mount, no bpf ...);
//   - no_new_privs, unless InstanceSpec.AllowPrivilegeEscalation: with it a
//     setuid binary (sudo run by a non-root user) cannot gain privileges;
//   - a cgroup namespace: the instance sees its own cgroup as the root, and
//     its cgroup files read-only at /sys/fs/cgroup;
//   - Docker's masked and read-only /proc and /sys paths;
//   - oom_score_adj instanceOOMScoreAdj, so under memory pressure of the
//     whole node the kernel kills a tenant's process before envd,
//     PostgreSQL, containerd or the snapshotter.
var (
	instanceCaps = []string{
		"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_SETGID", "CAP_SETUID",
		"CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
	}
	maskedPaths = []string{
		"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap",
	}
	readonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
)

// instanceOOMScoreAdj is every instance process's oom_score_adj. Raising it
// needs no privilege (lowering envd's own below 0 needs CAP_SYS_RESOURCE,
// which some hosts lack), so the node is protected by ranking tenants first.
const instanceOOMScoreAdj = 500

// hardenOpts are the spec options of hardening; caps must be set before
// the seccomp profile, which is derived from them.
func hardenOpts(spec InstanceSpec) []oci.SpecOpts {
	// Copies of the package's lists: containerd's options assign the slice
	// itself, and a later option that edits the spec's list in place
	// (withDocker drops /proc/sys) would edit every later instance's.
	opts := []oci.SpecOpts{
		oci.WithCapabilities(slices.Clone(instanceCaps)),
		seccomp.WithDefaultProfile(),
		oci.WithMaskedPaths(slices.Clone(maskedPaths)),
		oci.WithReadonlyPaths(slices.Clone(readonlyPaths)),
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.CgroupNamespace}),
		// The instance's own cgroups, read-only, so a tenant can read its
		// limits (containerd's default spec mounts none).
		oci.WithMounts([]specs.Mount{{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup",
			Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}}}),
		withOOMScoreAdj(instanceOOMScoreAdj),
	}
	if spec.Class == ClassGVisor {
		opts = append(opts, withGVisorClone3())
	}
	if spec.Docker && spec.Class == ClassGVisor { // resolveClass refuses it on any other class
		opts = append(opts, withDocker())
	}
	return append(opts, withNoNewPrivileges(!spec.AllowPrivilegeEscalation))
}

// hardening is every hardening and limit option of spec.
func (r *Runtime) hardening(spec InstanceSpec) oci.SpecOpts {
	if r.unhardened {
		return oci.Compose()
	}
	return oci.Compose(append(hardenOpts(spec), withLimits(spec.Limits, r.cgroups, spec.Class))...)
}

// withNoNewPrivileges sets no_new_privs explicitly: containerd's default
// spec turns it on.
func withNoNewPrivileges(on bool) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		s.Process.NoNewPrivileges = on
		return nil
	}
}

func withOOMScoreAdj(adj int) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		s.Process.OOMScoreAdj = &adj
		return nil
	}
}

// cgroupSupport says which resource limits the host's cgroups can apply.
// On cgroup v1 without BFQ's weight file (blkio.weight absent, as on
// many VMs with the none/mq-deadline scheduler) an IO weight cannot be set:
// runc would fail the start, so the weight is left out (a documented
// no-op, logged by the caller via IOWeightApplied).
type cgroupSupport struct {
	unified  bool // cgroup v2 only
	ioWeight bool
	memsw    bool // v1 swap accounting: memory+swap limit
}

func detectCgroups() cgroupSupport {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		_, io := os.Stat("/sys/fs/cgroup/io.weight")
		ctrl, _ := os.ReadFile("/sys/fs/cgroup/cgroup.controllers")
		return cgroupSupport{unified: true, ioWeight: io == nil || containsWord(string(ctrl), "io"), memsw: true}
	}
	var cs cgroupSupport
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/blkio", "blkio.weight")); err == nil {
		cs.ioWeight = true
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", "memory.memsw.limit_in_bytes")); err == nil {
		cs.memsw = true
	}
	return cs
}

func containsWord(s, w string) bool { return slices.Contains(strings.Fields(s), w) }

// Validate refuses limits outside what the kernel accepts.
func (l Limits) Validate() error {
	switch {
	case l.MemoryBytes < 0 || (l.MemoryBytes > 0 && l.MemoryBytes < 6<<20):
		return fmt.Errorf("memory limit %d: at least 6 MiB, or 0 for none: %w", l.MemoryBytes, errdefs.ErrInvalidArgument)
	case l.Pids < 0 || (l.Pids > 0 && l.Pids < 8):
		return fmt.Errorf("pids limit %d: at least 8, or 0 for none: %w", l.Pids, errdefs.ErrInvalidArgument)
	case l.CPUWeight > 10000:
		return fmt.Errorf("cpu weight %d: 1-10000, or 0 for the default: %w", l.CPUWeight, errdefs.ErrInvalidArgument)
	case l.CPUQuota < 0 || (l.CPUQuota > 0 && l.CPUQuota < 0.01):
		return fmt.Errorf("cpu quota %g: at least 0.01 cores, or 0 for none: %w", l.CPUQuota, errdefs.ErrInvalidArgument)
	case l.IOWeight != 0 && (l.IOWeight < 10 || l.IOWeight > 1000):
		return fmt.Errorf("io weight %d: 10-1000, or 0 for the default: %w", l.IOWeight, errdefs.ErrInvalidArgument)
	case l.DiskBytes < 0 || (l.DiskBytes > 0 && l.DiskBytes < minDiskBytes):
		return fmt.Errorf("disk limit %d bytes: at least %d (32 MiB), or 0 for none: %w", l.DiskBytes, int64(minDiskBytes), errdefs.ErrInvalidArgument)
	}
	return nil
}

// cfsPeriod is the CPU quota's period in microseconds.
const cfsPeriod = 100000

// cpuShares maps a cgroup v2 weight (1-10000) to v1 shares (2-262144) by
// the inverse of runc's shares-to-weight conversion, so a weight reads the
// same on either hierarchy (runc converts the shares back on v2).
func cpuShares(weight uint64) uint64 {
	if weight == 0 {
		return 0
	}
	return 2 + ((weight-1)*262142)/9999
}

// withLimits sets l in the spec's resources (DiskBytes is not a cgroup
// limit: the writable layer's mechanism applies it). Limits the host cannot
// apply are left out (see cgroupSupport). On ClassGVisor the cgroup is the
// whole sandbox's (its kernel, file proxy and the host stubs of its
// processes): see gvisorHostPids.
func withLimits(l Limits, cs cgroupSupport, class Class) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		if s.Linux.Resources == nil {
			s.Linux.Resources = &specs.LinuxResources{}
		}
		res := s.Linux.Resources
		if l.MemoryBytes > 0 {
			m := l.MemoryBytes
			res.Memory = &specs.LinuxMemory{Limit: &m}
			if cs.memsw {
				swap := l.MemoryBytes // memory+swap = memory: no swap
				res.Memory.Swap = &swap
			}
		}
		if l.Pids > 0 {
			p := l.Pids
			if class == ClassGVisor {
				p = gvisorHostPids(p)
			}
			res.Pids = &specs.LinuxPids{Limit: &p}
		}
		if l.CPUWeight > 0 || l.CPUQuota > 0 {
			res.CPU = &specs.LinuxCPU{}
			if l.CPUWeight > 0 {
				sh := cpuShares(l.CPUWeight)
				res.CPU.Shares = &sh
			}
			if l.CPUQuota > 0 {
				q, p := int64(l.CPUQuota*cfsPeriod), uint64(cfsPeriod)
				res.CPU.Quota, res.CPU.Period = &q, &p
			}
		}
		if l.IOWeight > 0 && cs.ioWeight {
			w := l.IOWeight
			res.BlockIO = &specs.LinuxBlockIO{Weight: &w}
		}
		return nil
	}
}

// IOWeightApplied reports whether an IO weight is applied on this host;
// without it Limits.IOWeight is accepted and ignored.
func (r *Runtime) IOWeightApplied() bool { return r.cgroups.ioWeight }
