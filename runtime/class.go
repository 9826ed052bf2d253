package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/containerd/v2/plugins"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// Runtime classes.
//
// Terms:
//   - class: how an instance's processes are run. ClassRunc: runc, the
//     node's kernel shared by every instance behind seccomp, capabilities,
//     namespaces and cgroups (harden.go). ClassGVisor: gVisor's user-space
//     kernel (runsc), a second wall: the instance's system calls are served
//     by a sentry of its own, which itself runs under a strict seccomp
//     filter on the node's kernel.
//   - available: a class this node can run. runc always; gVisor when runsc
//     is installed (Config.GVisorDir) and a probe sandbox ran on it
//     (Classes).
//   - node default: the class of an InstanceSpec that names none
//     (Config.DefaultClass). The class an instance was made with is kept on
//     its container (LabelClass) and holds for all its starts.
//
// A gVisor instance runs through the same containerd and the same runc
// shim (containerd-shim-runc-v2) with runsc as the shim's OCI binary: runsc
// takes runc's command lines. gVisor's own shim does not start on nodes
// without CAP_SYS_RESOURCE (docs/gvisor.md). runsc's flags are given by a
// wrapper script the runtime writes into StateDir (gvisorFlags): the runc
// shim's Options have a binary name and no arguments, and runsc's
// per-container flag annotations would need --allow-flag-override, which
// would let any spec change any flag.
type Class string

const (
	ClassRunc   Class = "runc"
	ClassGVisor Class = "gvisor"
)

// LabelClass is the container label holding an instance's Class.
// Containers made before classes existed have none: runc.
const LabelClass = "envd.runtime-class"

// DefaultGVisorDir is where scripts/setup.sh installs runsc.
const DefaultGVisorDir = "/usr/local/lib/envd/gvisor"

// ErrClassUnavailable is in the error of a Create that names a class this
// node cannot run (with errdefs.ErrFailedPrecondition).
var ErrClassUnavailable = errors.New("runtime class not available on this node")

// ErrNotOnClass is in the error of a request for a feature the instance's
// class does not support (with errdefs.ErrFailedPrecondition); it is
// returned before anything is made or started.
var ErrNotOnClass = errors.New("not supported on this runtime class")

// ParseClass checks a class name; "" is "" (the node default).
func ParseClass(s string) (Class, error) {
	switch c := Class(s); c {
	case "", ClassRunc, ClassGVisor:
		return c, nil
	}
	return "", fmt.Errorf("runtime class %q: one of %q, %q: %w", s, ClassRunc, ClassGVisor, errdefs.ErrInvalidArgument)
}

// gvisorFlags are the runsc flags of every gVisor instance, before the
// runc shim's own:
//   - --overlay2=none: writes to "/" go through to the container's
//     overlayfs upper dir, which saves, retained layers and disk limits
//     read; runsc's default keeps them in the sandbox's memory file;
//   - --host-uds=open: the exec agent (agents.go) connects to the socket
//     envd listens on in the instance's agent directory; only sockets
//     inside the instance's bind mounts can be reached this way;
//   - --file-access=shared: the sandbox revalidates what it cached of the
//     root file system, so files the node writes there (file API, SFTP,
//     archives in) are seen inside at once; with runsc's default
//     (exclusive) a name the instance had looked up and not found stayed
//     missing after the node made it;
//   - --oci-seccomp: the spec's seccomp profile (containerd's default, as
//     for runc; harden.go) is enforced inside the sandbox too, so what it
//     refuses on runc (keyctl, unshare of a user namespace, ...) is refused
//     on gVisor, whose sentry otherwise implements those calls itself.
//
// Network is runsc's default, --network=sandbox: gVisor's netstack takes
// the namespace's veth, so the bridge, its isolation and the firewall
// rules apply as for runc.
var gvisorFlags = []string{"--overlay2=none", "--file-access=shared", "--host-uds=open", "--oci-seccomp"}

// gvisorCheckpointFlags are extra flags of runsc's checkpoint subcommand
// (the runc shim passes only its own: --image-path, --leave-running).
// None by default. Tried: --exclude-committed-zero-pages (runsc also scans
// committed pages and leaves the zero ones out of pages.img): on a 256 MiB
// resident instance the image was as large with it as without (301-375 MB
// over three checkpoints either way: what grows is not zero pages) and the
// freeze no shorter (busy machine; docs/notes/running-state.md). gVisor's
// own note: it usually makes the save slower unless the program has many
// committed zero pages. Compression is already off at this pin (runsc's
// default --compression=none).
//
// ENVD_GVISOR_CHECKPOINT_FLAGS, if set, replaces them (space-separated),
// for comparing them with the bench's checkpoint-memory scenario.
var gvisorCheckpointFlags []string

func checkpointFlags() []string {
	if v, ok := os.LookupEnv("ENVD_GVISOR_CHECKPOINT_FLAGS"); ok {
		return strings.Fields(v)
	}
	return gvisorCheckpointFlags
}

// gvisor is the node's gVisor class.
type gvisor struct {
	runsc   string // the installed binary
	wrapper string // StateDir/gvisor/runsc: runsc with gvisorFlags
	root    string // runsc's state root (the runc shim's Root)

	once sync.Once
	err  error // why the class is unavailable; set by probe
}

func gvisorDir(configured string) string {
	if configured != "" {
		return configured
	}
	if d := os.Getenv("ENVD_GVISOR_DIR"); d != "" {
		return d
	}
	return DefaultGVisorDir
}

// setupClasses finds runsc and writes the wrapper. A node without runsc
// has only runc; that is not an error unless gVisor is the default.
func (r *Runtime) setupClasses() error {
	g := &gvisor{
		runsc:   filepath.Join(gvisorDir(r.cfg.GVisorDir), "runsc"),
		wrapper: filepath.Join(r.cfg.StateDir, "gvisor", "runsc"),
		root:    filepath.Join(r.cfg.StateDir, "runsc"),
	}
	r.gvisor = g
	if !isExecutable(g.runsc) {
		g.once.Do(func() {
			g.err = fmt.Errorf("runsc not installed at %s (scripts/setup.sh --tests installs it): %w: %w", g.runsc, ErrClassUnavailable, errdefs.ErrFailedPrecondition)
		})
		return nil
	}
	for _, d := range []string{filepath.Dir(g.wrapper), g.root} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("gvisor state dir: %w", err)
		}
	}
	script := GVisorWrapper(g.runsc, checkpointFlags())
	tmp := g.wrapper + ".tmp"
	if err := os.WriteFile(tmp, []byte(script), 0o700); err != nil {
		return fmt.Errorf("runsc wrapper: %w", err)
	}
	if err := os.Rename(tmp, g.wrapper); err != nil {
		return fmt.Errorf("runsc wrapper: %w", err)
	}
	return nil
}

// RestoreInBackground is the name of a file that, present in an image
// directory a gVisor task restores from, makes the restore return once the
// kernel state and page metadata are loaded: the sandbox runs while its
// memory pages are still read (runsc restore --background; reads of pages
// not yet loaded wait for them). A lazy image directory
// (registry/memimage/lazyfs) holds it; a page that cannot be read then
// kills the sandbox after the start instead of failing it.
const RestoreInBackground = ".envd-restore-background"

// GVisorWrapper is the script instances run runsc through (the runc
// shim's options have no argument list): runsc with gvisorFlags and the
// shim's arguments unchanged, but for two additions right after the
// subcommand, each only there and only once:
//   - --background after "restore" when the restore's --image-path holds
//     RestoreInBackground (go-runc passes "--image-path DIR" as two
//     arguments);
//   - the checkpoint flags after "checkpoint" (the shim's global flags
//     before the subcommand are --root, --log, --log-format and their
//     values, none of which is that word here: envd chooses the paths).
func GVisorWrapper(runsc string, checkpoint []string) string {
	quoted := make([]string, len(checkpoint))
	for i, f := range checkpoint {
		quoted[i] = shellQuote(f)
	}
	var b strings.Builder
	b.WriteString(`#!/bin/sh
bg=
prev=
for a do
	if [ "$prev" = --image-path ] && [ -e "$a/` + RestoreInBackground + `" ]; then bg=1; fi
	prev=$a
done
seen=
for a do
	shift
	set -- "$@" "$a"
	if [ -z "$seen" ]; then
		if [ -n "$bg" ] && [ "$a" = restore ]; then seen=1; set -- "$@" --background; fi
`)
	if len(quoted) > 0 {
		b.WriteString("\t\tif [ \"$a\" = checkpoint ]; then seen=1; set -- \"$@\" " + strings.Join(quoted, " ") + "; fi\n")
	}
	b.WriteString("\tfi\ndone\nexec " + shellQuote(runsc) + " " + strings.Join(gvisorFlags, " ") + ` "$@"` + "\n")
	return b.String()
}

// probe runs a sandbox once with the instances' flags: a runsc that is
// installed but cannot run here (a cgo build, a kernel without what its
// platform needs) makes the class unavailable with runsc's reason.
func (g *gvisor) probe(ctx context.Context) error {
	g.once.Do(func() {
		dir, err := os.MkdirTemp(g.root, "probe-")
		if err != nil {
			g.err = fmt.Errorf("gvisor probe: %w", err)
			return
		}
		defer func() {
			// runsc pins an empty network namespace for its gofers here.
			for unix.Unmount(filepath.Join(dir, "null-netns"), unix.MNT_DETACH) == nil {
			}
			_ = os.RemoveAll(dir)
		}()
		pctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		// The instances' flags but --file-access=shared, which `runsc do`
		// refuses next to the overlay it puts on the node's root.
		args := []string{"--root", dir, "--network=none"}
		for _, f := range gvisorFlags {
			if !strings.HasPrefix(f, "--file-access=") {
				args = append(args, f)
			}
		}
		out, err := exec.CommandContext(pctx, g.runsc, append(args, "do", "true")...).CombinedOutput()
		if err != nil {
			g.err = fmt.Errorf("runsc at %s cannot run a sandbox here: %v: %s: %w: %w", g.runsc, err,
				strings.TrimSpace(lastLine(string(out))), ErrClassUnavailable, errdefs.ErrFailedPrecondition)
		}
	})
	return g.err
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// Classes returns the classes this node can run, runc first. The first
// call probes gVisor (about a second); later calls answer at once.
func (r *Runtime) Classes(ctx context.Context) []Class {
	out := []Class{ClassRunc}
	if r.gvisor.probe(ctx) == nil {
		out = append(out, ClassGVisor)
	}
	return out
}

// ClassErr says why class cannot run on this node; nil when it can.
func (r *Runtime) ClassErr(ctx context.Context, class Class) error {
	switch class {
	case ClassRunc:
		return nil
	case ClassGVisor:
		return r.gvisor.probe(ctx)
	}
	_, err := ParseClass(string(class))
	return err
}

// DefaultClass is the class of instances whose spec names none.
func (r *Runtime) DefaultClass() Class { return r.cfg.DefaultClass }

// resolveClass is the class spec asks for, the node default if none,
// refused (ErrClassUnavailable) if this node cannot run it or
// (ErrNotOnClass) if spec asks for what the class does not do.
func (r *Runtime) resolveClass(ctx context.Context, spec InstanceSpec) (Class, error) {
	class, err := ParseClass(string(spec.Class))
	if err != nil {
		return "", err
	}
	if class == "" {
		class = r.cfg.DefaultClass
	}
	if err := r.ClassErr(ctx, class); err != nil {
		return "", fmt.Errorf("instance %q: %w", spec.ID, err)
	}
	if class == ClassGVisor && r.cfg.UserNS && !spec.HostIDs {
		// gVisor's sentry is the instance's kernel: root inside is
		// already not the node's root. runsc's support for the spec's
		// id mappings with a pre-made network namespace is not tried.
		return "", fmt.Errorf("instance %q: user namespaces (the node's --userns): %w: %w", spec.ID, ErrNotOnClass, errdefs.ErrFailedPrecondition)
	}
	if spec.Docker {
		if err := CheckDocker(class); err != nil {
			return "", fmt.Errorf("instance %q: %w", spec.ID, err)
		}
	}
	return class, nil
}

// runtimeOpt is the containerd runtime of class: runc's shim with runc's
// state under StateDir (the shim's default root,
// /run/containerd/runc/<namespace>, would be shared with every other
// daemon on the machine using the same namespace), or with runsc (through
// its wrapper) as the binary and runsc's state under StateDir.
func (r *Runtime) runtimeOpt(class Class) client.NewContainerOpts {
	if class == ClassGVisor {
		return client.WithRuntime(plugins.RuntimeRuncV2, &options.Options{BinaryName: r.gvisor.wrapper, Root: r.gvisor.root})
	}
	return client.WithRuntime(plugins.RuntimeRuncV2, &options.Options{Root: r.runcRoot})
}

// InstanceClass is the class instance id was made with.
func (r *Runtime) InstanceClass(ctx context.Context, id string) (Class, error) {
	info, err := r.containerInfo(r.ctx(ctx), id)
	if err != nil {
		return "", err
	}
	return classOf(info.Labels), nil
}

func classOf(labels map[string]string) Class {
	if c := Class(labels[LabelClass]); c != "" {
		return c
	}
	return ClassRunc
}

// releaseGVisor unmounts the empty network namespaces runsc pins under its
// root for its gofers (ROOT/NAMESPACE/null-netns, one per concurrent
// first creation, left after the last sandbox) once no gVisor instance of
// the namespace has a task, so Remove leaves no mount behind.
func (r *Runtime) releaseGVisor(ctx context.Context) {
	// Also after the caller's deadline: a mount left here outlives envd.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	cs, err := r.client.Containers(ctx, fmt.Sprintf("labels.%q==%q", LabelClass, ClassGVisor))
	if err != nil {
		return
	}
	for _, c := range cs {
		if _, err := c.Task(ctx, nil); err == nil {
			return
		}
	}
	p := filepath.Join(r.gvisor.root, r.cfg.Namespace, "null-netns")
	for unix.Unmount(p, unix.MNT_DETACH) == nil {
	}
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// withKill is client.WithProcessKill for a task whose process may have
// exited already: runc answers the kill of a stopped container with "not
// found", which WithProcessKill ignores, but runsc answers "sandbox is not
// running" (an unknown error through the runc shim). A kill that fails on
// a process that has stopped is what both mean.
func withKill(ctx context.Context, p client.Process) error {
	err := client.WithProcessKill(ctx, p)
	if err != nil {
		if st, serr := p.Status(ctx); serr == nil && st.Status == client.Stopped {
			return nil
		}
	}
	return err
}

// gvisorSandboxPids is about what a gVisor sandbox holds in host pids
// before its processes: the sentry's and the gofer's threads (46-47 at
// idle on a 2-core node, measured).
const gvisorSandboxPids = 128

// gvisorHostPids is the host pids limit of a gVisor instance whose tenant
// limit is pids. The host cgroup holds the sandbox, not the instance's
// processes: each of them costs one host stub process (systrap) and the
// sentry adds threads as they run (20 sleeping processes added 43 host
// pids, 100 more added 113). Past the host limit the sentry cannot go on
// and the instance stops (exit 137) instead of a fork failing inside; the
// limit bounds what a sandbox takes from the node.
func gvisorHostPids(pids int64) int64 { return 2*pids + gvisorSandboxPids }

// goferPid is the pid of runsc's gofer of gVisor instance id, 0 if none
// runs. The gofer serves the sandbox its files: its root is the
// container's root file system with the instance's bind mounts, as the
// instance sees them, which the sandbox process's root (an empty
// directory of runsc's) is not. It is found by its command line, which
// names this runtime's runsc root and the container id.
func (r *Runtime) goferPid(id string) uint32 {
	root := "--root=" + filepath.Join(r.gvisor.root, r.cfg.Namespace)
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.HasPrefix(b, []byte("runsc-gofer\x00")) {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if args[len(args)-1] == id && slices.Contains(args, root) && slices.Contains(args, "gofer") {
			return uint32(pid)
		}
	}
	return 0
}

// gvisorTmpAnchorPath is where a gVisor instance gets an empty read-only
// directory, so that its /tmp stays the writable layer's, as on runc.
const gvisorTmpAnchorPath = "/tmp/.envd"

// gvisorTmpAnchor is the mount that keeps a gVisor instance's /tmp in its
// root file system. runsc mounts a tmpfs of the sandbox over an empty /tmp
// that no spec mount is under: files there would be in the sandbox's
// memory only, invisible to the file API and SFTP, absent from the upper
// dir that saves and retained layers read, and lost at Stop. A mount point
// under /tmp makes it not empty to runsc.
func (r *Runtime) gvisorTmpAnchor(id string) (specs.Mount, error) {
	dir := filepath.Join(r.instanceDir(id), "tmp-anchor")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return specs.Mount{}, fmt.Errorf("instance %q: %w", id, err)
	}
	return bindMount(dir, gvisorTmpAnchorPath, true), nil
}

// withGVisorClone3 lets a gVisor instance call clone3. containerd's default
// profile answers clone3 with ENOSYS (errnoRet), so that glibc (2.34 and
// later) falls back to clone, whose flags the profile can check. runsc's
// --oci-seccomp ignores errnoRet and answers EPERM, on which glibc does not
// fall back: every pthread_create failed inside (dpkg-deb's xz decoder:
// "lzma error: Cannot allocate memory", Python: "can't start new
// thread"). On gVisor clone3 is served by the sandbox's own kernel, and
// the namespaces it could make are that kernel's, never the node's.
func withGVisorClone3() oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *specs.Spec) error {
		if s.Linux == nil || s.Linux.Seccomp == nil {
			return nil
		}
		for i, sc := range s.Linux.Seccomp.Syscalls {
			if sc.Action == specs.ActErrno && slices.Contains(sc.Names, "clone3") {
				s.Linux.Seccomp.Syscalls[i].Action, s.Linux.Seccomp.Syscalls[i].ErrnoRet = specs.ActAllow, nil
			}
		}
		return nil
	}
}
