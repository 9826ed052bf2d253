package workspace

import (
	"context"
	"fmt"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// checkpointArchive is the archive of volume of checkpoint number.
func (m *Volumes) checkpointArchive(ctx context.Context, tenant, project string, number int, volume string) (versions.Archive, error) {
	if number < 0 {
		return versions.Archive{}, fmt.Errorf("checkpoint %d: %w", number, errdefs.ErrInvalidArgument)
	}
	c, err := m.store.GetCheckpoint(ctx, tenant, project, number)
	if err != nil {
		return versions.Archive{}, err
	}
	for _, a := range c.Archives {
		if a.Volume == volume {
			return a, nil
		}
	}
	return versions.Archive{}, fmt.Errorf("checkpoint %d of project %q has no archive of volume %q (added after it): %w", number, project, volume, errdefs.ErrNotFound)
}

// RestoreCheckpoint replaces the content of every volume of proj that
// checkpoint number archived with that archive, on this node, before an
// instance (except, being started) mounts them. A volume declared after
// the checkpoint keeps its content. Refused while another live instance of
// the project runs on this node (it has the volumes mounted).
func (m *Volumes) RestoreCheckpoint(ctx context.Context, proj versions.Project, number int, except string) error {
	c, err := m.store.GetCheckpoint(ctx, proj.Tenant, proj.Name, number)
	if err != nil {
		return err
	}
	_, ps, err := m.projectSpec(ctx, proj.Tenant, proj.Name)
	if err != nil {
		return err
	}
	if len(c.Archives) == 0 {
		return nil
	}
	if m.storage == nil || m.objects == nil {
		return fmt.Errorf("checkpoint %d has volume archives, but this node has no volume or object storage: %w", number, errdefs.ErrFailedPrecondition)
	}
	live, err := m.liveInstances(ctx, proj.Tenant, proj.Name)
	if err != nil {
		return err
	}
	for _, in := range live {
		if in.Node == m.node && in.ID != except {
			return fmt.Errorf("instance %s of project %q uses its volumes on this node: remove it before starting from checkpoint %d: %w",
				in.ID, proj.Name, number, errdefs.ErrFailedPrecondition)
		}
		if m.homes != nil && in.Node != m.node && in.ID != except && in.HibernatedVersion == 0 {
			// Restoring here would fork the volumes: the running
			// instance keeps writing its copy on its node.
			return errdefs.WithDetails(fmt.Errorf("instance %s of project %q uses its volumes on node %q: stop it, or start from checkpoint %d there: %w",
				in.ID, proj.Name, in.Node, number, errdefs.ErrVolumeElsewhere), map[string]any{"node": in.Node})
		}
	}
	restored := 0
	for _, a := range c.Archives {
		for _, v := range ps.Volumes {
			if v.Name != a.Volume {
				continue
			}
			if err := m.storage.Restore(ctx, owner(proj.Tenant, proj.Name), toSpec(v), m.objects, a.Key); err != nil {
				return fmt.Errorf("restore volume %q from checkpoint %d: %w", v.Name, number, err)
			}
			restored++
		}
	}
	if m.homes == nil || restored < len(ps.Volumes) {
		return nil
	}
	// The data is this checkpoint's, here: this node is the volumes' home
	// from now on (a lost home's data is not waited for).
	return m.homes.SetVolumeHome(ctx, proj.Tenant, proj.Name, m.node, "")
}

// RestoreFromCheckpoint restores the volume name from its archive of
// checkpoint req.Checkpoint on this node, in place while instances have it
// mounted: the caller has frozen this node's running instances of the
// project (see Manager.RestoreInPlace).
func (m *Volumes) RestoreFromCheckpoint(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.Volume, error) {
	if req.Checkpoint <= 0 || req.Key != "" || req.Name != "" || req.Replace {
		return types.Volume{}, fmt.Errorf("a restore from a checkpoint takes the checkpoint alone: %w", errdefs.ErrInvalidArgument)
	}
	v, err := m.volume(ctx, p, project, name)
	if err != nil {
		return types.Volume{}, err
	}
	arc, err := m.checkpointArchive(ctx, p.Tenant, project, req.Checkpoint, name)
	if err != nil {
		return types.Volume{}, err
	}
	if err := m.storage.RestoreInPlace(ctx, owner(p.Tenant, project), toSpec(v), m.objects, arc.Key); err != nil {
		return types.Volume{}, fmt.Errorf("restore volume %q from checkpoint %d: %w", name, req.Checkpoint, err)
	}
	if u, err := m.storage.Usage(ctx, owner(p.Tenant, project), toSpec(v)); err == nil {
		v.UsedBytes, v.SizeBytes = u.UsedBytes, u.SizeBytes
	}
	return v, nil
}
