package checkpoint

import (
	"context"
	"fmt"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/envd/save"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Forks serves a fork of an instance (api.VersionCore's Fork).
type Forks struct {
	node      string
	store     Store
	saver     Saver
	ops       Operations
	instances Instances
}

// NewForks makes the forks part; it uses Node, Store, Saver, Ops and
// Instances of d.
func NewForks(d Deps) *Forks {
	return &Forks{node: d.Node, store: d.Store, saver: d.Saver, ops: d.Ops, instances: d.Instances}
}

// forkJob is what a fork operation does, fixed when it is asked.
type forkJob struct {
	InstanceID string            `json:"instance_id"`
	Generation int64             `json:"generation"`
	Request    types.ForkRequest `json:"request"`
}

// Fork starts an operation of kind "fork": the instance is saved as a
// version that does not become current (its own saves go on as before),
// then a second instance starts from that version. One capture of an
// instance at a time: a fork and a save of it exclude each other.
func (pt *Forks) Fork(ctx context.Context, p types.Principal, id string, req types.ForkRequest, idempotencyKey string) (types.Operation, error) {
	in, err := pt.store.GetInstance(ctx, p.Tenant, id)
	if err != nil {
		return types.Operation{}, err
	}
	if in.State != types.StateRunning {
		return types.Operation{}, errdefs.WithDetails(fmt.Errorf("instance %q is %s, fork needs Running: %w", id, in.State, errdefs.ErrFailedPrecondition),
			map[string]any{"state": in.State})
	}
	if in.Node != pt.node {
		return types.Operation{}, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, pt.node, errdefs.ErrFailedPrecondition)
	}
	if len(req.Message) > 4096 {
		return types.Operation{}, fmt.Errorf("message: longer than 4096 bytes: %w", errdefs.ErrInvalidArgument)
	}
	job := forkJob{InstanceID: id, Generation: in.Generation, Request: req}
	return pt.ops.Start(ctx, p, ops.Spec{Kind: types.OpKindFork, Target: id, Scope: id, IdempotencyKey: idempotencyKey,
		Asked: req, Job: job, Exclusive: save.CaptureKinds,
		Run: func(ctx context.Context, op *ops.Op) (any, error) { return pt.runFork(ctx, op, p, job) }})
}

func (pt *Forks) runFork(ctx context.Context, op *ops.Op, p types.Principal, job forkJob) (types.ForkResult, error) {
	in, err := pt.store.GetInstance(ctx, p.Tenant, job.InstanceID)
	if err != nil {
		return types.ForkResult{}, err
	}
	if in.Generation != job.Generation {
		return types.ForkResult{}, fmt.Errorf("instance %q generation %d, fork was for %d: %w", in.ID, in.Generation, job.Generation, errdefs.ErrStaleGeneration)
	}
	if in.State != types.StateRunning {
		return types.ForkResult{}, fmt.Errorf("instance %q is %s: %w", in.ID, in.State, errdefs.ErrFailedPrecondition)
	}
	v, err := pt.forkVersion(ctx, op, in, job.Request.Message)
	if err != nil {
		return types.ForkResult{}, err
	}
	op.Event(ctx, "committed", fmt.Sprintf("version %d (not current) holds the fork point", v.Number), map[string]any{"version": v.Number})
	child, err := pt.instances.CreateInstance(ctx, p, in.Project, types.CreateInstanceRequest{Version: v.Number, TTL: job.Request.TTL, Retain: job.Request.Retain}, "")
	if err != nil {
		return types.ForkResult{}, fmt.Errorf("version %d is saved, the second instance did not start (start it with up --version %d): %w", v.Number, v.Number, err)
	}
	op.Event(ctx, "started", fmt.Sprintf("instance %s runs version %d", child.ID, v.Number), map[string]any{"instance": child.ID})
	return types.ForkResult{Project: in.Project, Version: v.Number, Instance: child}, nil
}

// forkVersion saves the instance as a version that does not become current
// and is not recorded as the instance's own last save.
func (pt *Forks) forkVersion(ctx context.Context, op *ops.Op, in versions.Instance, message string) (versions.Version, error) {
	release, err := pt.saver.Guard(ctx, in.ID, op.ID)
	if err != nil {
		return versions.Version{}, err
	}
	defer release()
	c, err := pt.saver.Capture(ctx, op, save.Capture{Work: op.ID, Instance: in, Freeze: true, Quota: versions.QuotaEnforced})
	if err != nil {
		return versions.Version{}, err
	}
	if message == "" {
		message = "fork of instance " + in.ID
	}
	v, _, err := pt.saver.Commit(ctx, c, versions.Commit{
		Tenant: in.Tenant, Project: in.Project, InstanceID: in.ID, Generation: in.Generation, NoSwitch: true,
		Kind: "snapshot", Message: message,
	})
	return v, err
}

// Settle ends a fork a previous envd left unfinished: its version, if
// committed, stays listed (not current); no second instance is started.
// It is the ops.Resumer of kind fork.
func (pt *Forks) Settle(ctx context.Context, op versions.Operation) {
	pt.ops.Settle(ctx, op, fmt.Errorf("envd restarted during the fork; a version it committed is listed, not current: %w", errdefs.ErrFailedPrecondition))
}
