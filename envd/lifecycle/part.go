package lifecycle

import (
	"context"
	"strconv"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/paging"
	"github.com/envd-dev/envd/envd/wrap"
	"github.com/envd-dev/envd/versions"
)

// Instances is the instances feature as the API reaches it: the
// instances' route group (create, restore, list, read, delete), their
// verbs (api.LifecycleCore), exec (api.ExecCore), and wake, touch and hold
// on access for the other parts (ports, files, SSH). The verbs are the
// Manager's; the behaviour that cuts across them is applied here once, by
// the decorators of package wrap:
//
//   - an exec asking for it wakes its instance first (wrap.WakeOnExec),
//   - a renew that succeeded touches the instance (wrap.TouchOnRenew),
//   - a read says which migration is current when the instance neither
//     runs nor saved it (wrap.WithNewerCurrent).
type Instances struct {
	m        *Manager
	wakeWait time.Duration
	get      wrap.InstanceGetter
	renew    wrap.Renewer
	exec     wrap.Execer
}

// InstancesDeps is what the part is made of besides the Manager.
type InstancesDeps struct {
	// WakeWait is the longest a wake on access waits for the instance
	// to run (Config.WakeWait of the node).
	WakeWait time.Duration
	// Exec runs commands in instances (command.Runner).
	Exec wrap.Execer
	// NewerCurrent tells a read instance's newer current version.
	NewerCurrent wrap.NewerCurrentFunc
}

// NewInstances makes the part of m.
func NewInstances(m *Manager, d InstancesDeps) *Instances {
	x := &Instances{m: m, wakeWait: d.WakeWait}
	x.get = wrap.WithNewerCurrent(m, d.NewerCurrent)
	x.renew = wrap.TouchOnRenew(m, x)
	x.exec = wrap.WakeOnExec(d.Exec, x)
	return x
}

// CreateInstance starts an instance of project and returns it running.
func (x *Instances) CreateInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, idempotencyKey string) (types.Instance, error) {
	return x.m.CreateInstance(ctx, p, project, req, idempotencyKey)
}

// Restore starts an instance of project as an operation (Manager.Restore).
func (x *Instances) Restore(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, idempotencyKey string) (types.Operation, error) {
	return x.m.Restore(ctx, p, project, req, idempotencyKey)
}

// ListInstances lists the tenant's instances, of one project or all.
func (x *Instances) ListInstances(ctx context.Context, p types.Principal, project string) ([]types.Instance, error) {
	return x.m.ListInstances(ctx, p, project)
}

// ListInstancesPage is one page of ListInstances and the token of the next
// one ("" after the last).
func (x *Instances) ListInstancesPage(ctx context.Context, p types.Principal, project string, page types.Page) ([]types.Instance, string, error) {
	limit, err := paging.Limit(page)
	if err != nil {
		return nil, "", err
	}
	var after versions.InstanceCursor
	if page.Token != "" {
		parts, err := paging.Decode(page.Token, "i1")
		if err != nil {
			return nil, "", err
		}
		if len(parts) != 2 {
			return nil, "", paging.BadToken(page.Token)
		}
		us, err := strconv.ParseInt(parts[0], 10, 64)
		if err != nil || parts[1] == "" {
			return nil, "", paging.BadToken(page.Token)
		}
		after = versions.InstanceCursor{CreatedAt: time.UnixMicro(us), ID: parts[1]}
	}
	ins, err := x.m.ListInstancesAfter(ctx, p, project, after, limit+1)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(ins) > limit {
		ins = ins[:limit]
		last := ins[limit-1]
		next = paging.Encode("i1", strconv.FormatInt(last.CreatedAt.UnixMicro(), 10), last.ID)
	}
	return ins, next, nil
}

// GetInstance returns one instance.
func (x *Instances) GetInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return x.get.GetInstance(ctx, p, id)
}

// DeleteInstance terminates an instance; saved versions and volumes stay.
func (x *Instances) DeleteInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return x.m.DeleteInstance(ctx, p, id)
}

// InstanceVerb runs a plain verb of types.InstanceVerbs (Manager.InstanceVerb).
func (x *Instances) InstanceVerb(ctx context.Context, p types.Principal, id, name string) (types.Instance, error) {
	return x.m.InstanceVerb(ctx, p, id, name)
}

// PauseInstance freezes the instance's processes; memory is kept.
func (x *Instances) PauseInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return x.m.PauseInstance(ctx, p, id)
}

// ResumeInstance thaws a paused instance and returns its current endpoint.
func (x *Instances) ResumeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return x.m.ResumeInstance(ctx, p, id)
}

// StopInstance stops a retained instance, keeping its writable layer.
func (x *Instances) StopInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return x.m.StopInstance(ctx, p, id)
}

// StartInstance starts a stopped instance with a new generation.
func (x *Instances) StartInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return x.m.StartInstance(ctx, p, id)
}

// RenewInstance sets the instance's expiry to now + ttl.
func (x *Instances) RenewInstance(ctx context.Context, p types.Principal, id, ttl string) (types.Instance, error) {
	return x.renew.RenewInstance(ctx, p, id, ttl)
}

// HibernateInstance hibernates a stopped retained instance now; with
// req.Memory a Running one, with its processes.
func (x *Instances) HibernateInstance(ctx context.Context, p types.Principal, id string, req types.HibernateRequest) (types.Instance, error) {
	return x.m.HibernateInstance(ctx, p, id, req)
}

// Exec runs a command in a running instance and returns its output.
func (x *Instances) Exec(ctx context.Context, p types.Principal, id string, req types.ExecRequest) (types.ExecResult, error) {
	return x.exec.Exec(ctx, p, id, req)
}

// ExecStream runs a command in a running instance with its streams
// connected to stdio and returns its exit code.
func (x *Instances) ExecStream(ctx context.Context, p types.Principal, id string, req types.ExecRequest, stdio types.Stdio) (int, error) {
	return x.exec.Stream(ctx, p, id, req, stdio)
}

// TouchInstance records activity on instance id now: it resets the
// instance's idle clock. It is cheap and never blocks.
//
// The activity is kept in memory on this node and flushed to the store
// every Deps.ActivityFlush (10s by default), so the idle reaper of the
// node that owns the instance sees a touch made here at most that late.
// Callers authorize the instance before touching it.
func (x *Instances) TouchInstance(id string) { x.m.Touch(id) }

// HoldInstance records a session open on instance id (an SSH shell, a
// port-forward, a terminal) until release is called: the instance is not
// idle meanwhile, input or not. Both ends count as activity. Callers
// authorize the instance first.
func (x *Instances) HoldInstance(id string) (release func()) { return x.m.Hold(id) }

// WakeInstance returns instance id once it is Running: a stopped or
// hibernated instance (idle-stopped ones included) is started first and
// waited for until ctx ends.
//
// It waits at most the part's WakeWait (60s by default), or less when ctx
// carries a shorter types.WithWakeWait; the start goes on after. An
// instance not Running by then is an errdefs.ErrWaking (503, code waking,
// with a Retry-After). Concurrent wakes of one instance start it once.
func (x *Instances) WakeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	wait := x.wakeWait
	if d, ok := types.WakeWait(ctx); ok && d < wait {
		wait = d
	}
	return x.m.Wake(ctx, p, id, wait)
}
