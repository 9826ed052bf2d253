package envd

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/versions"
)

// MinCheckpointEvery is the shortest checkpoint interval: each checkpoint
// is a version (it counts against max_versions until retention drops it).
const MinCheckpointEvery = 10 * time.Second

// SetProjectCheckpoint sets how often the project's running retained
// instances are checkpointed (a non-current version of their layer);
// "" or "0" = never.
func (s *Service) SetProjectCheckpoint(ctx context.Context, p types.Principal, project string, c types.CheckpointSetting) (types.CheckpointSetting, error) {
	var every time.Duration
	if c.Every != "" && c.Every != "0" {
		d, err := time.ParseDuration(c.Every)
		if err != nil || d < MinCheckpointEvery {
			return types.CheckpointSetting{}, fmt.Errorf("checkpoint every %q: a Go duration of at least %s, or 0 for never: %w", c.Every, MinCheckpointEvery, errdefs.ErrInvalidArgument)
		}
		every = d
	}
	if err := s.store.Projects.SetCheckpointEvery(ctx, p.Tenant, project, every); err != nil {
		return types.CheckpointSetting{}, err
	}
	return s.GetProjectCheckpoint(ctx, p, project)
}

// GetProjectCheckpoint is the project's checkpoint setting.
func (s *Service) GetProjectCheckpoint(ctx context.Context, p types.Principal, project string) (types.CheckpointSetting, error) {
	every, err := s.store.Projects.CheckpointEvery(ctx, p.Tenant, project)
	if err != nil {
		return types.CheckpointSetting{}, err
	}
	if every == 0 {
		return types.CheckpointSetting{Every: "0"}, nil
	}
	return types.CheckpointSetting{Every: every.String()}, nil
}

// checkpointDue checkpoints this node's instances whose interval passed:
// a coordinated checkpoint (its layer and every volume's archive, as `POST
// /v1/instances/{i}/checkpoint`) when the project has volumes, so that its
// volumes survive the loss of this node; else the layer alone as a
// version.
func (s *Service) checkpointDue(ctx context.Context) {
	ins, err := s.store.Instances.CheckpointDue(ctx, s.cfg.Node)
	if err != nil {
		s.log.Warn("instances due for a checkpoint", "err", err)
		return
	}
	for _, in := range ins {
		v, number, err := s.checkpointInstance(ctx, in)
		if err != nil {
			s.log.Warn("checkpoint", "instance", in.ID, "err", err)
			continue
		}
		if err := s.store.Instances.SetInstanceCheckpoint(ctx, in.ID, v); err != nil {
			s.log.Warn("record checkpoint", "instance", in.ID, "err", err)
			continue
		}
		s.log.Info("instance checkpointed", "instance", in.ID, "version", v, "checkpoint", number)
	}
}

// checkpointInstance takes one periodic checkpoint of in and returns its
// version and, when coordinated, its checkpoint number.
func (s *Service) checkpointInstance(ctx context.Context, in versions.Instance) (version, number int, err error) {
	proj, err := s.store.Projects.GetProject(ctx, in.Tenant, in.Project)
	if err != nil {
		return 0, 0, err
	}
	if len(projectVolumes(proj)) == 0 || s.cfg.Volumes == nil || s.cfg.Objects == nil {
		v, err := s.life.Checkpoint(ctx, in)
		return v.Number, 0, err
	}
	p := types.Principal{Tenant: in.Tenant}
	op, err := s.Checkpoint(ctx, p, in.ID, types.CheckpointRequest{Message: "periodic checkpoint of instance " + in.ID}, "")
	if err != nil {
		return 0, 0, err
	}
	for !op.Done() {
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if op, err = s.ops.Get(ctx, p, op.ID); err != nil {
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
