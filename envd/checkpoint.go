package envd

import (
	"context"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// restoreVolumeFromCheckpoint restores a volume to its checkpoint's
// archive on this node, also under running instances: this node's running
// (and paused) instances of the project are held frozen while the content
// is replaced in place, then thawed; they see the checkpoint's files when
// they run again. An instance between states refuses the restore.
func (s *Service) restoreVolumeFromCheckpoint(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.Volume, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Volume{}, err
	}
	if _, err := s.store.Versions.GetCheckpoint(ctx, p.Tenant, project, req.Checkpoint); err != nil {
		return types.Volume{}, err
	}
	ins, err := s.store.Instances.ListInstances(ctx, p.Tenant, project)
	if err != nil {
		return types.Volume{}, err
	}
	holder := fmt.Sprintf("restore:%s/%s", project, name)
	var held []string
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, id := range held {
			if err := s.gate.Release(rctx, s.rt, id, holder, false); err != nil {
				s.log.Warn("thaw instance after a volume restore", "instance", id, "err", err)
			}
		}
	}()
	for _, in := range ins {
		if in.Node != s.cfg.Node || !in.State.Live() || in.State == types.StateStopped {
			continue
		}
		if in.State != types.StateRunning && in.State != types.StatePaused {
			return types.Volume{}, errdefs.WithDetails(fmt.Errorf("instance %s of project %q is %s: restore the volume when it is not changing state: %w",
				in.ID, project, in.State, errdefs.ErrFailedPrecondition), map[string]any{"state": in.State})
		}
		if err := s.gate.Hold(ctx, s.rt, in.ID, holder); err != nil {
			return types.Volume{}, err
		}
		held = append(held, in.ID)
	}
	return s.vols.RestoreFromCheckpoint(ctx, p, project, name, req)
}
