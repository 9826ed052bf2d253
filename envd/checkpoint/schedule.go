package checkpoint

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// MinCheckpointEvery is the shortest checkpoint interval: each checkpoint
// is a version (it counts against max_versions until retention drops it).
const MinCheckpointEvery = 10 * time.Second

// SetProjectCheckpoint sets how often the project's running retained
// instances are checkpointed (a non-current version of their layer);
// "" or "0" = never.
func (pt *Checkpoints) SetProjectCheckpoint(ctx context.Context, p types.Principal, project string, c types.CheckpointSetting) (types.CheckpointSetting, error) {
	var every time.Duration
	if c.Every != "" && c.Every != "0" {
		d, err := time.ParseDuration(c.Every)
		if err != nil || d < MinCheckpointEvery {
			return types.CheckpointSetting{}, fmt.Errorf("checkpoint every %q: a Go duration of at least %s, or 0 for never: %w", c.Every, MinCheckpointEvery, errdefs.ErrInvalidArgument)
		}
		every = d
	}
	if err := pt.store.SetCheckpointEvery(ctx, p.Tenant, project, every); err != nil {
		return types.CheckpointSetting{}, err
	}
	return pt.GetProjectCheckpoint(ctx, p, project)
}

// GetProjectCheckpoint is the project's checkpoint setting.
func (pt *Checkpoints) GetProjectCheckpoint(ctx context.Context, p types.Principal, project string) (types.CheckpointSetting, error) {
	every, err := pt.store.CheckpointEvery(ctx, p.Tenant, project)
	if err != nil {
		return types.CheckpointSetting{}, err
	}
	if every == 0 {
		return types.CheckpointSetting{Every: "0"}, nil
	}
	return types.CheckpointSetting{Every: every.String()}, nil
}

// Due checkpoints this node's instances whose interval passed:
// a coordinated checkpoint (its layer and every volume's archive, as `POST
// /v1/instances/{i}/checkpoint`) when the project has volumes, so that its
// volumes survive the loss of this node; else the layer alone as a
// version.
func (pt *Checkpoints) Due(ctx context.Context) {
	ins, err := pt.store.CheckpointDue(ctx, pt.node)
	if err != nil {
		pt.log.Warn("instances due for a checkpoint", "err", err)
		return
	}
	for _, in := range ins {
		v, number, err := pt.checkpointInstance(ctx, in)
		if err != nil {
			pt.log.Warn("checkpoint", "instance", in.ID, "err", err)
			continue
		}
		if err := pt.store.SetInstanceCheckpoint(ctx, in.ID, v); err != nil {
			pt.log.Warn("record checkpoint", "instance", in.ID, "err", err)
			continue
		}
		pt.log.Info("instance checkpointed", "instance", in.ID, "version", v, "checkpoint", number)
	}
}

// checkpointInstance takes one periodic checkpoint of in and returns its
// version and, when coordinated, its checkpoint number.
func (pt *Checkpoints) checkpointInstance(ctx context.Context, in versions.Instance) (version, number int, err error) {
	proj, err := pt.store.GetProject(ctx, in.Tenant, in.Project)
	if err != nil {
		return 0, 0, err
	}
	if len(projectVolumes(proj)) == 0 || pt.freezer == nil || pt.objects == nil {
		v, err := pt.instances.Checkpoint(ctx, in)
		return v.Number, 0, err
	}
	p := types.Principal{Tenant: in.Tenant}
	op, err := pt.Checkpoint(ctx, p, in.ID, types.CheckpointRequest{Message: "periodic checkpoint of instance " + in.ID}, "")
	if err != nil {
		return 0, 0, err
	}
	for !op.Done() {
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if op, err = pt.ops.GetOperation(ctx, p, op.ID); err != nil {
			return 0, 0, err
		}
	}
	if op.State != types.OpSucceeded {
		msg := string(op.State)
		if op.Error != nil {
			msg = op.Error.Message
		}
		return 0, 0, fmt.Errorf("checkpoint operation %s: %s", op.ID, msg)
	}
	var res types.CheckpointResult
	if err := json.Unmarshal(op.Result, &res); err != nil {
		return 0, 0, fmt.Errorf("checkpoint operation %s: %w", op.ID, err)
	}
	return res.Checkpoint.Version, res.Checkpoint.ID, nil
}
