// Package envd composes the service core of one node from its parts,
// each a subpackage with its one job and the small interfaces it
// declares:
//
//	ops        operations: start, idempotency, admission, events, resume, settle
//	save       the save path: capture (spool, freeze, encode), quota, push, commit
//	lifecycle  instances: create, verbs, TTL reaper, reconcile, hibernation
//	command    exec in running instances
//	build      builds and migrations
//	gc         registry content: upload leases, manifest drops, the GC operation
//	quota      the early quota checks
//	volumes    project volumes and their archives
//	freeze     the freeze gate shared by saves and the user's pause
//	spec, names  leaf vocabulary: project specs and limits, names and ids
//
// and the parts that serve API route groups of their own (Parts):
//
//	cluster     membership: leases, lost nodes, drains, node routes, join tokens
//	checkpoint  coordinated and periodic checkpoints, forks
//	ports       ports, dials and previews of instances
//	fileapi     the file API's roots and watches
//	sshkeys, tokens  SSH keys and key logins; API tokens
//	rollout     fleet upgrades
//
// New makes the parts and wires them; Parts hands them to the composition
// root (envd/node), which gives each to the API:
//
//	lifecycle.Instances  instances, their verbs and exec, with the wrappers
//	workspace.Feature    the projects' volumes and their archives
//	cluster.Membership   nodes, placement, join tokens, owners
//
// The Service serves what belongs to no part yet: projects and versions,
// specs and changes, quotas and limits as set by an admin, idle, pool and
// network settings, secrets, node info. It composes the store (versions),
// the registry client (registry), the container runtime (runtime) and the
// layer capture (snapshotter).
package envd

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/containerd/v2/core/mount"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/builder"
	"github.com/envd-dev/envd/envd/changes"
	"github.com/envd-dev/envd/envd/checkpoint"
	"github.com/envd-dev/envd/envd/cluster"
	"github.com/envd-dev/envd/envd/command"
	"github.com/envd-dev/envd/envd/fileapi"
	"github.com/envd-dev/envd/envd/freeze"
	"github.com/envd-dev/envd/envd/gateway"
	"github.com/envd-dev/envd/envd/gc"
	"github.com/envd-dev/envd/envd/images"
	"github.com/envd-dev/envd/envd/lifecycle"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/envd/ports"
	"github.com/envd-dev/envd/envd/quota"
	"github.com/envd-dev/envd/envd/rollout"
	"github.com/envd-dev/envd/envd/save"
	"github.com/envd-dev/envd/envd/sshkeys"
	"github.com/envd-dev/envd/envd/tokens"
	"github.com/envd-dev/envd/envd/webhooks"
	"github.com/envd-dev/envd/envd/wrap"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/limiter"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
	"github.com/envd-dev/envd/workspace"
)

// ImageStore is what the core needs of the registry.
type ImageStore interface {
	Addr() string
	PushRootfsLayer(ctx context.Context, lf registry.LayerFile, repo, tag string) (registry.Image, error)
	Append(ctx context.Context, parent registry.Image, layer registry.LayerFile, targetRepo, tag string, annotations map[string]string) (registry.Image, error)
	Get(ctx context.Context, ref string) (registry.Image, error)
	DeleteManifest(ctx context.Context, img registry.Image) error
	Rebase(ctx context.Context, img registry.Image, baseLayers int, newBase registry.Image, targetRepo string, annotations map[string]string) (registry.Image, error)
	OpenLayer(ctx context.Context, img registry.Image, i int) (io.ReadCloser, error)
	PushArchive(ctx context.Context, path, kind, repo, work string) (registry.Image, error)
	CopyFrom(ctx context.Context, ref, repo string) (registry.Image, error)
	ExportLayout(ctx context.Context, img registry.Image, refName string, w io.Writer) error
	Squash(ctx context.Context, img, base registry.Image, layer registry.LayerFile, targetRepo string, annotations map[string]string) (registry.Image, error)
}

// Sweeper deletes the registry's unreferenced blobs (gc.Sweeper).
type Sweeper = gc.Sweeper

// Runtime is what the core needs of the container runtime: what instances
// need, plus exec (envd/command) and the rootfs mounts (the save path).
type Runtime interface {
	lifecycle.Runtime
	Exec(ctx context.Context, id string, spec runtime.ExecSpec) (int, error)
	Mounts(ctx context.Context, id string) ([]mount.Mount, error)
}

// Config of the core. Zero values get defaults in New.
type Config struct {
	Node       string        // this node's name, recorded on instances
	WorkDir    string        // spool and layer files of saves in progress
	DefaultTTL time.Duration // default 8h
	MaxTTL     time.Duration // 0 = no maximum
	// Components are reported by Info (name -> version or address).
	Components map[string]string
	DataDir    string
	Logger     *slog.Logger

	// Volumes stores the node's project volumes and Objects the archives;
	// nil = this node offers none.
	Volumes *workspace.Manager
	Objects objstore.Store
	// BuildKit runs Dockerfile builds; nil = the node refuses them.
	BuildKit builder.BuildKit
	// HibernateAfter is how long a stopped retained instance stays on the
	// node before it is saved as a version and its layer freed; 0 = never.
	HibernateAfter time.Duration

	// PrefetchWindow is how long a new instance's file reads are recorded
	// to order the project's next eStargz layer; 0 = 60s, negative = off.
	PrefetchWindow time.Duration

	// Sweeper sweeps the registry's unreferenced blobs after a GC deleted
	// manifests; nil when the registry is not this node's.
	Sweeper Sweeper

	// DefaultLimits are the limits of instances whose project sets none of
	// a kind (see Limits); zero fields = no limit.
	DefaultLimits types.Limits

	ReapInterval      time.Duration // longest sleep of the TTL reaper; default 5s
	ReconcileInterval time.Duration // default 30s
	ProvisionTimeout  time.Duration // a Pending instance older than this fails; default 10m

	// BuildEgress is the egress policy of build containers (runtime.ParseEgress
	// text), whatever their project's: they must reach the package sources.
	// Default: open.
	BuildEgress string
	// SecretKey is the AES-256 key (SecretKeySize bytes) that seals the
	// tenants' brokered secrets (egress.go); nil: the secret store refuses
	// with ErrFailedPrecondition.
	SecretKey []byte
	// Limits bound one tenant's concurrent saves, builds, exec and event
	// streams on this node (admission.go).
	Limits TenantLimits
	// Observer is told of saves, restores and operations (the node's
	// metrics); nil = nothing is observed.
	Observer Observer

	// Dials bound connections to instances' ports being opened
	// (envd/ports).
	Dials DialLimits
	// ThreadHighWater: while the process has more OS threads than this,
	// new admitted work (Admit, operations, dials) is refused with
	// ErrResourceExhausted (threads.go). 0 = DefaultThreadHighWater,
	// negative = no guard.
	ThreadHighWater int

	// Idle stop (envd/idle.go, lifecycle/idle.go): IdleAfter is the idle
	// setting of projects that set none (0 = never, the default: stopping
	// instances behind their users' backs is the operator's choice);
	// IdleAction its action (default stop). IdleInterval is how often the
	// idle reaper looks (default 10s), ActivityFlush how often activity is
	// written for other nodes (default 10s), WakeWait how long a wake on
	// access waits for the instance to run before answering 503 waking
	// (default 60s).
	IdleAfter     time.Duration
	IdleAction    string
	IdleInterval  time.Duration
	ActivityFlush time.Duration
	WakeWait      time.Duration
	// MemoryRestore is how a resume gets its checkpoint's memory image:
	// MemoryRestoreFull (default, "") pulls it whole before the restore,
	// MemoryRestoreLazy mounts it so the restore starts at once and the
	// sandbox runs while its pages are fetched (memory.go).
	MemoryRestore string
	// MaxFileBytes bounds one file write or archive upload of the file
	// API; 0 = DefaultMaxFileBytes.
	MaxFileBytes int64
	// MemoryCacheBytes bounds the memory images this node keeps after
	// their push (WorkDir/memory-cache) so that a resume or wake here
	// needs no pull: 0 = DefaultMemoryCacheBytes, negative = none kept.
	MemoryCacheBytes int64
	// RolloutConcurrency is the most rollout migrations this node runs at
	// once; 0 = rollout.DefaultConcurrency.
	RolloutConcurrency int
	// RolloutCrashPoint is rollout.Deps.CrashPoint: tests only.
	RolloutCrashPoint func(ctx context.Context, step rollout.Step, tenant, project string)
	// SquashAfter: a version deeper than this many layers that instances
	// build on is squashed in the background (envd/squash); 0 = never.
	// SquashInterval is how often the node looks (default 30s).
	SquashAfter    int
	SquashInterval time.Duration
	// PoolInterval is how often warm pools are refilled (default 2s).
	PoolInterval time.Duration
	// Cluster membership (nodes.go): the node's labels, capacity and
	// lease, and the command another machine runs to join.
	Cluster ClusterConfig
	// PoolRefillDelay: after a claim, warm pools wait this long before
	// starting replacements (default 1s; negative: no wait).
	PoolRefillDelay time.Duration

	// Webhooks: which addresses hooks may reach, how deliveries are
	// retried (webhooks.Config; zero fields take its defaults).
	Webhooks WebhookConfig
}

// DefaultTTL is an instance's lifetime when neither its client nor the
// node's configuration names one.
const DefaultTTL = 8 * time.Hour

// Service implements the API's core.
type Service struct {
	cfg   Config
	store *versions.Store
	reg   ImageStore
	rt    Runtime
	log   *slog.Logger

	stop context.CancelFunc // ends the service's context: operations and loops

	ops     *ops.Runner
	quota   *quota.Checker
	content *gc.Content
	saver   *save.Saver
	vols    *workspace.Volumes
	volumes *workspace.Feature // the volumes feature the API reaches
	life    *lifecycle.Manager
	cmds    *command.Runner
	// The features as the API reaches them, with the cross-cutting
	// behaviour applied once (package wrap; set in wire).
	inst   *lifecycle.Instances // the instances feature, with its wrappers
	saves  wrap.Saver
	builds *builder.Builder
	gc     *gc.Collector

	limits     *limiter.Limiter // per-tenant concurrency (admission.go)
	limitsOnce sync.Once

	diffs       *changes.Cache                // computed version changes (changes.go)
	specs       specCache                     // specs derived from versions (specs.go)
	sshInfo     atomic.Pointer[types.SSHInfo] // the node's SSH endpoint, for Info
	gate        *freeze.Gate                  // the node's freeze gate
	rollouts    *rollout.Runner
	interactive atomic.Int64 // saves, restores and builds running on this node (admission.go)

	bases       baseCache      // currentBase's answers (rollouts.go)
	squashing   sync.WaitGroup // the squash loop (squash.go)
	squashRun   func()         // starts it; nil = squash off
	cluster     *cluster.Membership
	checkpoints *checkpoint.Checkpoints
	forks       *checkpoint.Forks
	ports       *ports.Ports
	files       *fileapi.Files
	keys        *sshkeys.Keys
	tokens      *tokens.Tokens
	images      *images.Images
	hooks       *webhooks.Hooks
	gateway     *gateway.Gateway
	hooksRun    func() // starts the webhook senders (Start)
	// secretCache: the egress proxy's secret lookups (secretcache.go),
	// fed by its listener.
	secretCache *secretCache
	listening   sync.WaitGroup
}

// New makes the core. Call Start once after, and Close at the end.
func New(cfg Config, store *versions.Store, reg ImageStore, rt Runtime) (*Service, error) {
	if cfg.Node == "" {
		h, _ := os.Hostname()
		cfg.Node = h
	}
	if cfg.WorkDir == "" {
		return nil, fmt.Errorf("work dir: %w", errdefs.ErrInvalidArgument)
	}
	if _, err := lazyMemoryOf(cfg.MemoryRestore, nil); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o700); err != nil {
		return nil, err
	}
	if cfg.DefaultTTL == 0 {
		cfg.DefaultTTL = DefaultTTL
	}
	if cfg.MemoryCacheBytes == 0 {
		cfg.MemoryCacheBytes = DefaultMemoryCacheBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.PrefetchWindow == 0 {
		cfg.PrefetchWindow = time.Minute
	}
	if cfg.ReapInterval == 0 {
		cfg.ReapInterval = 5 * time.Second
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = 30 * time.Second
	}
	if cfg.ProvisionTimeout == 0 {
		cfg.ProvisionTimeout = 10 * time.Minute
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if err := idleDefaults(&cfg); err != nil {
		return nil, err
	}
	be, err := normalizeEgress(cfg.BuildEgress)
	if err != nil {
		return nil, fmt.Errorf("build egress: %w", err)
	}
	cfg.BuildEgress = be
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{cfg: cfg, store: store, reg: reg, rt: rt, log: cfg.Logger, stop: cancel, diffs: changes.NewCache(64)}
	s.wire(ctx)
	return s, nil
}

// wire makes the core's parts, each given only what it declares it needs.
func (s *Service) wire(ctx context.Context) {
	cfg := s.cfg
	gate := &freeze.Gate{}
	s.gate = gate
	s.ops = ops.NewRunner(ctx, s.store.Operations, opAdmitter{s}, cfg.Observer, cfg.Node, s.log)
	s.quota = quota.New(quotaStore{s.store.Tenants, s.store.Projects}, cfg.DefaultTTL, cfg.MaxTTL)
	s.content = gc.NewContent(s.store.Content, s.reg, s.log)
	s.images = images.New(cfg.WorkDir, s.store.Content, s.reg, s.content)
	s.saver = save.New(save.Deps{Node: cfg.Node, WorkDir: cfg.WorkDir, Runtime: s.rt, Store: saveStore{s.store.Instances, s.store.Projects, s.store.Versions, s.store.Operations}, Reg: s.reg,
		Content: s.content, Quota: s.quota, Ops: s.ops, Gate: gate, Log: s.log, Observer: cfg.Observer})
	// A nil *workspace.Manager must stay a nil interface: "no volumes".
	var storage workspace.Storage
	var gcVolumes gc.Volumes
	if cfg.Volumes != nil {
		storage, gcVolumes = cfg.Volumes, cfg.Volumes
	}
	s.vols = workspace.NewVolumes(cfg.Node, volumeStore{s.store.Projects, s.store.Instances, s.store.Volumes, s.store.Versions}, storage, cfg.Objects, s.quota, s.log).WithHomes(homeStore{s.store.Volumes, s.store.Versions})
	s.volumes = workspace.NewFeature(s.vols, gate, s.rt, s.log)
	// One cache of the node's memory images for the checkpoints that
	// write them and the resumes and wakes that read them.
	localMem := newLocalMemory(filepath.Join(cfg.WorkDir, "memory-cache"), cfg.MemoryCacheBytes, s.log)
	lifeMemory, lifeEngine := lifecycleMemory(s.reg, s.rt, localMem)
	lazyMemory, _ := lazyMemoryOf(cfg.MemoryRestore, lifeMemory) // checked in New
	s.life = lifecycle.New(ctx, lifecycle.Deps{Node: cfg.Node, Store: lifecycleStore{s.store.Instances, s.store.Projects, s.store.Versions, s.store.Tenants, s.store.Nodes}, Runtime: s.rt, Registry: s.reg,
		Volumes: s.vols, Quota: s.quota, Saver: s.saver, Gate: gate, Ops: s.ops, Log: s.log, Observer: cfg.Observer,
		DefaultLimits: cfg.DefaultLimits, BuildEgress: cfg.BuildEgress, HibernateAfter: cfg.HibernateAfter,
		PrefetchWindow: cfg.PrefetchWindow, ReapInterval: cfg.ReapInterval, ReconcileInterval: cfg.ReconcileInterval,
		ProvisionTimeout: cfg.ProvisionTimeout,
		IdleAfter:        cfg.IdleAfter, IdleAction: cfg.IdleAction, IdleInterval: cfg.IdleInterval, ActivityFlush: cfg.ActivityFlush,
		Pools: s.store.Instances, PoolInterval: cfg.PoolInterval, PoolRefillDelay: cfg.PoolRefillDelay,
		Memory: lifeMemory, Engine: lifeEngine, WorkDir: cfg.WorkDir, LazyMemory: lazyMemory})
	s.cmds = command.New(cfg.Node, s.store.Instances, s.rt, gate).WithActivity(s.life).WithExits(s.life)
	s.inst = lifecycle.NewInstances(s.life, lifecycle.InstancesDeps{WakeWait: cfg.WakeWait, Exec: s.cmds, NewerCurrent: s.newerCurrent})
	s.saves = wrap.TouchOnSave(s.saver, s.inst)
	s.builds = builder.New(builder.Deps{Store: buildStore{s.store.Projects, s.store.Versions, s.store.Content}, Reg: s.reg, Runtime: s.rt, Capturer: s.saver, Instances: s.life,
		Quota: s.quota, Content: s.content, Bases: bases{s}, Ops: s.ops, Log: s.log, Objects: cfg.Objects, BuildKit: cfg.BuildKit})
	s.gc = gc.NewCollector(gcStore{s.store.Projects, s.store.Versions, s.store.Content}, s.reg, s.ops, cfg.Sweeper, gcVolumes).WithArchives(s.vols)
	placer := cluster.NewPlacer(cfg.Node, cfg.Cluster.Placement == PlacementLocal, placerStore{s.store.Projects, s.store.Versions, s.store.Nodes, s.store.Volumes}, s.life, s.vols)
	s.wireRollouts(ctx)
	s.wireSquash(ctx)
	// A nil *workspace.Manager must stay a nil interface: "no volumes".
	var freezer checkpoint.Freezer
	if cfg.Volumes != nil {
		freezer = cfg.Volumes
	}
	cdeps := checkpoint.Deps{Node: cfg.Node, WorkDir: cfg.WorkDir,
		Store: checkpointStore{s.store.Instances, s.store.Projects, s.store.Versions, s.store.Content}, Saver: s.saver, Ops: s.ops, Instances: s.life, Quota: s.quota,
		Freezer: freezer, Objects: cfg.Objects, Archives: s.vols, Registry: s.reg, Log: s.log}
	// A nil *memImages must stay a nil interface: "no memory checkpoints".
	if mem, engine := newMemImages(s.reg, s.rt, localMem); mem != nil {
		cdeps.Memory, cdeps.MemImages = engine, mem
	}
	// Nil interfaces, not typed nils, when reg cannot: "no export".
	if p, ok := s.reg.(checkpoint.Portable); ok {
		cdeps.Portable, cdeps.Content = p, s.content
	}
	if st := memoryArtifacts(s.reg); st != nil {
		cdeps.Artifacts = st
	}
	s.checkpoints, s.forks = checkpoint.New(cdeps), checkpoint.NewForks(cdeps)
	s.gc.WithMemoryRecount(s.checkpoints)
	s.ports = ports.New(ports.Deps{Node: cfg.Node, Store: portStore{s.store.Nodes, s.store.Projects, s.store.Instances}, Runtime: s.rt, Instances: s.life, Dials: cfg.Dials, Threads: s.admitThreads})
	// A runtime without file access (a test's fake) gives a file API
	// that answers ErrUnavailable.
	var frt fileapi.Runtime
	if r, ok := s.rt.(fileapi.Runtime); ok {
		frt = r
	}
	s.files = fileapi.New(fileapi.Deps{Node: cfg.Node, WorkDir: cfg.WorkDir, MaxBytes: cfg.MaxFileBytes, Runtime: frt, Instances: s.inst, Gate: gate})
	s.keys, s.tokens = sshkeys.New(s.store.Access), tokens.New(s.store.Access)
	s.secretCache = newSecretCache()
	s.gateway = gateway.New(gatewayStore{s.store.Projects, s.store.Tenants, s.secretCache}, cfg.SecretKey, s.log)
	s.hooks = webhooks.New(s.store.Webhooks, cfg.Webhooks, s.log)
	s.hooksRun = func() { s.hooks.Run(ctx) }
	s.listening.Add(1)
	go func() {
		defer s.listening.Done()
		s.secretCache.listen(ctx, s.store.Pool(), 2*time.Second, s.log)
	}()
	s.cluster = cluster.New(ctx, cluster.Deps{Node: cfg.Node, DataDir: cfg.DataDir, Version: BuildVersion, Config: cfg.Cluster,
		Store: clusterStore{s.store.Nodes, s.store.Instances, s.store.Operations}, Instances: s.life, Volumes: s.vols, Ops: s.ops, Observer: cfg.Observer,
		Checkpoints: s.checkpoints.Due, Placer: placer, Log: s.log})
}

// Close cancels running operations and waits for them to settle.
func (s *Service) Close() {
	s.stop()
	s.ops.Wait()
	s.life.Wait()
	s.squashing.Wait()
	s.cluster.Wait()
	s.hooks.Wait()
	s.files.Close()
	s.listening.Wait()
}

// Info describes this server.
func (s *Service) Info(ctx context.Context) (types.Info, error) {
	return types.Info{Version: BuildVersion, Node: s.cfg.Node, DataDir: s.cfg.DataDir,
		Registry: s.reg.Addr(), Components: s.cfg.Components, SSH: s.sshInfo.Load()}, nil
}

// SetSSHInfo records where the node's SSH endpoint listens, for Info;
// nil = none.
func (s *Service) SetSSHInfo(info *types.SSHInfo) { s.sshInfo.Store(info) }

// BuildVersion of envd, set at build time.
var BuildVersion = "0.1.0-dev"

// bases resolves base images for builds and migrations (builder.Bases).
type bases struct{ s *Service }

func (b bases) ResolveBase(ctx context.Context, tenant, base string) (registry.Image, error) {
	return b.s.images.ResolveBase(ctx, tenant, base)
}
