package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/lifecycle"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/envd/save"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Forks serves a fork of an instance (api.VersionCore's Fork).
type Forks struct {
	node      string
	workDir   string
	store     Store
	saver     Saver
	ops       Operations
	instances Instances
	quota     Quota
	// cps takes a memory fork's checkpoint.
	cps *Checkpoints
}

// Quota is what forks and imports check before anything is made
// (quota.Checker): the instances of a fork into n, and the bytes of an
// import before anything is pushed (its commit checks again, atomically).
type Quota interface {
	Starts(ctx context.Context, tenant string, n int) error
	Save(ctx context.Context, tenant, project string, layerBytes int64) (volumeBytes int64, err error)
}

// NewForks makes the forks part; it uses Node, WorkDir, Store, Saver,
// Ops, Instances and Quota of d, and Memory and MemImages for memory forks.
func NewForks(d Deps) *Forks {
	return &Forks{node: d.Node, workDir: d.WorkDir, store: d.Store, saver: d.Saver, ops: d.Ops, instances: d.Instances, quota: d.Quota, cps: New(d)}
}

// forkJob is what a fork operation does, fixed when it is asked.
type forkJob struct {
	InstanceID string            `json:"instance_id"`
	Generation int64             `json:"generation"`
	Expected   int               `json:"expected_current"`
	Request    types.ForkRequest `json:"request"`
}

// Fork starts an operation of kind "fork": the instance is saved as a
// version that does not become current (its own saves go on as before),
// then req.Count new instances start from that version (1 by default).
// With req.Memory the save is a checkpoint with memory, and the new
// instances continue the instance's processes from it.
//
// Refused before an operation exists: a count out of range
// (invalid_argument); an instance not Running (failed_precondition, for a
// memory fork memory_checkpoint_unsupported with reason state); a memory
// fork of an instance whose engine cannot checkpoint it (reason class, or
// connection); more instances than the tenant's quota has room for, all
// counted (quota_exceeded). One capture of an instance at a time: a fork,
// a checkpoint and a save of it exclude each other.
func (pt *Forks) Fork(ctx context.Context, p types.Principal, id string, req types.ForkRequest, idempotencyKey string) (types.Operation, error) {
	if err := names.ValidateInstanceID(id); err != nil {
		return types.Operation{}, err
	}
	if req.Count == 0 {
		req.Count = 1
	}
	if req.Count < 1 || req.Count > types.MaxForkCount {
		return types.Operation{}, errdefs.WithDetails(fmt.Errorf("count %d: a fork starts 1 to %d instances: %w", req.Count, types.MaxForkCount, errdefs.ErrInvalidArgument),
			map[string]any{"count": req.Count, "max": types.MaxForkCount})
	}
	if len(req.Message) > 4096 {
		return types.Operation{}, fmt.Errorf("message: longer than 4096 bytes: %w", errdefs.ErrInvalidArgument)
	}
	in, err := pt.store.GetInstance(ctx, p.Tenant, id)
	if err != nil {
		return types.Operation{}, err
	}
	if in.State != types.StateRunning {
		kind, need := errdefs.ErrFailedPrecondition, "Running"
		if req.Memory {
			kind, need = errdefs.ErrMemoryUnsupported, "Running (its processes)"
		}
		return types.Operation{}, errdefs.WithDetails(fmt.Errorf("instance %q is %s, fork needs %s: %w", id, in.State, need, kind),
			map[string]any{"state": in.State, "reason": "state"})
	}
	if in.Node != pt.node {
		return types.Operation{}, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, pt.node, errdefs.ErrFailedPrecondition)
	}
	if req.Memory {
		if err := pt.cps.canCheckpointMemory(ctx, in); err != nil {
			return types.Operation{}, err
		}
	}
	if err := pt.quota.Starts(ctx, p.Tenant, req.Count); err != nil {
		return types.Operation{}, err
	}
	job := forkJob{InstanceID: id, Generation: in.Generation, Expected: in.Version, Request: req}
	if in.LastSavedVersion > 0 {
		job.Expected = in.LastSavedVersion
	}
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
	message := job.Request.Message
	if message == "" {
		message = "fork of instance " + in.ID
	}
	res := types.ForkResult{Project: in.Project}
	copies := lifecycle.Copies{Project: in.Project, TTL: job.Request.TTL, Retain: job.Request.Retain, Count: job.Request.Count}
	again := "up --version %d"
	if job.Request.Memory {
		// The memory image stays on this node after its push: the copies
		// restore from it here, nothing is pulled back.
		copies.MemoryDir = filepath.Join(pt.workDir, op.ID+"-fork-memory")
		_ = os.RemoveAll(copies.MemoryDir) // left by an envd that died here
		defer os.RemoveAll(copies.MemoryDir)
		cres, err := pt.cps.capture(ctx, op, checkpointJob{InstanceID: in.ID, Generation: job.Generation, Expected: job.Expected,
			Request: types.CheckpointRequest{Message: message, Memory: true}}, captureFor{fork: true, keepMemory: copies.MemoryDir})
		if err != nil {
			return types.ForkResult{}, err
		}
		res.Version, res.Checkpoint = cres.Checkpoint.Version, cres.Checkpoint.ID
		// The capture's own "committed" event names the checkpoint.
		again = fmt.Sprintf("up --checkpoint %d (once: a resume claims it)", res.Checkpoint)
	} else {
		v, err := pt.forkVersion(ctx, op, in, message)
		if err != nil {
			return types.ForkResult{}, err
		}
		res.Version = v.Number
		again = fmt.Sprintf(again, v.Number)
		op.Event(ctx, "committed", fmt.Sprintf("version %d (not current) holds the fork point", v.Number), map[string]any{"version": v.Number})
	}
	copies.Version = res.Version
	started, err := pt.instances.StartCopies(ctx, p, copies)
	if err != nil {
		return types.ForkResult{}, fmt.Errorf("the fork point is saved, its %d new instance(s) did not start (start from it with %s): %w", copies.Count, again, err)
	}
	for _, c := range started {
		op.Event(ctx, "started", fmt.Sprintf("instance %s runs version %d", c.ID, c.Version), map[string]any{"instance": c.ID, "address": c.Address})
	}
	res.Instances, res.Instance = started, started[0]
	return res, nil
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
	v, _, err := pt.saver.Commit(ctx, c, versions.Commit{
		Tenant: in.Tenant, Project: in.Project, InstanceID: in.ID, Generation: in.Generation, NoSwitch: true,
		Kind: "snapshot", Message: message,
	})
	return v, err
}

// Settle ends a fork a previous envd left unfinished: its version (or
// checkpoint), if committed, stays listed (not current); no instance is
// started. Copies it had made Running stay (each is an instance of its
// own); one left Pending is failed by the reconciler as any instance stuck
// there. It is the ops.Resumer of kind fork.
func (pt *Forks) Settle(ctx context.Context, op versions.Operation) {
	// The memory image it kept for its copies (and one it was writing).
	for _, dir := range []string{op.ID + "-fork-memory", op.ID + "-memory"} {
		if pt.workDir != "" && op.ID != "" {
			_ = os.RemoveAll(filepath.Join(pt.workDir, dir))
		}
	}
	pt.ops.Settle(ctx, op, fmt.Errorf("envd restarted during the fork; a version or checkpoint it committed is listed, not current: %w", errdefs.ErrFailedPrecondition))
}
