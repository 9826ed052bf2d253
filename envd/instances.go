package envd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// Labels envd puts on containers, so the reconciler can tell its own.
const (
	LabelGeneration = "envd.generation"
	LabelProject    = "envd.project"
	LabelTenant     = "envd.tenant"
)

func toInstance(in versions.Instance) types.Instance {
	return types.Instance{ID: in.ID, Project: in.Project, Node: in.Node, Version: in.Version,
		LastSavedVersion: in.LastSavedVersion, Generation: in.Generation, State: in.State,
		Reason: in.Reason, Message: in.Message, Retain: in.Retain, ExpiresAt: in.ExpiresAt,
		HibernatedVersion: in.HibernatedVersion, CreatedAt: in.CreatedAt, LastTransitionAt: in.LastTransitionAt,
		Limits: instanceLimits(in.Spec)}
}

// view is the instance as a user sees it: with its current address and
// what protects its data.
func (s *Service) view(ctx context.Context, in versions.Instance) types.Instance {
	return s.viewWith(ctx, in, s.volumePaths(ctx, in.Tenant, in.Project))
}

// volumePaths are the mount paths of a project's volumes (none if the
// project cannot be read: the view is still worth answering).
func (s *Service) volumePaths(ctx context.Context, tenant, project string) []string {
	_, ps, err := s.projectSpec(ctx, tenant, project)
	if err != nil {
		return nil
	}
	paths := make([]string, 0, len(ps.Volumes))
	for _, v := range ps.Volumes {
		paths = append(paths, v.Path)
	}
	return paths
}

func (s *Service) viewWith(ctx context.Context, in versions.Instance, volumes []string) types.Instance {
	out := s.withEndpoint(ctx, toInstance(in))
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
func (s *Service) views(ctx context.Context, ins []versions.Instance) []types.Instance {
	out := make([]types.Instance, 0, len(ins))
	volumes := map[string][]string{}
	for _, in := range ins {
		vs, ok := volumes[in.Project]
		if !ok {
			vs = s.volumePaths(ctx, in.Tenant, in.Project)
			volumes[in.Project] = vs
		}
		out = append(out, s.viewWith(ctx, in, vs))
	}
	return out
}

// CreateInstance starts an instance of project from req.Version or the
// current version. It returns when the instance runs (or has failed). A
// retry with the same idempotency key and request returns the same instance.
func (s *Service) CreateInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, idempotencyKey string) (types.Instance, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Instance{}, err
	}
	id := newID(project)
	existing, release, err := s.claim(ctx, p, idempotencyKey, "create_instance",
		struct {
			Project string
			Req     types.CreateInstanceRequest
		}{project, req}, id)
	if err != nil {
		return types.Instance{}, err
	}
	if existing != "" {
		return await(ctx, func(ctx context.Context) (types.Instance, error) { return s.GetInstance(ctx, p, existing) })
	}
	in, err := s.createInstance(ctx, p, id, project, req)
	if err != nil && !errors.Is(err, errProvision) {
		release() // nothing was made; a provisioning failure leaves a Failed instance the key points at
	}
	return in, err
}

// errProvision marks a failure after the instance was recorded.
var errProvision = errors.New("provisioning failed")

func (s *Service) createInstance(ctx context.Context, p types.Principal, id, project string, req types.CreateInstanceRequest) (types.Instance, error) {
	plan, err := s.planInstance(ctx, p, project, req)
	if err != nil {
		return types.Instance{}, err
	}
	return s.startPlanned(ctx, p, id, plan)
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
}

// planInstance checks a request to start an instance of project: the
// version (0 = current) exists and is ready, the TTL is allowed. It changes
// nothing.
func (s *Service) planInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest) (instancePlan, error) {
	if req.Version < 0 {
		return instancePlan{}, fmt.Errorf("version %d: %w", req.Version, errdefs.ErrInvalidArgument)
	}
	expires, err := s.ttlFor(ctx, p.Tenant, req.TTL)
	if err != nil {
		return instancePlan{}, err
	}
	// Early, so that an async restore is refused before its operation
	// exists; the store checks again, atomically, when it records one.
	if err := s.checkStartQuota(ctx, p.Tenant); err != nil {
		return instancePlan{}, err
	}
	proj, err := s.store.GetProject(ctx, p.Tenant, project)
	if err != nil {
		return instancePlan{}, err
	}
	n := req.Version
	if n == 0 {
		n = proj.Current
	}
	v, err := s.store.GetVersion(ctx, p.Tenant, project, n)
	if err != nil {
		return instancePlan{}, err
	}
	if v.State != "ready" {
		return instancePlan{}, fmt.Errorf("version %d of project %q is %s, only ready versions can be started: %w", n, project, v.State, errdefs.ErrFailedPrecondition)
	}
	return instancePlan{proj: proj, version: v, expires: expires, retain: req.Retain}, nil
}

// startPlanned records the instance as Pending, provisions it and returns
// it Running. A provisioning failure leaves it Failed (errProvision).
func (s *Service) startPlanned(ctx context.Context, p types.Principal, id string, plan instancePlan) (types.Instance, error) {
	n, project := plan.version.Number, plan.proj.Name
	ps, _ := parseProjectSpec(plan.proj.Spec)
	limits, err := s.effectiveLimits(ctx, p.Tenant, ps.Limits)
	if err != nil {
		return types.Instance{}, err
	}
	if err := s.checkDiskQuota(ctx, p.Tenant, limits.DiskBytes); err != nil {
		return types.Instance{}, err
	}
	in, err := s.store.CreateInstance(ctx, versions.Instance{
		ID: id, Tenant: p.Tenant, Project: project, Node: s.cfg.Node, Version: n,
		State: types.StatePending, Reason: types.ReasonCreated, Message: fmt.Sprintf("starting from version %d", n),
		ExpiresAt: plan.expires, Retain: plan.retain, Spec: marshalInstanceSpec(limits),
	})
	if err != nil {
		return types.Instance{}, err
	}
	proj := plan.proj
	if plan.isolated {
		proj.Spec = nil // no volumes
		// A build reaches its package sources whatever the project's
		// egress, and no other instance.
		proj.Egress, proj.IsolateInstances = s.cfg.BuildEgress, true
	}
	if err := s.provision(ctx, in, proj, plan.version.Image, plan.isolated); err != nil {
		s.abandonPending(ctx, in.ID, err.Error())
		return types.Instance{}, fmt.Errorf("start instance of %q from version %d: %w: %w", project, n, errProvision, err)
	}
	in, err = s.store.Transition(ctx, in.ID, []types.InstanceState{types.StatePending}, types.StateRunning, types.ReasonStarted, fmt.Sprintf("running version %d", n))
	if err != nil {
		return types.Instance{}, err
	}
	if !plan.isolated {
		s.recordFirstReads(in, plan.proj.Compression)
	}
	return s.view(ctx, in), nil
}

// abandonPending removes what provisioning made of a Pending instance and
// marks it Failed (provision_failed) with msg.
//
// The transition comes first and the removal only if it happened: an
// instance that got past Pending (a restore whose operation was not
// recorded as finished before a crash) is left alone, never removed.
func (s *Service) abandonPending(ctx context.Context, id, msg string) bool {
	cctx, cancel := detach(ctx, time.Minute)
	defer cancel()
	_, err := s.store.Transition(cctx, id, []types.InstanceState{types.StatePending}, types.StateFailed, types.ReasonProvisionFailed, msg)
	if err != nil {
		if !errors.Is(err, errdefs.ErrFailedPrecondition) && !errors.Is(err, errdefs.ErrNotFound) {
			s.log.Warn("record failed instance", "instance", id, "err", err)
		}
		return false
	}
	if err := s.rt.Remove(cctx, id); err != nil {
		s.log.Warn("remove failed instance", "instance", id, "err", err)
	}
	return true
}

// provision pulls the version's image and creates the running container
// with the project's volumes and network policy (build: a build container,
// labelled LabelBuild, whose policy does not follow the project's).
func (s *Service) provision(ctx context.Context, in versions.Instance, proj versions.Project, image string, build bool) error {
	mounts, env, err := s.volumeMounts(ctx, proj)
	if err != nil {
		return err
	}
	ref := s.reg.Addr() + "/" + image
	if err := s.rt.Pull(ctx, ref); err != nil {
		return fmt.Errorf("pull %s: %w", image, err)
	}
	var limits types.Limits
	if l := instanceLimits(in.Spec); l != nil {
		limits = *l
	}
	return s.rt.Create(ctx, runtime.InstanceSpec{
		ID: in.ID, Image: ref, Hostname: in.Project, Mounts: mounts, Env: env,
		Limits: runtimeLimits(limits), AllowPrivilegeEscalation: limits.AllowPrivilegeEscalation,
		Network: networkPolicy(proj),
		// A build's layer is saved: it runs with host ids (no user
		// namespace, whose shifted ids a save cannot read).
		HostIDs: build,
		Labels: map[string]string{
			LabelGeneration: generationLabel(in.Generation),
			LabelProject:    in.Project,
			LabelTenant:     in.Tenant,
			LabelNode:       s.cfg.Node,
			LabelBuild:      strconv.FormatBool(build),
		},
	})
}

// ListInstances lists the tenant's instances, of one project or all.
func (s *Service) ListInstances(ctx context.Context, p types.Principal, project string) ([]types.Instance, error) {
	if project != "" {
		if err := ValidateName("project", project); err != nil {
			return nil, err
		}
	}
	ins, err := s.store.ListInstances(ctx, p.Tenant, project)
	if err != nil {
		return nil, err
	}
	return s.views(ctx, ins), nil
}

// GetInstance returns one instance.
func (s *Service) GetInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	in, err := s.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	return s.view(ctx, in), nil
}

func (s *Service) instance(ctx context.Context, p types.Principal, id string) (versions.Instance, error) {
	if err := validateInstanceID(id); err != nil {
		return versions.Instance{}, err
	}
	return s.store.GetInstance(ctx, p.Tenant, id)
}

// DeleteInstance terminates an instance: its container and writable layer
// are removed; saved versions and volumes stay.
func (s *Service) DeleteInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	in, err := s.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	if in.State == types.StateTerminated {
		return toInstance(in), nil
	}
	in, err = s.terminate(ctx, in, types.ReasonUserDelete, "deleted by the user")
	if err != nil {
		return types.Instance{}, err
	}
	return s.view(ctx, in), nil
}

// Exec runs a command in a running instance and returns its output, each
// stream cut at MaxExecOutput.
func (s *Service) Exec(ctx context.Context, p types.Principal, id string, req types.ExecRequest) (types.ExecResult, error) {
	if len(req.Args) == 0 || req.Args[0] == "" {
		return types.ExecResult{}, fmt.Errorf("exec: args: at least the command is required: %w", errdefs.ErrInvalidArgument)
	}
	if err := CheckExecRequest(req); err != nil {
		return types.ExecResult{}, err
	}
	timeout := 10 * time.Minute
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d <= 0 {
			return types.ExecResult{}, fmt.Errorf("exec: timeout %q: %w", req.Timeout, errdefs.ErrInvalidArgument)
		}
		timeout = d
	}
	in, err := s.instance(ctx, p, id)
	if err != nil {
		return types.ExecResult{}, err
	}
	if err := checkGeneration(in, req.Generation); err != nil {
		return types.ExecResult{}, err
	}
	if in.Node != s.cfg.Node && in.State == types.StateRunning {
		return types.ExecResult{}, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, s.cfg.Node, errdefs.ErrFailedPrecondition)
	}
	if in.State != types.StateRunning {
		return types.ExecResult{}, errdefs.WithDetails(fmt.Errorf("instance %q is %s, exec needs Running: %w", id, in.State, errdefs.ErrFailedPrecondition),
			map[string]any{"state": in.State})
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stdout := &limitedBuffer{max: types.MaxExecOutput}
	stderr := &limitedBuffer{max: types.MaxExecOutput}
	var code int
	started := time.Now()
	// A save may freeze the task between our check and the exec: containerd
	// then refuses to exec in a paused task before starting anything, and
	// the exec waits for the thaw and tries again.
	for attempt := 0; ; attempt++ {
		if err := s.frozen.wait(ctx, id); err != nil {
			return types.ExecResult{}, fmt.Errorf("exec in %q: waiting for a save's freeze to end: %w", id, err)
		}
		stdout.Reset()
		stderr.Reset()
		code, err = s.rt.Exec(ctx, id, runtime.ExecSpec{
			Args: req.Args, Env: req.Env, Cwd: req.Cwd,
			Stdin: strings.NewReader(req.Stdin), Stdout: stdout, Stderr: stderr,
		})
		if err == nil {
			break
		}
		if attempt < 50 {
			// Refused as paused, or paused now: a save's freeze; the
			// thaw may come before the look at the task, so both count.
			if st, serr := s.rt.Status(ctx, id); errors.Is(err, runtime.ErrTaskPaused) || (serr == nil && st.Task == "paused") {
				select {
				case <-time.After(100 * time.Millisecond):
					continue
				case <-ctx.Done():
				}
			}
		}
		return types.ExecResult{}, fmt.Errorf("exec in %q: %w", id, err)
	}
	return types.ExecResult{ExitCode: code, Stdout: stdout.String(), Stderr: stderr.String(),
		Truncated: stdout.truncated || stderr.truncated, OOMKilled: code == 137 && s.oomKilledSince(id, started)}, nil
}

// limitedBuffer keeps the first max bytes written and drops the rest, so a
// chatty command cannot exhaust the server's memory.
type limitedBuffer struct {
	bytes.Buffer
	max       int
	truncated bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room < len(p) {
		b.truncated = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// checkGeneration fences a request that names a generation: only the
// instance's newest one may act.
func checkGeneration(in versions.Instance, g int64) error {
	if g != 0 && g != in.Generation {
		return errdefs.WithDetails(fmt.Errorf("instance %q: generation %d is stale, the newest is %d: %w", in.ID, g, in.Generation, errdefs.ErrStaleGeneration),
			map[string]any{"generation": in.Generation})
	}
	return nil
}

// Reset empties the buffer for a retried exec.
func (b *limitedBuffer) Reset() {
	b.Buffer.Reset()
	b.truncated = false
}
