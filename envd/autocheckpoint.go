package envd

import (
	"context"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
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
	if err := s.store.SetCheckpointEvery(ctx, p.Tenant, project, every); err != nil {
		return types.CheckpointSetting{}, err
	}
	return s.GetProjectCheckpoint(ctx, p, project)
}

// GetProjectCheckpoint is the project's checkpoint setting.
func (s *Service) GetProjectCheckpoint(ctx context.Context, p types.Principal, project string) (types.CheckpointSetting, error) {
	every, err := s.store.CheckpointEvery(ctx, p.Tenant, project)
	if err != nil {
		return types.CheckpointSetting{}, err
	}
	if every == 0 {
		return types.CheckpointSetting{Every: "0"}, nil
	}
	return types.CheckpointSetting{Every: every.String()}, nil
}

// checkpointDue checkpoints this node's instances whose interval passed.
func (s *Service) checkpointDue(ctx context.Context) {
	ins, err := s.store.CheckpointDue(ctx, s.cfg.Node)
	if err != nil {
		s.log.Warn("instances due for a checkpoint", "err", err)
		return
	}
	for _, in := range ins {
		v, err := s.life.Checkpoint(ctx, in)
		if err != nil {
			s.log.Warn("checkpoint", "instance", in.ID, "err", err)
			continue
		}
		if err := s.store.SetInstanceCheckpoint(ctx, in.ID, v.Number); err != nil {
			s.log.Warn("record checkpoint", "instance", in.ID, "err", err)
			continue
		}
		s.log.Info("instance checkpointed", "instance", in.ID, "version", v.Number)
	}
}
