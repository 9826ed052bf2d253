package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// Labels envd puts on containers, so the reconciler can tell its own.
const (
	LabelGeneration = "envd.generation"
	LabelProject    = "envd.project"
	LabelTenant     = "envd.tenant"
)

// view is the instance as a user sees it: with its current address and
// what protects its data.
func (m *Manager) view(ctx context.Context, in versions.Instance) types.Instance {
	out := []types.Instance{m.viewWith(ctx, in, m.Volumes.Paths(ctx, in.Tenant, in.Project))}
	m.withIdle(ctx, out)
	return out[0]
}

func (m *Manager) viewWith(ctx context.Context, in versions.Instance, volumes []string) types.Instance {
	out := m.withEndpoint(ctx, View(in))
	pr := types.Protection{RetainedLayer: in.Retain, LastSavedVersion: in.LastSavedVersion}
	if len(volumes) > 0 {
		pr.Volumes = volumes
	}
	saved := fmt.Sprintf("version %d", in.Version)
	if in.LastSavedVersion > 0 {
		saved = fmt.Sprintf("version %d (its last save)", in.LastSavedVersion)
	}
	switch {
	case in.State == types.StateTerminated:
		pr.LostOnStop, pr.LostOnRemove = "nothing more: the instance is gone", "nothing more: the instance is gone"
	case in.Retain:
		pr.LostOnStop = "memory and running processes; files are kept on the node"
		pr.LostOnRemove = "root filesystem changes not saved since " + saved
	default:
		pr.LostOnStop = "stop is refused: the instance is not retained"
		pr.LostOnRemove = "root filesystem changes not saved since " + saved
	}
	if len(pr.Volumes) > 0 {
		pr.LostOnRemove += "; volumes are kept"
	}
	out.Protection = pr
	return out
}

// views is view for a list, reading each project's volumes once.
func (m *Manager) views(ctx context.Context, ins []versions.Instance) []types.Instance {
	out := make([]types.Instance, 0, len(ins))
	volumes := map[string][]string{}
	for _, in := range ins {
		vs, ok := volumes[in.Project]
		if !ok {
			vs = m.Volumes.Paths(ctx, in.Tenant, in.Project)
			volumes[in.Project] = vs
		}
		out = append(out, m.viewWith(ctx, in, vs))
	}
	m.withIdle(ctx, out)
	return out
}

// CreateInstance starts an instance of project from req.Version or the
// current version. It returns when the instance runs (or has failed). A
// retry with the same idempotency key and request returns the same instance.
func (m *Manager) CreateInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, idempotencyKey string) (types.Instance, error) {
	if err := names.Validate("project", project); err != nil {
		return types.Instance{}, err
	}
	id := names.NewID(project)
	existing, release, err := m.Ops.Claim(ctx, p, idempotencyKey, "create_instance",
		struct {
			Project string
			Req     types.CreateInstanceRequest
		}{project, req}, id)
	if err != nil {
		return types.Instance{}, err
	}
	if existing != "" {
		return ops.Await(ctx, func(ctx context.Context) (types.Instance, error) { return m.GetInstance(ctx, p, existing) })
	}
	if in, ok := m.claimPooled(ctx, p, project, req); ok {
		// A retry with the key must get this instance, not the id the key
		// was claimed for.
		if err := m.Ops.Repoint(ctx, p, idempotencyKey, in.ID); err != nil {
			m.Log.Warn("idempotency key of a pooled claim", "instance", in.ID, "err", err)
			release()
		}
		return in, nil
	}
	in, err := m.createInstance(ctx, p, id, project, req)
	if err != nil && !errors.Is(err, errProvision) {
		release() // nothing was made; a provisioning failure leaves a Failed instance the key points at
	}
	return in, err
}

// errProvision marks a failure after the instance was recorded.
var errProvision = errors.New("provisioning failed")

func (m *Manager) createInstance(ctx context.Context, p types.Principal, id, project string, req types.CreateInstanceRequest) (types.Instance, error) {
	plan, err := m.planInstance(ctx, p, project, req)
	if err != nil {
		return types.Instance{}, err
	}
	return m.startPlanned(ctx, p, id, plan)
}

// instancePlan is a checked request to start an instance.
type instancePlan struct {
	proj    versions.Project
	version versions.Version
	expires *time.Time
	retain  bool
	// isolated: a build or trial container: no volumes, its reads not
	// recorded for prefetch.
	isolated bool
	// checkpoint: started from this checkpoint (its version is version),
	// the volumes restored from its archives first.
	checkpoint int
	// memory: the checkpoint's memory image, resumed instead of a fresh
	// init ("" for none).
	memory string
	// forkMemory: a local memory image directory (a fork's checkpoint,
	// taken on this node) that the instance continues without claiming
	// the checkpoint: a copy, not a resume ("" for none).
	forkMemory string
	// placement: why the instance runs on this node (types.PlacementFrom).
	placement string
}

// planInstance checks a request to start an instance of project: the
// version (0 = current) exists and is ready, the TTL is allowed. It changes
// nothing.
func (m *Manager) planInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest) (instancePlan, error) {
	if req.Version < 0 {
		return instancePlan{}, fmt.Errorf("version %d: %w", req.Version, errdefs.ErrInvalidArgument)
	}
	expires, err := m.Quota.TTL(ctx, p.Tenant, req.TTL)
	if err != nil {
		return instancePlan{}, err
	}
	// Early, so that an async restore is refused before its operation
	// exists; the store checks again, atomically, when it records one.
	if err := m.Quota.Start(ctx, p.Tenant); err != nil {
		return instancePlan{}, err
	}
	proj, err := m.Store.GetProject(ctx, p.Tenant, project)
	if err != nil {
		return instancePlan{}, err
	}
	if err := m.checkClass(ctx, p.Tenant, proj); err != nil {
		return instancePlan{}, err
	}
	n := req.Version
	var memory string
	if req.Checkpoint != 0 {
		if req.Version != 0 || req.Checkpoint < 0 {
			return instancePlan{}, fmt.Errorf("checkpoint %d with version %d: give one of them: %w", req.Checkpoint, req.Version, errdefs.ErrInvalidArgument)
		}
		c, err := m.Store.GetCheckpoint(ctx, p.Tenant, project, req.Checkpoint)
		if err != nil {
			return instancePlan{}, err
		}
		if len(c.Archives) > 0 {
			// Early, before anything is recorded: the volumes are restored
			// on this node, which needs them unmounted here.
			if err := m.noLiveInstanceHere(ctx, p.Tenant, project, req.Checkpoint); err != nil {
				return instancePlan{}, err
			}
		}
		n = c.Version
		memory = c.Memory.Image
		if memory != "" && m.Memory == nil {
			return instancePlan{}, errdefs.WithDetails(fmt.Errorf("checkpoint %d of project %q holds processes (a memory image), and node %q cannot resume them: %w",
				req.Checkpoint, project, m.Node, errdefs.ErrMemoryUnsupported), map[string]any{"reason": "class"})
		}
	}
	if n == 0 {
		n = proj.Current
	}
	v, err := m.Store.GetVersion(ctx, p.Tenant, project, n)
	if err != nil {
		return instancePlan{}, err
	}
	if v.State != "ready" {
		return instancePlan{}, fmt.Errorf("version %d of project %q is %s, only ready versions can be started: %w", n, project, v.State, errdefs.ErrFailedPrecondition)
	}
	return instancePlan{proj: proj, version: v, expires: expires, retain: req.Retain, checkpoint: req.Checkpoint, memory: memory, placement: types.PlacementFrom(ctx)}, nil
}

// startPlanned records the instance as Pending, provisions it and returns
// it Running. A provisioning failure leaves it Failed (errProvision).
func (m *Manager) startPlanned(ctx context.Context, p types.Principal, id string, plan instancePlan) (types.Instance, error) {
	n, project := plan.version.Number, plan.proj.Name
	ps, _ := spec.Parse(plan.proj.Spec)
	limits, err := m.effectiveLimits(ctx, p.Tenant, ps.Limits)
	if err != nil {
		return types.Instance{}, err
	}
	if err := m.Quota.Disk(ctx, p.Tenant, limits.DiskBytes); err != nil {
		return types.Instance{}, err
	}
	if !plan.isolated && plan.checkpoint == 0 {
		// Refused before the instance is recorded when its volumes cannot
		// come to this node (workspace.Volumes.Follow). A start from a
		// checkpoint brings them from its archives instead (a project
		// whose volume home was lost starts again this way).
		if err := m.Volumes.Follow(ctx, plan.proj); err != nil {
			return types.Instance{}, err
		}
	}
	created := time.Now()
	in, err := m.Store.CreateInstance(ctx, versions.Instance{
		ID: id, Tenant: p.Tenant, Project: project, Node: m.Node, Version: n,
		State: types.StatePending, Reason: types.ReasonCreated, Message: fmt.Sprintf("starting from version %d", n),
		ExpiresAt: plan.expires, Retain: plan.retain, Spec: spec.MarshalInstance(limits), Placement: plan.placement,
	})
	if err != nil {
		return types.Instance{}, err
	}
	proj := plan.proj
	if plan.isolated {
		proj.Spec = nil // no volumes
		// A build reaches its package sources whatever the project's
		// egress, and no other instance.
		proj.Egress, proj.IsolateInstances = m.BuildEgress, true
	}
	if plan.checkpoint != 0 && !plan.isolated {
		if err := m.Volumes.RestoreCheckpoint(ctx, proj, plan.checkpoint, in.ID); err != nil {
			m.abandonPending(ctx, in.ID, err.Error())
			return types.Instance{}, fmt.Errorf("start instance of %q from checkpoint %d: %w: %w", project, plan.checkpoint, errProvision, err)
		}
	}
	var restoreFrom string
	var resume resumeImage
	var memoryTime time.Duration
	if plan.memory != "" && !plan.isolated {
		memStart := time.Now()
		ri, err := m.claimMemory(ctx, in, plan)
		memoryTime = time.Since(memStart)
		if err != nil {
			m.abandonPending(ctx, in.ID, err.Error())
			return types.Instance{}, fmt.Errorf("resume checkpoint %d of %q: %w: %w", plan.checkpoint, project, errProvision, err)
		}
		defer os.RemoveAll(ri.scratch)
		restoreFrom, resume = ri.dir, ri
	} else if plan.forkMemory != "" && !plan.isolated {
		restoreFrom = plan.forkMemory
	}
	hostname := in.Project
	if plan.forkMemory != "" {
		// A copy of a fork with memory is named after itself: its
		// processes came from another instance, and the copies must be
		// told apart. runsc sets the restored kernel's hostname from the
		// spec unless a program inside had set one (sethostname), which
		// the copies keep.
		hostname = in.ID
	}
	var steps runtime.CreateSteps
	provisionStart := time.Now()
	err = m.provisionFrom(ctx, in, proj, plan.version.Image, plan.isolated, restoreFrom, hostname, &steps)
	if err = resume.started(m, in.ID, err); err != nil {
		m.abandonPending(ctx, in.ID, err.Error())
		if errors.Is(err, runtime.ErrNotOnClass) {
			err = fmt.Errorf("%w: %w", err, errdefs.ErrMemoryUnsupported)
		}
		return types.Instance{}, fmt.Errorf("start instance of %q from version %d: %w: %w", project, n, errProvision, err)
	}
	var reads *firstReads
	if !plan.isolated {
		reads = m.startFirstReads(ctx, in, plan.proj.Compression)
		// Beside the warm of a lazy instance, and before the client's
		// first command either way.
		m.kickAgent(in.ID)
	}
	provisioned := time.Now()
	if err := m.warm(ctx, in, plan.proj); err != nil {
		reads.abandon()
		m.abandonPending(ctx, in.ID, err.Error())
		return types.Instance{}, fmt.Errorf("start instance of %q from version %d: %w", project, n, err)
	}
	in, err = m.Store.Transition(ctx, in.ID, []types.InstanceState{types.StatePending}, types.StateRunning, types.ReasonStarted, fmt.Sprintf("running version %d", n))
	if err != nil {
		reads.abandon()
		return types.Instance{}, err
	}
	m.Observer.Restored("create", time.Since(created))
	// The steps of a start, for the bench's resume and fork tables: the
	// memory image made local (a resume), the rest of the provisioning
	// (volumes, the version image's pull, instance files), the container
	// (snapshot and spec), the network, the task's creation, its start
	// (where runsc restores a memory image), and the warm.
	m.Log.Debug("started instance", "instance", in.ID, "provision_ms", provisioned.Sub(created).Milliseconds(),
		"warm_ms", time.Since(provisioned).Milliseconds(), "memory", restoreFrom != "", "memory_ms", memoryTime.Milliseconds(),
		"other_ms", (provisioned.Sub(provisionStart) - steps.Container - steps.Network - steps.Task - steps.Start).Milliseconds(),
		"container_ms", steps.Container.Milliseconds(), "network_ms", steps.Network.Milliseconds(),
		"task_ms", steps.Task.Milliseconds(), "start_ms", steps.Start.Milliseconds())
	m.recordFirstReads(reads)
	return m.view(ctx, in), nil
}

// abandonPending removes what provisioning made of a Pending instance and
// marks it Failed (provision_failed) with msg.
//
// The transition comes first and the removal only if it happened: an
// instance that got past Pending (a restore whose operation was not
// recorded as finished before a crash) is left alone, never removed.
func (m *Manager) abandonPending(ctx context.Context, id, msg string) bool {
	m.forgetSessionEnds(id) // the first reads' head: no session of it will end
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_, err := m.Store.Transition(cctx, id, []types.InstanceState{types.StatePending}, types.StateFailed, types.ReasonProvisionFailed, msg)
	if err != nil {
		if !errors.Is(err, errdefs.ErrFailedPrecondition) && !errors.Is(err, errdefs.ErrNotFound) {
			m.Log.Warn("record failed instance", "instance", id, "err", err)
		}
		return false
	}
	m.Observer.InstanceFailed(types.ReasonProvisionFailed)
	if err := m.Runtime.Remove(cctx, id); err != nil {
		m.Log.Warn("remove failed instance", "instance", id, "err", err)
	}
	return true
}

// provision pulls the version's image and creates the running container
// with the project's volumes and network policy (build: a build container,
// labelled LabelBuild, whose policy does not follow the project's).
func (m *Manager) provision(ctx context.Context, in versions.Instance, proj versions.Project, image string, build bool) error {
	return m.provisionFrom(ctx, in, proj, image, build, "", in.Project, nil)
}

// provisionFrom is provision; with restoreFrom set (a memory image
// directory) the container continues its processes instead of a new init.
// hostname is the instance's (its project's name but for a fork's copies).
// steps, if set, gets the runtime's steps (runtime.InstanceSpec.Steps).
func (m *Manager) provisionFrom(ctx context.Context, in versions.Instance, proj versions.Project, image string, build bool, restoreFrom, hostname string, steps *runtime.CreateSteps) error {
	if !build {
		if err := m.Volumes.Follow(ctx, proj); err != nil {
			return err
		}
	}
	mounts, env, err := m.Volumes.Mounts(ctx, proj)
	if err != nil {
		return err
	}
	ref := m.Registry.Addr() + "/" + image
	pullStart := time.Now()
	if err := m.Runtime.Pull(ctx, ref); err != nil {
		return fmt.Errorf("pull %s: %w", image, err)
	}
	m.Log.Debug("pulled", "instance", in.ID, "image", image, "ms", time.Since(pullStart).Milliseconds())
	if !build {
		head, _, _ := prefetchParts(proj)
		m.readAheadLayers(in, ref, head)
	}
	// Placement prefers this node for the image from now on.
	if err := m.Store.RecordImage(ctx, m.Node, image); err != nil {
		m.Log.Warn("record pulled image", "image", image, "err", err)
	}
	var limits types.Limits
	if l := spec.InstanceLimits(in.Spec); l != nil {
		limits = *l
	}
	return m.Runtime.Create(ctx, runtime.InstanceSpec{
		ID: in.ID, Image: ref, Hostname: hostname, Mounts: mounts, Env: env,
		Limits: spec.RuntimeLimits(limits), AllowPrivilegeEscalation: limits.AllowPrivilegeEscalation,
		Network: networkPolicyOf(proj, build),
		Class:   runtime.Class(proj.RuntimeClass), // "" = the node's default
		// A build container runs the build's own steps, never dockerd:
		// it keeps the class's plain hardening.
		Docker:      proj.Docker && !build,
		RestoreFrom: restoreFrom,
		Steps:       steps,
		// A build's layer is saved: it runs with host ids (no user
		// namespace, whose shifted ids a save cannot read).
		HostIDs: build,
		// A shim's death fails every instance of its group: only one
		// tenant's. Builds keep a shim of their own.
		ShimGroup: shimGroup(in.Tenant, build),
		Labels: map[string]string{
			LabelGeneration: generationLabel(in.Generation),
			LabelProject:    in.Project,
			LabelTenant:     in.Tenant,
			LabelNode:       m.Node,
			LabelBuild:      strconv.FormatBool(build),
		},
	})
}

// ListInstances lists the tenant's instances, of one project or all.
func (m *Manager) ListInstances(ctx context.Context, p types.Principal, project string) ([]types.Instance, error) {
	if project != "" {
		if err := names.Validate("project", project); err != nil {
			return nil, err
		}
	}
	return m.ListInstancesAfter(ctx, p, project, versions.InstanceCursor{}, 0)
}

// ListInstancesAfter is a page of ListInstances: at most limit instances
// (0 = all) after the cursor.
func (m *Manager) ListInstancesAfter(ctx context.Context, p types.Principal, project string, after versions.InstanceCursor, limit int) ([]types.Instance, error) {
	if project != "" {
		if err := names.Validate("project", project); err != nil {
			return nil, err
		}
	}
	ins, err := m.Store.ListInstancesAfter(ctx, p.Tenant, project, after, limit)
	if err != nil {
		return nil, err
	}
	return m.views(ctx, ins), nil
}

// GetInstance returns one instance.
func (m *Manager) GetInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	in, err := m.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	return m.view(ctx, in), nil
}

func (m *Manager) instance(ctx context.Context, p types.Principal, id string) (versions.Instance, error) {
	if err := names.ValidateInstanceID(id); err != nil {
		return versions.Instance{}, err
	}
	return m.Store.GetInstance(ctx, p.Tenant, id)
}

// DeleteInstance terminates an instance: its container and writable layer
// are removed; saved versions and volumes stay.
func (m *Manager) DeleteInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	in, err := m.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	if in.State == types.StateTerminated {
		return View(in), nil
	}
	in, err = m.terminate(ctx, in, types.ReasonUserDelete, "deleted by the user")
	if err != nil {
		return types.Instance{}, err
	}
	return m.view(ctx, in), nil
}

// noLiveInstanceHere refuses a start from checkpoint while an instance of
// the project lives on this node: it has the volumes the checkpoint
// restores mounted.
func (m *Manager) noLiveInstanceHere(ctx context.Context, tenant, project string, checkpoint int) error {
	ins, err := m.Store.ListInstances(ctx, tenant, project)
	if err != nil {
		return err
	}
	for _, in := range ins {
		if in.Node == m.Node && in.State.Live() {
			return errdefs.WithDetails(fmt.Errorf("instance %s of project %q uses its volumes on this node: remove it before starting from checkpoint %d (or restore a volume to the checkpoint under it): %w",
				in.ID, project, checkpoint, errdefs.ErrFailedPrecondition), map[string]any{"instance": in.ID})
		}
	}
	return nil
}

// shimGroup is the runtime's shim group key of an instance of tenant
// (runtime.InstanceSpec.ShimGroup): a tenant's instances share shims, so
// a shim's death never fails another tenant's; a build's container has a
// shim of its own.
func shimGroup(tenant string, build bool) string {
	if build {
		return ""
	}
	return "tenant/" + tenant
}
