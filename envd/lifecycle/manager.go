// Package lifecycle owns instances on this node: creating them from a
// version (at once or as a restore operation), the verbs that move them
// between states (pause, resume, stop, start, delete, renew), hibernation
// of idle stopped ones, the TTL reaper, idle stop and wake on access
// (idle.go), the reconciler that makes the runtime and the instance rows
// agree, and OOM kills. It needs the
// store's instance, project and version records (Store), the container
// runtime but for its mounts and exec (Runtime), the project's volumes
// (Volumes), the quota's TTL, start and disk checks (Quota), the save
// path's Guard, Capture and Commit for hibernation (Saver), the node's
// freeze gate, and operations (Operations).
//
// Every change of state is a compare-and-swap on the instance's row
// (versions.Instances.Transition): a verb names the states it may start from,
// moves to a transitional state (Pausing, Resuming, Stopping, Pending)
// while the runtime works, then to the final one. Two verbs racing on one
// instance cannot both pass the first step; the loser gets 409
// failed_precondition with the current state in the details.
//
//	Pending  --started-->  Running  --user_pause--> Pausing --> Paused
//	Paused   --user_resume--> Resuming --> Running
//	Running|Paused --user_stop--> Stopping --> Stopped
//	Stopped  --started--> Pending --> Running          (generation + 1)
//	Running  --idle--> Stopping --> Stopped            (hibernated unless retained with action stop; idle.go)
//	any      --user_delete|ttl_expiry--> Terminated
//	any      --provision_failed|node_lost|task_exited|provision_timeout--> Failed
package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/freeze"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/envd/save"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// Store is what instances need of the store.
type Store interface {
	CreateInstance(ctx context.Context, in versions.Instance) (versions.Instance, error)
	GetInstance(ctx context.Context, tenant, id string) (versions.Instance, error)
	ListInstances(ctx context.Context, tenant, project string) ([]versions.Instance, error)
	ListInstancesAfter(ctx context.Context, tenant, project string, after versions.InstanceCursor, limit int) ([]versions.Instance, error)
	ListNodeInstances(ctx context.Context, node string) ([]versions.Instance, error)
	Transition(ctx context.Context, id string, from []types.InstanceState, to types.InstanceState, reason, message string) (versions.Instance, error)
	Rehome(ctx context.Context, id, node string, layerVersion int, reason, message string) (versions.Instance, error)
	Hibernated(ctx context.Context, id string, v int, reason, message string) (versions.Instance, error)
	StopHibernated(ctx context.Context, id string, v int, reason, message string) (versions.Instance, error)
	StopHibernatedWith(ctx context.Context, id string, h versions.Hibernation, reason, message string) (versions.Instance, error)
	// TransitionHibernating is Transition that records the checkpoint a
	// hibernation with memory stops the instance on.
	TransitionHibernating(ctx context.Context, id string, from []types.InstanceState, to types.InstanceState, checkpoint int, reason, message string) (versions.Instance, error)
	// Rehibernate puts a hibernation or wake with memory cut short
	// (Stopping, Pending) back to Stopped, hibernated on its checkpoint's
	// version.
	Rehibernate(ctx context.Context, id, reason, message string) (versions.Instance, error)
	ListCheckpoints(ctx context.Context, tenant, project string) ([]versions.Checkpoint, error)
	BumpGeneration(ctx context.Context, id string) (int64, error)
	SetExpiry(ctx context.Context, id string, at *time.Time) (versions.Instance, error)
	NextExpiry(ctx context.Context, node string) (*time.Time, error)
	ExpiredInstances(ctx context.Context, node string, now time.Time) ([]versions.Instance, error)
	IdleRetained(ctx context.Context, node string, before time.Time) ([]versions.Instance, error)
	GetProject(ctx context.Context, tenant, name string) (versions.Project, error)
	SetProjectPrefetch(ctx context.Context, tenant, name string, files []string, head int, replace bool) error
	GetVersion(ctx context.Context, tenant, project string, n int) (versions.Version, error)
	LimitMaxima(ctx context.Context, tenant string) (versions.LimitMaxima, error)
	RecordActivity(ctx context.Context, at map[string]time.Time) error
	IdleCandidates(ctx context.Context, node string) ([]versions.IdleState, error)
	IdleStates(ctx context.Context, ids []string) (map[string]versions.IdleState, error)
	GetCheckpoint(ctx context.Context, tenant, project string, number int) (versions.Checkpoint, error)
	// ClaimCheckpointMemory makes instance the one running checkpoint
	// number's processes (ErrConflict while another live one does).
	ClaimCheckpointMemory(ctx context.Context, tenant, project string, number int, instance string) error
	RecordImage(ctx context.Context, node, image string) error
}

// Runtime is what instances need of the container runtime: everything
// but the rootfs mounts (the save path's) and exec (envd/command's).
type Runtime interface {
	Pull(ctx context.Context, ref string) error
	Create(ctx context.Context, spec runtime.InstanceSpec) error
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	Stop(ctx context.Context, id string) error
	Start(ctx context.Context, id string) error
	SetLabels(ctx context.Context, id string, labels map[string]string) error
	SetNetworkPolicy(ctx context.Context, id string, pol runtime.NetworkPolicy) error
	Remove(ctx context.Context, id string) error
	List(ctx context.Context) ([]string, error)
	Status(ctx context.Context, id string) (runtime.Status, error)
	// Address is Status's Address without asking containerd (views).
	Address(id string) string
}

// Registry is where instances pull their images from.
type Registry interface {
	Addr() string
}

// Volumes are a project's volumes on this node (workspace.Volumes).
type Volumes interface {
	Mounts(ctx context.Context, proj versions.Project) ([]runtime.Mount, []string, error)
	Paths(ctx context.Context, tenant, project string) []string
	// RestoreCheckpoint restores the project's volumes on this node from
	// checkpoint number before instance except (being started) mounts them.
	RestoreCheckpoint(ctx context.Context, proj versions.Project, number int, except string) error
	// Follow brings the project's volume data to this node before an
	// instance starts here (workspace.Volumes.Follow); Handoff archives it
	// when nothing of the project runs here any more.
	Follow(ctx context.Context, proj versions.Project) error
	Handoff(ctx context.Context, tenant, project string)
}

// Quota are the checks a start makes (quota.Checker).
type Quota interface {
	TTL(ctx context.Context, tenant, ttl string) (*time.Time, error)
	Start(ctx context.Context, tenant string) error
	// Starts is Start for n instances started together (a fork).
	Starts(ctx context.Context, tenant string, n int) error
	Disk(ctx context.Context, tenant string, diskBytes int64) error
}

// Saver is the save path a hibernation captures through (save.Saver).
type Saver interface {
	Guard(ctx context.Context, id, what string) (release func(), err error)
	Capture(ctx context.Context, ev save.Events, cp save.Capture) (save.Captured, error)
	Commit(ctx context.Context, c save.Captured, commit versions.Commit) (versions.Version, bool, error)
	// Abandon ends a capture that will not be committed.
	Abandon(ctx context.Context, c save.Captured)
	// StopFIFOs is the not_saved message of the FIFOs a stop of the
	// running instance id loses (gVisor keeps them in the sandbox's
	// memory), "" when none.
	StopFIFOs(ctx context.Context, id string) (string, map[string]any)
}

// Operations starts restores, settles interrupted ones and makes instance
// creation idempotent (ops.Runner).
type Operations interface {
	Start(ctx context.Context, p types.Principal, spec ops.Spec) (types.Operation, error)
	Settle(ctx context.Context, op versions.Operation, err error)
	Succeed(ctx context.Context, op versions.Operation, result any)
	Claim(ctx context.Context, p types.Principal, key, kind string, req any, objectID string) (existing string, release func(), err error)
	Repoint(ctx context.Context, p types.Principal, key, objectID string) error
}

// Observer is told how long instances take to run and which fail, for
// the node's metrics.
type Observer interface {
	// Restored is an instance Running d after its creation (path
	// "create") or its wake from hibernation (path "wake") began.
	Restored(path string, d time.Duration)
	// InstanceFailed is an instance this node marked Failed for reason.
	InstanceFailed(reason string)
	// Idled is an idle action (stop, hibernate) that ended with result
	// done, canceled (activity came) or failed (the instance runs on).
	Idled(action, result string)
}

// Deps are what a Manager works with, and the node's settings for
// instances (see envd.Config for each).
type Deps struct {
	Node     string
	Store    Store
	Runtime  Runtime
	Registry Registry
	Volumes  Volumes
	Quota    Quota
	Saver    Saver
	Gate     *freeze.Gate // shared with the save path
	Ops      Operations
	Log      *slog.Logger
	Observer Observer

	DefaultLimits     types.Limits
	BuildEgress       string // normal text form
	HibernateAfter    time.Duration
	PrefetchWindow    time.Duration
	ReapInterval      time.Duration
	ReconcileInterval time.Duration
	ProvisionTimeout  time.Duration

	// Idle stop and wake (idle.go): the node's default idle setting, how
	// often the idle reaper looks, how often activity is flushed to the
	// store (how stale other nodes may see it).
	IdleAfter     time.Duration
	IdleAction    string
	IdleInterval  time.Duration
	ActivityFlush time.Duration
	// Pools keeps projects' warm pools (pool.go); nil = no pools.
	// PoolInterval is how often the node refills them (default 2s).
	Pools        PoolStore
	PoolInterval time.Duration
	// PoolRefillDelay is how long after a claim on this node the pool
	// waits before starting replacements (default
	// DefaultPoolRefillDelay; negative: none).
	PoolRefillDelay time.Duration
	// Memory pulls checkpoints' memory images into WorkDir for a resume;
	// nil = this node resumes none (memory_checkpoint_unsupported).
	Memory  MemoryImages
	WorkDir string
	// LazyMemory, when set, serves a resume's memory image from the
	// registry as it is read instead of pulling it whole first
	// (resume_lazy.go); nil = the whole pull.
	LazyMemory LazyMemory
	// Engine writes memory images of running instances for a hibernation
	// with memory (hibernate_memory.go); nil, or Memory nil, = this node
	// keeps no memory (memory_checkpoint_unsupported, and the idle action
	// hibernate-memory hibernates the disk alone).
	Engine MemoryEngine
}

// MemoryImages pulls a memory image ("repo@digest") whole into dir, which
// must not exist, and pushes one (registry/memimage).
type MemoryImages interface {
	PullMemory(ctx context.Context, image, dir string) error
	// PushMemory pushes dir as the memory image of the version whose
	// manifest digest is subject in repo.
	PushMemory(ctx context.Context, dir, repo, subject string) (versions.CheckpointMemory, error)
}

// LazyMemory mounts a memory image ("repo@digest") under dir, which
// exists and is empty, for a restore that starts before the image is local
// (registry/memimage/lazyfs). Fetches outlive ctx's cancellation (the
// restored sandbox reads on after the request); MountedMemory.Close stops
// them.
type LazyMemory interface {
	MountMemory(ctx context.Context, image, dir string) (MountedMemory, error)
}

// MountedMemory is a mounted memory image (lazyfs.Mount).
type MountedMemory interface {
	Image() string // the image directory to restore from
	Detach() error // out of the mount table; the engine's descriptors read on
	Close() error  // stop fetching, out of the mount table
	Err() error    // the first fetch error
	Prefetched() <-chan struct{}
}

// MemoryEngine writes the memory image of an instance's processes
// (runtime.Runtime): only instances of a class whose engine can (gVisor).
type MemoryEngine interface {
	InstanceClass(ctx context.Context, id string) (runtime.Class, error)
	// CheckpointMemory writes the image into dir and leaves the instance
	// as it was (a frozen one frozen).
	CheckpointMemory(ctx context.Context, id, dir string) error
	// ExternalConnections lists the instance's established TCP
	// connections with peers outside it, which a resume would not have.
	ExternalConnections(ctx context.Context, id string) ([]string, error)
}

// Manager manages this node's instances.
type Manager struct {
	Deps
	ctx      context.Context // lives as long as the service
	wg       sync.WaitGroup  // background loops and watchers
	reapWake chan struct{}

	mu     sync.Mutex
	acting map[string]int // instance -> verbs of this process running on it
	// frees: instance -> closed when this process has removed its
	// container after a hibernation (freeing, waitFreed).
	frees map[string]chan struct{}

	activity *activity // idle.go

	poolKick chan struct{} // pool.go: refill now
	// pool.go: the last claim on this node (ns since monoEpoch; 0: none), and since when the
	// pool loop has held its refill back (the loop's own).
	poolClaimedAt     atomic.Int64
	poolDeferredSince time.Time
}

// New makes a Manager whose background work runs under ctx.
func New(ctx context.Context, d Deps) *Manager {
	return &Manager{Deps: d, ctx: ctx, reapWake: make(chan struct{}, 1), activity: newActivity(), poolKick: make(chan struct{}, 1)}
}

// act records that a verb of this process acts on instance id until done
// is called: the reconciler leaves its transitional state alone.
func (m *Manager) act(id string) (done func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.acting == nil {
		m.acting = map[string]int{}
	}
	m.acting[id]++
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.acting[id]--; m.acting[id] <= 0 {
			delete(m.acting, id)
		}
	}
}

// freeing marks instance id's container as being removed by this process
// after a hibernation, from before the instance can be woken until done is
// called: a wake here waits for it (waitFreed). Otherwise the removal's
// tail (the instance's files, its network) would land on the new container
// of the same id that the wake makes.
func (m *Manager) freeing(id string) (done func()) {
	ch := make(chan struct{})
	m.mu.Lock()
	if m.frees == nil {
		m.frees = map[string]chan struct{}{}
	}
	m.frees[id] = ch
	m.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			if m.frees[id] == ch {
				delete(m.frees, id)
			}
			m.mu.Unlock()
			close(ch)
		})
	}
}

// waitFreed waits until no removal of instance id's container (freeing)
// runs in this process.
func (m *Manager) waitFreed(ctx context.Context, id string) error {
	m.mu.Lock()
	ch := m.frees[id]
	m.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("instance %q: wait for its old container's removal: %w", id, ctx.Err())
	}
}

// inFlight reports whether a verb of this process acts on instance id.
func (m *Manager) inFlight(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.acting[id] > 0
}

// Wait returns when the background work has returned (after ctx ended).
func (m *Manager) Wait() { m.wg.Wait() }

// View is the instance as the API answers it, without the runtime's view.
func View(in versions.Instance) types.Instance {
	return types.Instance{ID: in.ID, Project: in.Project, Node: in.Node, Version: in.Version,
		LastSavedVersion: in.LastSavedVersion, Generation: in.Generation, State: in.State,
		Reason: in.Reason, Message: in.Message, Retain: in.Retain, ExpiresAt: in.ExpiresAt,
		HibernatedVersion: in.HibernatedVersion, HibernatedCheckpoint: hibernatedCheckpoint(in), MemoryNotKept: in.MemoryNotKept, CreatedAt: in.CreatedAt, LastTransitionAt: in.LastTransitionAt,
		Limits: spec.InstanceLimits(in.Spec), Placement: in.Placement}
}
