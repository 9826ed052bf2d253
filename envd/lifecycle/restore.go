package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// restoreJob is what a restore operation does, kept to settle it after a
// crash.
type restoreJob struct {
	InstanceID string                      `json:"instance_id"`
	Project    string                      `json:"project"`
	Request    types.CreateInstanceRequest `json:"request"`
}

// Restore starts an instance of project from a version (req.Version, 0 =
// current) as an operation of kind "restore", for a client that should not
// hold a request open while an image is pulled. It refuses what
// CreateInstance refuses, before any operation exists. The operation's
// target is the new instance's id; the instance is recorded Pending as soon
// as the operation runs, and the operation's result is the instance once it
// runs. A provisioning failure fails the operation and leaves the instance
// Failed (provision_failed).
func (m *Manager) Restore(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, idempotencyKey string) (types.Operation, error) {
	if err := names.Validate("project", project); err != nil {
		return types.Operation{}, err
	}
	plan, err := m.planInstance(ctx, p, project, req)
	if err != nil {
		return types.Operation{}, err
	}
	job := restoreJob{InstanceID: names.NewID(project), Project: project, Request: req}
	asked := struct {
		Project string
		Req     types.CreateInstanceRequest
	}{project, req}
	return m.Ops.Start(ctx, p, ops.Spec{Kind: types.OpKindRestore, Target: job.InstanceID, Scope: project, IdempotencyKey: idempotencyKey,
		Asked: asked, Job: job, Run: func(ctx context.Context, op *ops.Op) (any, error) {
			if plan.placement != "" {
				op.Event(ctx, "placed", plan.placement, nil)
			}
			op.Event(ctx, "started", fmt.Sprintf("starting instance %s of %s from version %d", job.InstanceID, project, plan.version.Number), nil)
			in, err := m.startPlanned(ctx, p, job.InstanceID, plan)
			if err != nil {
				return nil, err
			}
			op.Event(ctx, "running", fmt.Sprintf("instance %s runs version %d", in.ID, in.Version), nil)
			return in, nil
		}})
}

// SettleRestore ends a restore that a previous envd left unfinished: its
// instance, if still Pending, is removed and marked Failed, and the
// operation is settled. It is not run again: the client may have given up,
// and a second instance would surprise it.
func (m *Manager) SettleRestore(ctx context.Context, op versions.Operation) {
	var job restoreJob
	if err := json.Unmarshal(op.Request, &job); err != nil {
		m.Ops.Settle(ctx, op, fmt.Errorf("unreadable request: %v: %w", err, errdefs.ErrFailedPrecondition))
		return
	}
	const msg = "envd restarted while the instance was starting; start a new one"
	if !m.abandonPending(ctx, job.InstanceID, msg) {
		// Not Pending: it got further (Running, or already settled) and
		// only the operation's end was lost. Report what it is.
		if in, err := m.Store.GetInstance(ctx, "", job.InstanceID); err == nil && in.State != types.StateFailed && in.State != types.StatePending {
			m.Ops.Succeed(ctx, op, m.view(ctx, in))
			return
		}
	}
	m.Ops.Settle(ctx, op, fmt.Errorf("restore of %s: %s: %w", job.InstanceID, msg, errdefs.ErrFailedPrecondition))
}
