package lifecycle

import (
	"context"
	"fmt"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/save"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Checkpoint saves a running retained instance's writable layer as a
// version that does not become current, without stopping it (frozen only
// while its layer is read, as a save): the mechanism of hibernation and
// idle stop, run periodically (project setting checkpoint_every) so that a
// retained instance on a lost node loses at most one interval of work.
func (m *Manager) Checkpoint(ctx context.Context, in versions.Instance) (versions.Version, error) {
	if !in.Retain || in.State != types.StateRunning || in.Node != m.Node {
		return versions.Version{}, fmt.Errorf("instance %q: only a running, retained instance of this node is checkpointed: %w", in.ID, errdefs.ErrFailedPrecondition)
	}
	defer m.act(in.ID)()
	release, err := m.Saver.Guard(ctx, in.ID, "checkpoint")
	if err != nil {
		return versions.Version{}, err
	}
	defer release()
	c, err := m.Saver.Capture(ctx, save.NoEvents{}, save.Capture{Work: "checkpoint-" + in.ID, Instance: in, Freeze: true, Quota: versions.QuotaEnforced})
	if err != nil {
		return versions.Version{}, err
	}
	v, _, err := m.Saver.Commit(ctx, c, versions.Commit{
		Tenant: in.Tenant, Project: in.Project, InstanceID: in.ID, Generation: in.Generation, NoSwitch: true,
		Kind: versions.KindSnapshot, Message: fmt.Sprintf("checkpoint of instance %s", in.ID),
	})
	return v, err
}
