// Package runtime runs envd instances as containerd containers.
//
// Terms:
//   - An instance is a containerd container named by its ID, with an active
//     snapshot of the same name, overlayfs or lazy (lazy.go), (its writable layer, kept across
//     Stop/Start), a network namespace at StateDir/netns/ID attached to the
//     runtime's CNI bridge, and instance files (resolv.conf, hosts, hostname)
//     under StateDir/instances/ID.
//   - Its init task is a shell that only waits; the real work is done in exec
//     sessions (Exec). Task states are "running", "paused", "stopped", or ""
//     when the instance has no task (after Stop).
//   - Stop releases compute (the task and its network) and keeps the
//     container and snapshot; Remove deletes everything.
//   - Each instance runs on a runtime class, runc or gvisor, chosen at
//     Create and kept (class.go).
//
// Callers serialize operations on one instance ID; operations on different IDs
// may run concurrently. Errors carry envd's kinds (errdefs):
// ErrNotFound for an unknown instance or image, ErrAlreadyExists for a taken
// ID, ErrFailedPrecondition for an instance in the wrong state,
// ErrInvalidArgument for a bad spec, ErrUnavailable when containerd is down.
package runtime

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/identifiers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	cerrdefs "github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// snapshotter is the containerd snapshotter instances' writable layers use.
const snapshotter = "overlayfs"

// ioDrainGrace is how long Exec waits, after the process exits and then
// after each piece of output, for its output streams to close: a background
// child holding them open is cut off after this much quiet (it was 1 s; the
// shim's copy lagged the exit by more on a loaded node and output was lost).
const ioDrainGrace = 2 * time.Second

// initScript is the init process of every instance: it waits, and exits on
// SIGTERM. PID 1 in a PID namespace only receives signals it handles, so the
// trap is what makes a graceful Stop possible.
const initScript = `trap "exit 0" TERM; ` + PostStartHook + `while :; do sleep 3600 & wait $!; done`

// PostStartHook is the part of the init that runs the image's start hook,
// /etc/envd/post-start, when it is executable: a devcontainer.json's
// postStartCommand and postAttachCommand (builder/devcontainer writes it).
// It runs in the background at each start of a task (create, wake, start
// after stop; not a restore from a memory checkpoint, which resumes the
// processes), as the image's user, its output in /tmp/envd-post-start.log,
// so a slow or failing hook never holds or fails the start.
const PostStartHook = `if [ -x /etc/envd/post-start ]; then /etc/envd/post-start </dev/null >/tmp/envd-post-start.log 2>&1 & fi; `

// initScriptAgent is initScript for an instance with an exec agent: the
// init starts the agent first, so the first command needs no runc exec
// (agents.go). The agent is a child of the init, with everything the init
// was given, which is what a runc exec with the init's process would give
// it.
const initScriptAgent = `trap "exit 0" TERM; if [ -x ` + agentBinDest + ` ]; then ` + agentBinDest + ` ` + agentDirDest + `/` + agentSockName +
	` </dev/null >/dev/null 2>&1 & fi; ` + PostStartHook + `while :; do sleep 3600 & wait $!; done`

// Config configures a Runtime.
type Config struct {
	// Address is the containerd socket. Required.
	Address string
	// Namespace is the containerd namespace. Default: "envd".
	Namespace string
	// StateDir holds per-instance files, network namespaces, CNI state, runc
	// state and exec FIFOs. Required; absolute. Its path also names the
	// runtime's bridge, CNI network, cgroup parent and firewall chain, so two
	// runtimes with different StateDirs share none of them.
	StateDir string
	// Network is the bridge network instances join.
	Network NetworkConfig
	// PlainHTTPRegistries are host:port of registries pulled from over plain
	// HTTP (the embedded registry). Others use HTTPS.
	PlainHTTPRegistries []string
	// RegistryCredentials returns the user and password for a registry host
	// ("host:port"), sent by HTTP Basic after the registry's challenge;
	// "", "" means anonymous. Nil: anonymous everywhere.
	RegistryCredentials func(host string) (user, password string, err error)
	// StopGrace is how long Stop waits after SIGTERM before SIGKILL.
	// Default: 10s.
	StopGrace time.Duration
	// LazySnapshotter is the containerd snapshotter images with eStargz
	// layers are pulled lazily with (the stargz proxy plugin's name, e.g.
	// "stargz"); "" = every image is pulled in full for overlayfs. See
	// lazy.go.
	LazySnapshotter string
	// DisableDiskLimit ignores InstanceSpec.Limits.DiskBytes: writable
	// layers stay plain directories of the snapshotter, bounded only by the
	// node's disk. Default false: limits are honoured (disklimit.go; they
	// need mkfs.ext4 and loop devices, else a Create with one fails).
	DisableDiskLimit bool
	// DiskReserveBytes is the real free space of StateDir's filesystem
	// that Creates with a disk limit leave alone, after setting aside the
	// room limited layers may still fill divided by DiskOvercommit.
	// Default 1 GiB.
	DiskReserveBytes int64
	// DiskOvercommit is how thinly writable-layer limits are provisioned:
	// a Create sets aside 1/DiskOvercommit of the room every limited layer
	// may still fill, not all of it (disklimit.go). 1 = every limit fully
	// reserved. Default DefaultDiskOvercommit.
	DiskOvercommit float64
	// Unrestricted is for benchmarks only: it turns off the hardening
	// (harden.go), the resource limits and the network rules (isolated
	// bridge ports, firewall chains) of every instance, so their cost can
	// be measured against a baseline. Never set it on a node tenants use.
	Unrestricted bool
	// UserNS runs instances in a user namespace (userns.go): root inside
	// is an unprivileged host id. Its cost: the image's files are chowned
	// once per image and mapping into a remapped snapshot, so images are
	// pulled in full (no lazy restore). Saves shift the layer's ids back
	// (LabelUserNS). Default off.
	UserNS bool
	// UserNSBase is the host id the instances' root maps to with UserNS;
	// UserNSSize ids from it are theirs. Default 1<<30.
	UserNSBase uint32
	// AgentBinary is the static envd-agent program instances run their
	// commands through (agents.go). Default: $ENVD_AGENT_BINARY, else
	// envd-agent in $ENVD_BIN_DIR,
	// beside the running program, or in /usr/local/lib/envd/bin; none
	// found: every exec is a runc exec (AgentsOff says why).
	AgentBinary string
	// NoAgents turns exec agents off: every exec is a runc exec.
	NoAgents bool
	// DefaultClass is the runtime class (class.go) of instances whose
	// spec names none. Default ClassRunc. ClassGVisor makes New fail
	// (ErrClassUnavailable) when gVisor cannot run on this node.
	DefaultClass Class
	// GVisorDir holds runsc. Default: $ENVD_GVISOR_DIR, else
	// DefaultGVisorDir (where scripts/setup.sh installs it).
	GVisorDir string
	// ShimGroupSize is how many instances of one InstanceSpec.ShimGroup
	// share a shim process at most (shimgroup.go); 1 = a shim per
	// instance. Default DefaultShimGroupSize.
	ShimGroupSize int
}

// Runtime creates and drives instances on one containerd.
type Runtime struct {
	cfg Config
	// pulls joins concurrent Pulls of one ref (pullJoined).
	pullMu   sync.Mutex
	pulls    map[string]*pullCall
	client   *client.Client
	net      *network
	scope    string // hex hash of StateDir
	runcRoot string
	fifoDir  string
	lazyErr  error // why LazySnapshotter was turned off
	cgroups  cgroupSupport
	ooms     oomLog
	agents   *agents
	// egressCAMu serializes the writes of the egress CA's files (egressCA).
	egressCAMu sync.Mutex
	// cgroupMu: task creations hold it shared while runc makes the
	// instance's cgroup under /envd-SCOPE/NAMESPACE; removeCgroupParents
	// holds it alone, so it never removes a parent runc is creating a
	// child in (runc's cpuset setup makes each level in turn and failed
	// with ENOENT when a removal's rmdir came between them).
	cgroupMu sync.RWMutex

	diskErr error      // why disk limits cannot be honoured; see disklimit.go
	mkfs    string     // mkfs.ext4
	diskMu  sync.Mutex // orders disk room checks, mounts and unmounts
	// unhardened leaves hardening and limits out; set only by the
	// benchmark that measures their cost.
	unhardened bool
	gvisor     *gvisor // the gVisor class (class.go)
	groups     shimGroups
	gates      shimGates // orders a group's task creates and deletes (shimgate.go)
}

// New connects to containerd at cfg.Address and prepares the instance
// network (bridge config, IP forwarding, host isolation rules).
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.Address == "" {
		return nil, fmt.Errorf("runtime address is empty: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir) {
		return nil, fmt.Errorf("runtime state dir %q must be absolute: %w", cfg.StateDir, errdefs.ErrInvalidArgument)
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "envd"
	}
	if err := identifiers.Validate(cfg.Namespace); err != nil {
		return nil, fmt.Errorf("namespace %q: %w", cfg.Namespace, errdefs.ErrInvalidArgument)
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = 10 * time.Second
	}
	if cfg.DiskReserveBytes <= 0 {
		cfg.DiskReserveBytes = defaultDiskReserve
	}
	if cfg.DiskOvercommit == 0 {
		cfg.DiskOvercommit = DefaultDiskOvercommit
	}
	if cfg.DiskOvercommit < 1 {
		return nil, fmt.Errorf("disk overcommit %v: 1 or more: %w", cfg.DiskOvercommit, errdefs.ErrInvalidArgument)
	}
	if cfg.UserNSBase == 0 {
		cfg.UserNSBase = defaultUserNSBase
	}
	if err := checkShimGroupSize(&cfg); err != nil {
		return nil, err
	}
	if cfg.DefaultClass == "" {
		cfg.DefaultClass = ClassRunc
	}
	if c, err := ParseClass(string(cfg.DefaultClass)); err != nil || c == "" {
		return nil, fmt.Errorf("default %w", err)
	}
	sum := sha256.Sum256([]byte(filepath.Clean(cfg.StateDir)))
	r := &Runtime{
		cfg:      cfg,
		scope:    hex.EncodeToString(sum[:]),
		runcRoot: filepath.Join(cfg.StateDir, "runc"),
		fifoDir:  filepath.Join(cfg.StateDir, "fifo"),
		cgroups:  detectCgroups(),
		// unhardened is also what the in-package start benchmark toggles.
		unhardened: cfg.Unrestricted,
	}
	for _, d := range []string{cfg.StateDir, r.instancesDir(), r.runcRoot, r.fifoDir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, fmt.Errorf("runtime state dir: %w", err)
		}
	}
	r.setupAgents()
	if err := r.setupClasses(); err != nil {
		return nil, err
	}
	if err := r.ClassErr(ctx, cfg.DefaultClass); err != nil {
		return nil, fmt.Errorf("default runtime class: %w", err)
	}
	var err error
	if r.net, err = newNetwork(cfg.Network, r.scope, cfg.StateDir); err != nil {
		return nil, err
	}
	if cfg.Unrestricted {
		// No rules at all: the base chains would refuse every instance
		// not attached through them.
		r.net.rulesOff = true
		r.net.fw.destroy()
	}
	c, err := client.New(cfg.Address, client.WithDefaultNamespace(cfg.Namespace), client.WithTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("connect to containerd at %s: %w", cfg.Address, &kindError{errdefs.ErrUnavailable, err})
	}
	r.client = c
	if ok, err := c.IsServing(ctx); err != nil || !ok {
		c.Close()
		return nil, fmt.Errorf("containerd at %s is not serving: %w", cfg.Address, errdefs.ErrUnavailable)
	}
	r.checkLazySnapshotter(ctx)
	r.watchOOM()
	r.checkDiskLimit()
	// Also with limits turned off since: a layer made on an image lives there.
	r.attachDisks()
	return r, nil
}

// Close closes the connection to containerd. Instances keep running.
func (r *Runtime) Close() error {
	r.ooms.cancel()
	r.closeAgents()
	return r.client.Close()
}

// Client is the containerd client, for packages that work on snapshots and
// content directly. Its default namespace is Config.Namespace.
func (r *Runtime) Client() *client.Client { return r.client }

func (r *Runtime) ctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.cfg.Namespace)
}

func (r *Runtime) instancesDir() string         { return filepath.Join(r.cfg.StateDir, "instances") }
func (r *Runtime) instanceDir(id string) string { return filepath.Join(r.instancesDir(), id) }

// Pull fetches ref ("host:port/repo@sha256:...") into containerd and unpacks
// it: lazily for Config.LazySnapshotter when it has eStargz layers, in full
// for overlayfs otherwise (lazy.go). The choice is recorded on the image
// (LabelSnapshotter) for Create. A ref pinned by digest that is already
// pulled and unpacked is not fetched again (pulled.go).
func (r *Runtime) Pull(ctx context.Context, ref string) error {
	ctx = r.ctx(ctx)
	if r.pulled(ctx, ref) {
		return nil
	}
	return r.pullJoined(ctx, ref)
}

// pullCall is one pull that concurrent Pulls of its ref wait for.
type pullCall struct {
	done chan struct{}
	err  error
}

// pullJoined pulls ref once for all who ask at the same time: a fork's
// copies start together from one new version, and four containerd pulls
// of one ref race for the same content ingests (each but one waiting on
// containerd's ref locks and retrying) and unpack the same layers. A
// waiter whose own context is still alive pulls again if the pull it
// joined ended with its caller's context.
func (r *Runtime) pullJoined(ctx context.Context, ref string) error {
	for {
		r.pullMu.Lock()
		if c, ok := r.pulls[ref]; ok {
			r.pullMu.Unlock()
			select {
			case <-c.done:
			case <-ctx.Done():
				return translate(ctx.Err(), "pull %s", ref)
			}
			if c.err != nil && ctx.Err() == nil && (errors.Is(c.err, context.Canceled) || errors.Is(c.err, context.DeadlineExceeded)) {
				continue
			}
			return c.err
		}
		if r.pulls == nil {
			r.pulls = map[string]*pullCall{}
		}
		c := &pullCall{done: make(chan struct{})}
		r.pulls[ref] = c
		r.pullMu.Unlock()
		c.err = r.pull(ctx, ref)
		r.pullMu.Lock()
		delete(r.pulls, ref)
		r.pullMu.Unlock()
		close(c.done)
		return c.err
	}
}

// pull fetches and unpacks ref (Pull).
func (r *Runtime) pull(ctx context.Context, ref string) error {
	hostOpts := []docker.RegistryOpt{docker.WithPlainHTTP(r.plainHTTP)}
	if r.cfg.RegistryCredentials != nil {
		hostOpts = append(hostOpts, docker.WithAuthorizer(docker.NewDockerAuthorizer(docker.WithAuthCreds(r.cfg.RegistryCredentials))))
	}
	resolver := docker.NewResolver(docker.ResolverOptions{
		Hosts: docker.ConfigureDefaultRegistries(hostOpts...),
	})
	sn, opts, err := r.pullOptions(ctx, ref, resolver)
	if err != nil {
		return err
	}
	_, err = r.client.Pull(ctx, ref, append(opts,
		client.WithResolver(resolver),
		client.WithPullUnpack,
		client.WithPullLabel(LabelSnapshotter, sn),
	)...)
	return translate(err, "pull %s", ref)
}

func (r *Runtime) plainHTTP(host string) (bool, error) {
	return slices.Contains(r.cfg.PlainHTTPRegistries, host), nil
}

// InstanceSpec describes an instance to create.
type InstanceSpec struct {
	ID       string            // container ID; also the hostname unless Hostname is set
	Image    string            // a pulled ref
	Hostname string            // default: ID
	Env      []string          // KEY=VALUE, over the image's environment
	Mounts   []Mount           // bind mounts
	Labels   map[string]string // container labels, e.g. envd.generation
	Limits   Limits            // resource limits; see Limits
	// AllowPrivilegeEscalation turns no_new_privs off, so a non-root user's
	// setuid binaries (sudo) gain privileges; default off (harden.go).
	AllowPrivilegeEscalation bool
	Network                  NetworkPolicy // what it may connect to; kept across Stop/Start (SetNetworkPolicy changes it)
	// HostIDs runs the container without the node's user namespace
	// (Config.UserNS), for containers whose layer is saved (builds): the
	// save path cannot read shifted ids (userns.go).
	HostIDs bool
	// Class is the runtime class (class.go); "" = the node's default.
	// Kept for every later Start.
	Class Class
	// Docker lets dockerd and nested containers run inside the instance
	// (docker.go): ClassGVisor only; any other class is refused
	// (ErrDockerNeedsGVisor) before anything is made.
	Docker bool
	// RestoreFrom, if set, is a local memory image directory (what
	// CheckpointMemory wrote, from an instance of the same rootfs and
	// mounts): the first task continues its processes instead of running
	// the init. gVisor only (memory.go).
	RestoreFrom string
	// ShimGroup: instances with the same non-empty ShimGroup (and class)
	// may share a shim process, Config.ShimGroupSize at most, and a
	// shim's death fails them together (shimgroup.go). "" = a shim of
	// its own. Kept for every later Start.
	ShimGroup string
	// Steps, if set, gets how long Create's steps took.
	Steps *CreateSteps
}

// CreateSteps divides a Create: the container (its new snapshot of the
// image, the spec), the network attachment (netns, CNI, firewall), the
// task's creation and its start. For a memory image the runc shim runs
// runsc's restore at the start (its created-from-checkpoint state), so
// the start is where the image is read.
type CreateSteps struct {
	Container, Network, Task, Start time.Duration
}

// Mount is a bind mount of a host path into an instance.
type Mount struct {
	Source      string // absolute host path; must exist
	Destination string // absolute path in the instance
	ReadOnly    bool
	// Owned: the source belongs to the instance (a volume). In a user
	// namespace its top directory, while owned by host root, is given to
	// the instance's root; other sources keep their host owners.
	Owned bool
}

var validID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

func (s InstanceSpec) validate() error {
	if !validID.MatchString(s.ID) {
		return fmt.Errorf("instance id %q: %w", s.ID, errdefs.ErrInvalidArgument)
	}
	if s.Image == "" {
		return fmt.Errorf("instance %q has no image: %w", s.ID, errdefs.ErrInvalidArgument)
	}
	if s.Hostname != "" && (len(s.Hostname) > 63 || strings.ContainsAny(s.Hostname, " \t\n/")) {
		return fmt.Errorf("hostname %q: %w", s.Hostname, errdefs.ErrInvalidArgument)
	}
	if err := s.Network.validate(); err != nil {
		return err
	}
	for _, kv := range s.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("environment entry %q is not KEY=VALUE: %w", kv, errdefs.ErrInvalidArgument)
		}
	}
	for _, m := range s.Mounts {
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Destination) {
			return fmt.Errorf("mount %s:%s: paths must be absolute: %w", m.Source, m.Destination, errdefs.ErrInvalidArgument)
		}
		if _, err := os.Stat(m.Source); err != nil {
			return fmt.Errorf("mount source %s: %w", m.Source, errdefs.ErrInvalidArgument)
		}
	}
	return s.Limits.Validate()
}

// Create makes the container (a new snapshot named after the ID, in the
// snapshotter the image was pulled for),
// its network namespace and instance files, and starts its init task. On
// failure nothing is left behind.
func (r *Runtime) Create(ctx context.Context, spec InstanceSpec) (retErr error) {
	if err := spec.validate(); err != nil {
		return err
	}
	ctx = r.ctx(ctx)
	id := spec.ID
	if _, err := r.client.LoadContainer(ctx, id); err == nil {
		return fmt.Errorf("instance %q: %w", id, errdefs.ErrAlreadyExists)
	}
	class, err := r.resolveClass(ctx, spec)
	if err != nil {
		return err
	}
	spec.Class = class
	if spec.RestoreFrom != "" && class != ClassGVisor {
		return fmt.Errorf("instance %q: restore of a memory image needs class %q, not %q: %w: %w", id, ClassGVisor, class, ErrNotOnClass, errdefs.ErrFailedPrecondition)
	}
	img, err := r.client.GetImage(ctx, spec.Image)
	if err != nil {
		return translate(err, "image %s of instance %q", spec.Image, id)
	}
	sn := r.imageSnapshotter(img)
	if ok, err := img.IsUnpacked(ctx, sn); err != nil || !ok {
		if err := img.Unpack(ctx, sn); err != nil {
			return translate(err, "unpack image %s", spec.Image)
		}
	}
	hostname := spec.Hostname
	if hostname == "" {
		hostname = id
	}
	dir := r.instanceDir(id)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("instance dir: %w", err)
	}
	// The disk image is formatted while the container is made.
	if r.hasDisk(id) || r.diskImageExists(id) { // left by a Create that crashed
		if err := errors.Join(r.detachDisk(id), r.removeDisk(id)); err != nil {
			return err
		}
	}
	diskReady := func() error { return nil }
	if r.diskLimited(spec.Limits) {
		done := make(chan error, 1)
		go func() { done <- r.makeDiskImage(ctx, id, spec.Limits.DiskBytes) }()
		var once sync.Once
		var derr error
		diskReady = func() error { once.Do(func() { derr = <-done }); return derr }
	}
	defer func() {
		if retErr != nil {
			_ = diskReady()
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = r.Remove(cctx, id)
		}
	}()
	if err := r.writeInstanceFiles(id, hostname, nil, ""); err != nil {
		return err
	}
	if err := r.saveNetworkPolicy(id, spec.Network); err != nil {
		return err
	}

	mounts := []specs.Mount{
		bindMount(filepath.Join(dir, "resolv.conf"), "/etc/resolv.conf", false),
		bindMount(filepath.Join(dir, "hosts"), "/etc/hosts", false),
		bindMount(filepath.Join(dir, "hostname"), "/etc/hostname", false),
	}
	for _, m := range spec.Mounts {
		mounts = append(mounts, bindMount(m.Source, m.Destination, m.ReadOnly))
	}
	if class == ClassGVisor {
		m, err := r.gvisorTmpAnchor(id)
		if err != nil {
			return err
		}
		mounts = append(mounts, m)
	}
	agentMounts, err := r.agentMounts(id)
	if err != nil {
		return err
	}
	mounts = append(mounts, agentMounts...)
	caMounts, caEnv, err := r.egressCA(spec.Network)
	if err != nil {
		return err
	}
	mounts = append(mounts, caMounts...)
	script := initScript
	if len(agentMounts) > 0 {
		script = initScriptAgent
	}
	labels := map[string]string{}
	for k, v := range spec.Labels {
		labels[k] = v
	}
	labels[LabelClass] = string(class)
	if spec.Docker {
		labels[LabelDocker] = "true"
	}
	snapshot, userns := client.WithNewSnapshot(id, img), oci.Compose()
	if r.cfg.UserNS && !spec.HostIDs {
		snapshot, userns = r.usernsOpts(id, img)
		labels[LabelUserNS] = r.usernsLabel()
		for _, m := range spec.Mounts {
			if m.Owned && !m.ReadOnly {
				if err := r.giveToRoot(m.Source); err != nil {
					return err
				}
			}
		}
		if err := r.chownInstanceFiles(id); err != nil {
			return err
		}
	}
	place, placed, err := r.shimGroup(ctx, spec.ShimGroup, class)
	if err != nil {
		return err
	}
	grouped := place.spec(labels)
	steps := spec.Steps
	if steps == nil {
		steps = &CreateSteps{}
	}
	containerStart := time.Now()
	_, err = r.client.NewContainer(ctx, id,
		client.WithImage(img),
		client.WithSnapshotter(sn),
		snapshot,
		r.runtimeOpt(class),
		client.WithContainerLabels(labels),
		client.WithNewSpec(
			oci.WithImageConfig(img),
			withCheckedCwd,
			oci.WithProcessArgs("/bin/sh", "-c", script),
			oci.WithHostname(hostname),
			oci.WithEnv(append(caEnv, spec.Env...)), // the instance's own settings win
			oci.WithMounts(mounts),
			oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: r.net.nsPath(id)}),
			// The default cgroup is /<namespace>/<id>, the same for every
			// daemon; put ours under a parent named by StateDir.
			oci.WithCgroup(r.cgroupPath(id)),
			r.hardening(spec),
			userns,
			grouped,
		),
	)
	placed()
	steps.Container = time.Since(containerStart)
	if err != nil {
		return translate(err, "create container %q", id)
	}
	if r.diskLimited(spec.Limits) {
		if err := diskReady(); err != nil {
			return err
		}
		if err := r.attachNewDisk(ctx, id, sn); err != nil {
			return err
		}
	}
	if spec.RestoreFrom != "" {
		return r.startTaskFrom(ctx, id, hostname, spec.RestoreFrom, steps)
	}
	return r.startTaskFrom(ctx, id, hostname, "", steps)
}

func (r *Runtime) cgroupPath(id string) string {
	return "/envd-" + r.scope[:12] + "/" + r.cfg.Namespace + "/" + id
}

func bindMount(src, dst string, ro bool) specs.Mount {
	opt := "rw"
	if ro {
		opt = "ro"
	}
	return specs.Mount{Type: "bind", Source: src, Destination: dst, Options: []string{"rbind", opt}}
}

// Start runs a new init task on an existing container and its snapshot (after
// Stop), with a fresh network attachment. Starting a running instance is a
// no-op; a paused one is ErrFailedPrecondition.
func (r *Runtime) Start(ctx context.Context, id string) error {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return translate(err, "instance %q", id)
	}
	if t, err := c.Task(ctx, nil); err == nil {
		st, err := t.Status(ctx)
		if err != nil {
			return translate(err, "task of instance %q", id)
		}
		switch st.Status {
		case client.Running:
			return nil
		case client.Paused, client.Pausing:
			return fmt.Errorf("instance %q is paused: %w", id, errdefs.ErrFailedPrecondition)
		}
		if err := r.deleteTask(ctx, id, taskGroup(ctx, c), t); err != nil {
			return translate(err, "delete old task of instance %q", id)
		}
	} else if !cerrdefs.IsNotFound(err) {
		return translate(err, "task of instance %q", id)
	}
	spec, err := c.Spec(ctx)
	if err != nil {
		return translate(err, "spec of instance %q", id)
	}
	if err := r.ensureDisk(id); err != nil {
		return err
	}
	return r.startTask(ctx, id, spec.Hostname)
}

// startTask attaches the network, writes /etc/hosts with the new address and
// starts the init task. On failure the network is detached again.
func (r *Runtime) startTask(ctx context.Context, id, hostname string) (retErr error) {
	return r.startTaskFrom(ctx, id, hostname, "", &CreateSteps{})
}

// startTaskFrom is startTask; with restoreFrom set the task restores that
// memory image instead of running the init. steps gets the network's,
// the task's and the start's times.
func (r *Runtime) startTaskFrom(ctx context.Context, id, hostname, restoreFrom string, steps *CreateSteps) (retErr error) {
	pol, err := r.loadNetworkPolicy(id)
	if err != nil {
		return err
	}
	// Under egress none the instance is given no DNS server.
	resolv, nameservers, err := r.instanceResolv(pol)
	if err != nil {
		return err
	}
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return translate(err, "instance %q", id)
	}
	labels, err := c.Labels(ctx)
	if err != nil {
		return translate(err, "instance %q", id)
	}
	var idmap []specs.LinuxIDMapping
	if labels[LabelUserNS] != "" {
		if idmap, err = ParseUserNSLabel(labels[LabelUserNS]); err != nil {
			return fmt.Errorf("instance %q: %w", id, err)
		}
	}
	netStart := time.Now()
	ip, err := r.net.setup(ctx, id, pol, nameservers, idmap)
	steps.Network = time.Since(netStart)
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			_ = r.net.teardown(context.WithoutCancel(ctx), id)
		}
	}()
	if err := r.writeInstanceFiles(id, hostname, ip, resolv); err != nil {
		return err
	}
	// An init that starts the agent finds the socket listening.
	slot, err := r.initAgentSlot(ctx, c)
	if err != nil {
		return err
	}
	var topts []client.NewTaskOpts
	if restoreFrom != "" {
		topts = append(topts, client.WithRestoreImagePath(restoreFrom))
	}
	taskStart := time.Now()
	group := labels[LabelShimGroup]
	var t client.Task
	err = r.createGroupedTask(ctx, id, group, func() error {
		r.cgroupMu.RLock()
		defer r.cgroupMu.RUnlock()
		var err error
		t, err = c.NewTask(ctx, cio.NullIO, topts...)
		return err
	})
	steps.Task = time.Since(taskStart)
	if err != nil {
		return startErr(err, "create task of instance %q", id)
	}
	startStart := time.Now()
	err = t.Start(ctx)
	steps.Start = time.Since(startStart)
	if err != nil {
		_ = r.deleteTask(context.WithoutCancel(ctx), id, group, t)
		return startErr(err, "start task of instance %q", id)
	}
	if slot != nil {
		r.agents.expectInit(id, slot)
	}
	return nil
}

// writeInstanceFiles writes hostname, hosts (with ip when known) and
// resolv.conf (see resolvConf).
func (r *Runtime) writeInstanceFiles(id, hostname string, ip net.IP, resolv string) error {
	dir := r.instanceDir(id)
	hosts := "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	if ip != nil {
		hosts += ip.String() + "\t" + hostname + "\n"
	}
	files := map[string]string{"hostname": hostname + "\n", "hosts": hosts, "resolv.conf": resolv, "address": ""}
	if ip != nil {
		files["address"] = ip.String()
	}
	for name, content := range files {
		// Rewritten in place, not renamed: a running task's bind mount holds
		// the inode.
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			return fmt.Errorf("instance file %s of %q: %w", name, id, err)
		}
	}
	return nil
}

// resolvConf is the host's resolv.conf without loopback nameservers (a
// resolver on 127.0.0.0/8 or ::1 is the instance's own loopback inside the
// network namespace) nor IPv6 ones (instances have no IPv6), and without
// any nameserver unless withNameservers. It also returns the nameservers
// kept, which the firewall lets the instance reach on port 53.
func resolvConf(path string, withNameservers bool) (string, []net.IP, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if os.IsNotExist(err) {
			return "", nil, nil
		}
		return "", nil, fmt.Errorf("host resolv.conf: %w", err)
	}
	var out strings.Builder
	var servers []net.IP
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "nameserver" {
			ip := net.ParseIP(f[1])
			if ip == nil || ip.IsLoopback() || ip.To4() == nil || !withNameservers {
				continue
			}
			servers = append(servers, ip.To4())
		}
		out.WriteString(line)
		out.WriteString("\n")
	}
	return strings.TrimRight(out.String(), "\n") + "\n", servers, nil
}

// ExecSpec describes a process run in an instance.
type ExecSpec struct {
	Args   []string
	Env    []string // KEY=VALUE over the instance's environment
	Cwd    string   // default: the image's working directory, else /
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer // unused with TTY: the terminal carries both streams
	TTY    bool
	// Resize carries terminal size changes of a TTY session; each size
	// received is applied to the process's terminal, the first one right
	// after the process starts. Ignored without TTY; nil = none.
	Resize <-chan TermSize
}

// TermSize is a terminal's size in characters.
type TermSize struct{ Cols, Rows uint16 }

// Exec runs a process in a running instance and waits for it, returning its
// exit code. Canceling ctx kills the process (SIGKILL). Output has been
// written to Stdout and Stderr in full when Exec returns.
func (r *Runtime) Exec(ctx context.Context, id string, spec ExecSpec) (int, error) {
	if !spec.TTY {
		if code, err, done := r.execAgent(ctx, id, spec); done {
			return code, err
		}
	}
	code, err := r.exec(ctx, id, spec)
	if err == nil {
		r.KickAgent(id) // for the next command
	}
	// A deadline or cancel that lands inside a containerd call comes back
	// as a gRPC status; callers branch on the context's own error.
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return code, err
}

func (r *Runtime) exec(ctx context.Context, id string, spec ExecSpec) (int, error) {
	if len(spec.Args) == 0 {
		return -1, fmt.Errorf("exec in %q: no command: %w", id, errdefs.ErrInvalidArgument)
	}
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return -1, translate(err, "instance %q", id)
	}
	t, err := c.Task(ctx, nil)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return -1, fmt.Errorf("instance %q is stopped: %w", id, errdefs.ErrFailedPrecondition)
		}
		return -1, translate(err, "task of instance %q", id)
	}
	st, err := t.Status(ctx)
	if err != nil {
		return -1, translate(err, "task of instance %q", id)
	}
	switch st.Status {
	case client.Running:
	case client.Paused, client.Pausing:
		// Frozen now (by a save, or by a save an envd that died left to
		// the next one): nothing ran, the caller may wait for the thaw.
		return -1, fmt.Errorf("instance %q is %s: %w: %w", id, st.Status, ErrTaskPaused, errdefs.ErrFailedPrecondition)
	default:
		return -1, fmt.Errorf("instance %q is %s: %w", id, st.Status, errdefs.ErrFailedPrecondition)
	}
	cspec, err := recordedSpec(ctx, c)
	if err != nil {
		return -1, err
	}
	pspec := *cspec.Process
	pspec.Args = spec.Args
	pspec.Env = mergeEnv(cspec.Process.Env, spec.Env)
	pspec.Terminal = spec.TTY
	var initial *TermSize
	if spec.TTY && spec.Resize != nil {
		// A size already waiting is the initial one: the terminal is made
		// with it (the OCI console size), so the process's first look at
		// its terminal sees it, without racing a resize after the start.
		select {
		case sz, ok := <-spec.Resize:
			if ok && sz.Cols > 0 && sz.Rows > 0 {
				initial = &sz
				pspec.ConsoleSize = &specs.Box{Height: uint(sz.Rows), Width: uint(sz.Cols)}
			}
		default:
		}
	}
	if spec.Cwd != "" {
		pspec.Cwd = spec.Cwd
	}
	if pspec.Cwd == "" {
		pspec.Cwd = "/"
	}
	if err := types.CheckCwd(pspec.Cwd); err != nil {
		return -1, fmt.Errorf("exec in %q: %w", id, err)
	}

	stdout, stderr := spec.Stdout, spec.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	// The drain after the exit below waits for output to go quiet.
	var lastOutput atomic.Int64
	stdout = activityWriter{stdout, &lastOutput}
	stderr = activityWriter{stderr, &lastOutput}
	// cio closes its end of the stdin FIFO at EOF, but the process only sees
	// EOF once the shim is told to close its end too (CloseIO).
	var stdin io.Reader
	stdinEOF := make(chan struct{})
	if spec.Stdin != nil {
		stdin = &eofNotifier{r: spec.Stdin, eof: stdinEOF}
	}
	opts := []cio.Opt{cio.WithStreams(stdin, stdout, stderr), cio.WithFIFODir(r.fifoDir)}
	if spec.TTY {
		opts = append(opts, cio.WithTerminal)
	}
	execID := "exec-" + randomHex(8)
	p, err := t.Exec(ctx, execID, &pspec, cio.NewCreator(opts...))
	if err != nil {
		return -1, execStartErr(err, "exec in instance %q", id)
	}
	cleanup := context.WithoutCancel(ctx)
	detached := false
	defer func() {
		if detached {
			// The shim's DeleteProcess waits for the process's stdio to close,
			// that is, for the background child; do it in the background. It
			// returns at the latest when the task stops.
			go func() { _, _ = p.Delete(cleanup, client.WithProcessKill) }()
			return
		}
		// The process has exited (or was never started, or was killed
		// below) and its output is complete: forgetting it in the shim
		// need not hold the answer back. Except when ctx ended during
		// the start: the shim may have started the process all the same,
		// and a canceled exec must not be found running after it returns,
		// so the kill is waited for then.
		del := func() {
			dctx, cancel := context.WithTimeout(cleanup, 10*time.Second)
			defer cancel()
			_, _ = p.Delete(dctx, client.WithProcessKill)
		}
		if ctx.Err() != nil {
			del()
			return
		}
		go del()
	}()
	statusC, err := p.Wait(ctx)
	if err != nil {
		return -1, translate(err, "exec in instance %q", id)
	}
	if err := p.Start(ctx); err != nil {
		if code, msg, ok := commandNotRun(err); ok {
			// What a shell does with a command it cannot run: no error,
			// an exit status and the reason on stderr.
			w := spec.Stderr
			if spec.TTY || w == nil {
				w = stdout // a terminal has one stream; io.Discard when none
			}
			_, _ = io.WriteString(w, msg+"\n")
			return code, nil
		}
		return -1, execStartErr(err, "start %q in instance %q", spec.Args[0], id)
	}
	// statusC delivers the exit status once and is then closed: only the
	// wait below may receive from it (a second receiver would take the
	// status and leave a zero one, exit code 0, to the wait). Helpers stop
	// on returned instead.
	returned := make(chan struct{})
	defer close(returned)
	if spec.Stdin != nil {
		go func() {
			select {
			case <-stdinEOF:
				_ = p.CloseIO(cleanup, client.WithStdinCloser)
			case <-returned:
			}
		}()
	}
	if spec.TTY && spec.Resize != nil {
		// Some runtimes ignore the console size of an exec: set it again.
		if initial != nil {
			_ = p.Resize(ctx, uint32(initial.Cols), uint32(initial.Rows))
		}
		go resizeLoop(ctx, p, spec.Resize, returned)
	}
	var status client.ExitStatus
	select {
	case status = <-statusC:
	case <-ctx.Done():
	}
	// The wait stream is bound to ctx: on cancellation statusC may deliver
	// an error status before ctx.Done is seen, so check ctx either way.
	// containerd enforces the deadline it is sent, and its timer may fire a
	// moment before ctx's own: an error status with the deadline that close
	// waits for it, so the caller sees ctx's error (a stressed run saw the
	// bare gRPC "deadline exceeded").
	if _, _, err := status.Result(); err != nil && ctx.Err() == nil {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < time.Second {
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(dl) + 100*time.Millisecond):
			}
		}
	}
	if ctx.Err() != nil {
		kctx, cancel := context.WithTimeout(cleanup, 10*time.Second)
		defer cancel()
		_ = p.Kill(kctx, syscall.SIGKILL)
		if exitC, err := p.Wait(kctx); err == nil {
			select {
			case <-exitC:
			case <-kctx.Done():
			}
		}
		return -1, fmt.Errorf("exec in instance %q: %w", id, ctx.Err())
	}
	code, _, err := status.Result()
	if err != nil {
		return -1, translate(err, "exec in instance %q", id)
	}
	// Output is complete once every writer of the FIFOs has closed them. A
	// background child (`sh -c 'server &'`) inherits them and would keep
	// Exec waiting forever, so the copies get ioDrainGrace after the exit
	// and are then cut off; the child keeps running, detached.
	ioDone := make(chan struct{})
	go func() { p.IO().Wait(); close(ioDone) }()
	exited := time.Now()
	for {
		// The shim copies the process's output to the FIFOs on its own
		// schedule, so on a loaded node output still arrives after the exit
		// event: wait until it has been quiet for ioDrainGrace.
		quietSince := max(exited.UnixNano(), lastOutput.Load())
		wait := time.Until(time.Unix(0, quietSince).Add(ioDrainGrace))
		if wait <= 0 {
			p.IO().Cancel()
			detached = true
			break
		}
		select {
		case <-ioDone:
			return int(code), nil
		case <-time.After(wait):
		}
	}
	return int(code), nil
}

// recordedSpec is container c's OCI spec as LoadContainer read it (it
// does not change while a task runs), with its init's process.
func recordedSpec(ctx context.Context, c client.Container) (*oci.Spec, error) {
	id := c.ID()
	info, err := c.Info(ctx, client.WithoutRefreshedMetadata)
	if err != nil {
		return nil, translate(err, "instance %q", id)
	}
	if info.Spec == nil {
		return nil, fmt.Errorf("spec of instance %q: none recorded", id)
	}
	var cspec oci.Spec
	if err := json.Unmarshal(info.Spec.GetValue(), &cspec); err != nil {
		return nil, fmt.Errorf("spec of instance %q: %w", id, err)
	}
	if cspec.Process == nil {
		return nil, fmt.Errorf("spec of instance %q: no process", id)
	}
	return &cspec, nil
}

// ErrTaskPaused is in the error of an Exec refused because the task was
// frozen, when Exec looked at it or when the process was to start (runc:
// "cannot exec in a paused state"); nothing ran, so the caller may wait
// for the thaw and try again.
// The freeze may already be over when the caller looks at the task.
var ErrTaskPaused = errors.New("task is paused")

// execStartErr translates an error of making or starting an exec process.
func execStartErr(err error, format string, args ...any) error {
	if strings.Contains(err.Error(), "paused state") {
		return fmt.Errorf(format+": %w: %w", append(args, ErrTaskPaused, errdefs.ErrFailedPrecondition)...)
	}
	if strings.Contains(err.Error(), "cannot exec in a stopped container") {
		// The init died between the exec's set-up and its start: runc
		// says so in words (gRPC code Unknown), and it is the instance's
		// state, not an internal error.
		return fmt.Errorf(format+": %w: %w", append(args, err, errdefs.ErrFailedPrecondition)...)
	}
	return startErr(err, format, args...)
}

// startErr translates the error of a process start (an exec's, an
// instance's init): a reason runc gives for the process itself (its
// command, working directory or user) is the image's or the request's
// fault, so errdefs.ErrStartFailed with that reason; the rest as translate.
func startErr(err error, format string, args ...any) error {
	if reason, ok := processStartReason(err); ok {
		return fmt.Errorf("%s: %s: %w", fmt.Sprintf(format, args...), reason, errdefs.ErrStartFailed)
	}
	return translate(err, format, args...)
}

// runc's words for a process it set up but could not start, as containerd
// passes them on, e.g.
//
//	OCI runtime exec failed: exec failed: unable to start container process: exec: "nosuch": executable file not found in $PATH: unknown
var processStartFailure = regexp.MustCompile(`unable to start container process: (.+?)(?:: unknown)?$`)

// processStartReason returns runc's reason for a process that did not
// start, without the layers of prefixes.
func processStartReason(err error) (string, bool) {
	m := processStartFailure.FindStringSubmatch(err.Error())
	if m == nil {
		return "", false
	}
	return m[1], true
}

// execReason is runc's reason for a command it could not execute:
// `exec: "nosuch": executable file not found in $PATH`.
var execReason = regexp.MustCompile(`^exec: "((?:[^"\\]|\\.)*)": (.+)$`)

// commandNotRun tells whether err is an exec's command that could not be
// run, with the exit status a POSIX shell gives for it (127 not found, 126
// found but not executable) and a message in the runtime's words.
func commandNotRun(err error) (code int, msg string, ok bool) {
	reason, ok := processStartReason(err)
	if !ok {
		return 0, "", false
	}
	m := execReason.FindStringSubmatch(reason)
	if m == nil {
		return 0, "", false
	}
	cmd, why := m[1], m[2]
	if unq, err := strconv.Unquote(`"` + cmd + `"`); err == nil {
		cmd = unq
	}
	// runc's lookup of a relative name stats it: drop the repeated name.
	why = strings.TrimPrefix(why, "stat "+cmd+": ")
	switch {
	case strings.Contains(why, "executable file not found"), strings.HasSuffix(why, "no such file or directory"):
		return 127, cmd + ": " + why, true
	case strings.HasSuffix(why, "permission denied"), strings.HasSuffix(why, "exec format error"),
		strings.HasSuffix(why, "is a directory"), strings.HasSuffix(why, "too many levels of symbolic links"),
		strings.HasSuffix(why, "not a directory"):
		return 126, cmd + ": " + why, true
	}
	return 0, "", false
}

// activityWriter records when output last arrived.
type activityWriter struct {
	w    io.Writer
	last *atomic.Int64
}

func (a activityWriter) Write(p []byte) (int, error) {
	a.last.Store(time.Now().UnixNano())
	return a.w.Write(p)
}

// resizeLoop applies each terminal size received on sizes to p until the
// channel closes or done is closed. A failed resize is not fatal: the
// process may just have exited.
func resizeLoop(ctx context.Context, p client.Process, sizes <-chan TermSize, done <-chan struct{}) {
	for {
		select {
		case sz, ok := <-sizes:
			if !ok {
				return
			}
			if sz.Cols == 0 || sz.Rows == 0 {
				continue
			}
			_ = p.Resize(ctx, uint32(sz.Cols), uint32(sz.Rows))
		case <-done:
			return
		case <-ctx.Done():
			return
		}
	}
}

type eofNotifier struct {
	r    io.Reader
	eof  chan struct{}
	done bool
}

func (e *eofNotifier) Read(b []byte) (int, error) {
	n, err := e.r.Read(b)
	if err != nil && !e.done {
		e.done = true
		close(e.eof)
	}
	return n, err
}

// mergeEnv returns base with extra's entries replacing those of the same key.
func mergeEnv(base, extra []string) []string {
	out := slices.Clone(base)
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		i := slices.IndexFunc(out, func(e string) bool { return strings.HasPrefix(e, k+"=") })
		if i >= 0 {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	return out
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Pause freezes the instance's task (cgroup freezer).
func (r *Runtime) Pause(ctx context.Context, id string) error {
	ctx = r.ctx(ctx)
	t, err := r.task(ctx, id)
	if err != nil {
		return err
	}
	// On cgroup v1 the freezer can stay FREEZING while the instance's
	// processes keep forking, or when the machine is very slow; runc then
	// gives up with "unable to freeze" after thawing the cgroup again
	// (opencontainers/cgroups fs/freezer.go). Seen in CI at load average 70
	// failing a save. The cgroup is thawed, so trying again is safe; a few
	// tries with a pause between them let a burst of forks or load pass.
	const tries = 4
	for i := 1; ; i++ {
		err = t.Pause(ctx)
		if err == nil || i == tries || !strings.Contains(err.Error(), "unable to freeze") {
			return translate(err, "pause instance %q", id)
		}
		select {
		case <-ctx.Done():
			return translate(err, "pause instance %q", id)
		case <-time.After(time.Duration(i) * 100 * time.Millisecond):
		}
	}
}

// Resume thaws a paused instance.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	ctx = r.ctx(ctx)
	t, err := r.task(ctx, id)
	if err != nil {
		return err
	}
	return translate(t.Resume(ctx), "resume instance %q", id)
}

func (r *Runtime) task(ctx context.Context, id string) (client.Task, error) {
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return nil, translate(err, "instance %q", id)
	}
	t, err := c.Task(ctx, nil)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("instance %q is stopped: %w", id, errdefs.ErrFailedPrecondition)
		}
		return nil, translate(err, "task of instance %q", id)
	}
	return t, nil
}

// Stop kills the instance's task (SIGTERM, SIGKILL after Config.StopGrace),
// deletes it and detaches the network. The container and its snapshot are
// kept. Stopping a stopped instance is a no-op.
func (r *Runtime) Stop(ctx context.Context, id string) error {
	ctx = r.ctx(ctx)
	r.dropAgent(id)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return translate(err, "instance %q", id)
	}
	if err := r.stopTask(ctx, c); err != nil {
		return err
	}
	// No task, no address (Status, Address).
	if err := os.WriteFile(filepath.Join(r.instanceDir(id), "address"), nil, 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("instance file address of %q: %w", id, err)
	}
	return r.net.teardown(ctx, id)
}

func (r *Runtime) stopTask(ctx context.Context, c client.Container) error {
	id := c.ID()
	t, err := c.Task(ctx, nil)
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return translate(err, "task of instance %q", id)
	}
	st, err := t.Status(ctx)
	if err != nil {
		return translate(err, "task of instance %q", id)
	}
	if st.Status == client.Paused || st.Status == client.Pausing {
		// Frozen processes do not act on signals until thawed.
		if err := t.Resume(ctx); err != nil {
			return translate(err, "resume instance %q to stop it", id)
		}
	}
	if st.Status != client.Stopped && st.Status != client.Created {
		exitC, err := t.Wait(ctx)
		if err != nil {
			return translate(err, "wait for instance %q", id)
		}
		if err := t.Kill(ctx, syscall.SIGTERM); err != nil && !cerrdefs.IsNotFound(err) {
			return translate(err, "signal instance %q", id)
		}
		timer := time.NewTimer(r.cfg.StopGrace)
		defer timer.Stop()
		select {
		case <-exitC:
		case <-timer.C:
			if err := t.Kill(ctx, syscall.SIGKILL, client.WithKillAll); err != nil && !cerrdefs.IsNotFound(err) {
				return translate(err, "kill instance %q", id)
			}
			select {
			case <-exitC:
			case <-ctx.Done():
				return fmt.Errorf("stop instance %q: %w", id, ctx.Err())
			}
		case <-ctx.Done():
			return fmt.Errorf("stop instance %q: %w", id, ctx.Err())
		}
	}
	if err := r.deleteTask(ctx, id, taskGroup(ctx, c), t); err != nil {
		return translate(err, "delete task of instance %q", id)
	}
	return nil
}

// Remove stops the instance if needed and deletes its container, snapshot,
// network attachment and instance files. Removing an unknown instance is not
// an error.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	if !validID.MatchString(id) {
		return fmt.Errorf("instance id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	ctx = r.ctx(ctx)
	r.dropAgent(id)
	var errs []error
	c, err := r.client.LoadContainer(ctx, id)
	switch {
	case err == nil:
		if err := r.stopTask(ctx, c); err != nil {
			return err
		}
		// Unmounted first: the snapshotter deletes the directory it is on.
		if err := r.detachDisk(id); err != nil {
			return err
		}
		if err := c.Delete(ctx, client.WithSnapshotCleanup); err != nil && !cerrdefs.IsNotFound(err) {
			return translate(err, "delete container %q", id)
		}
	case !cerrdefs.IsNotFound(err):
		return translate(err, "instance %q", id)
	}
	// A snapshot (and disk) left by a Create that failed half way, in
	// whichever snapshotter it was made.
	diskErr := r.detachDisk(id)
	if diskErr != nil {
		errs = append(errs, diskErr)
	}
	for _, sn := range r.snapshotters() {
		if err := r.client.SnapshotService(sn).Remove(ctx, id); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, translate(err, "remove snapshot %q", id))
		}
	}
	if err := r.net.teardown(ctx, id); err != nil {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(r.instanceDir(id)); err != nil {
		errs = append(errs, fmt.Errorf("remove instance files of %q: %w", id, err))
	}
	if diskErr == nil {
		if err := r.removeDisk(id); err != nil {
			errs = append(errs, err)
		}
	}
	r.removeCgroupParents()
	r.releaseGVisor(ctx)
	return errors.Join(errs...)
}

// removeCgroupParents removes the cgroup parents of our instances
// (/envd-SCOPE/NAMESPACE, /envd-SCOPE) in every hierarchy once they are
// empty; runc removes only the instance's own cgroup. rmdir fails on a
// cgroup with children, so this cannot touch a running instance.
func (r *Runtime) removeCgroupParents() {
	r.cgroupMu.Lock()
	defer r.cgroupMu.Unlock()
	parent := filepath.Dir(r.cgroupPath("x"))
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	hierarchies = append(hierarchies, "/sys/fs/cgroup")
	for _, h := range hierarchies {
		_ = os.Remove(filepath.Join(h, parent))
		_ = os.Remove(filepath.Join(h, filepath.Dir(parent)))
	}
}

// DestroyNetwork deletes the runtime's bridge and its host firewall rules.
// Call it only when no instance is left: when a node is decommissioned, or
// in test cleanup. A later Create sets both up again.
func (r *Runtime) DestroyNetwork() error {
	return r.net.destroy()
}

// Mounts returns the mounts of the instance's active snapshot: for
// overlayfs, one overlay mount whose options include upperdir=..., the
// instance's writable layer (on its disk image, attached first, when it has
// a disk limit). For an instance in a user namespace the upper dir holds
// shifted ids: see LabelUserNS and ParseUserNSLabel.
func (r *Runtime) Mounts(ctx context.Context, id string) ([]mount.Mount, error) {
	ctx = r.ctx(ctx)
	info, err := r.containerInfo(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := r.ensureDisk(id); err != nil {
		return nil, err
	}
	ms, err := r.client.SnapshotService(info.Snapshotter).Mounts(ctx, info.SnapshotKey)
	if err != nil {
		return nil, translate(err, "snapshot of instance %q", id)
	}
	return ms, nil
}

func (r *Runtime) containerInfo(ctx context.Context, id string) (containers.Container, error) {
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return containers.Container{}, translate(err, "instance %q", id)
	}
	info, err := c.Info(ctx, client.WithoutRefreshedMetadata)
	if err != nil {
		return containers.Container{}, translate(err, "instance %q", id)
	}
	return info, nil
}

// Status describes an instance. An unknown instance has Exists false.
type Status struct {
	Exists  bool
	Task    string // "running", "paused", "stopped" (exited, not yet deleted), "" (no task)
	Pid     uint32
	Labels  map[string]string
	Address string // the instance's IP address on the bridge while its task runs, "" otherwise
	// ExitCode is the init's exit status when Task is "stopped".
	ExitCode uint32
	// OOMKilled: the task is stopped and the OOM killer killed a process
	// of the instance since the task started (see oom.go).
	OOMKilled bool
	// Class is the runtime class it was made with (class.go).
	Class Class
	// Docker: it was made a docker instance (docker.go).
	Docker bool
	// RootPid is a process whose /proc/PID/root is the instance's file
	// system as its processes see it (volumes included) while its task
	// runs: the init on runc, gVisor's gofer on gvisor (class.go). The
	// kernel's pseudo file systems in it are the node's, not the
	// instance's, on gvisor.
	RootPid uint32
}

// Status reports whether the instance exists and the state of its task.
func (r *Runtime) Status(ctx context.Context, id string) (Status, error) {
	ctx = r.ctx(ctx)
	info, err := r.containerInfo(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return Status{}, nil
	}
	if err != nil {
		return Status{}, err
	}
	s := Status{Exists: true, Labels: info.Labels, Class: classOf(info.Labels), Docker: info.Labels[LabelDocker] == "true"}
	st, pid, err := r.taskStatus(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return s, nil
	}
	if err != nil {
		return Status{}, translate(err, "task of instance %q", id)
	}
	switch st.Status {
	case client.Pausing:
		s.Task = string(client.Paused)
	case client.Created:
		s.Task = string(client.Running)
	default:
		s.Task = string(st.Status)
	}
	s.Pid, s.RootPid = pid, pid
	if s.Class == ClassGVisor && st.Status != client.Stopped {
		s.RootPid = r.goferPid(id)
	}
	if st.Status == client.Stopped {
		s.ExitCode = st.ExitStatus
		started := time.Time{}
		if fi, err := os.Stat(filepath.Join(r.instanceDir(id), "address")); err == nil {
			started = fi.ModTime() // written by startTask before the task starts
		}
		s.OOMKilled = r.OOMKilledSince(id, started)
	}
	if b, err := os.ReadFile(filepath.Join(r.instanceDir(id), "address")); err == nil {
		s.Address = strings.TrimSpace(string(b))
	}
	return s, nil
}

// List returns the IDs of all containers in the runtime's namespace, sorted.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	ctx = r.ctx(ctx)
	cs, err := r.client.Containers(ctx)
	if err != nil {
		return nil, translate(err, "list containers")
	}
	ids := make([]string, 0, len(cs))
	for _, c := range cs {
		ids = append(ids, c.ID())
	}
	slices.Sort(ids)
	return ids, nil
}
