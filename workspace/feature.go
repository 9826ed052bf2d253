package workspace

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/freeze"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/views"
	"github.com/envd-dev/envd/errdefs"
)

// Feature is the volumes feature as the API reaches it (api.VolumeCore):
// declaring and removing a project's volumes, their usage, and their
// archives. The work is Volumes'; Feature adds the answer's project view
// and the restore of a checkpoint's archive under running instances.
type Feature struct {
	v       *Volumes
	gate    *freeze.Gate
	freezer freeze.Freezer
	log     *slog.Logger
}

// NewFeature is the feature of v. A restore of a checkpoint's archive
// holds the project's running instances on this node frozen through gate
// (with freezer, the runtime) while their volume is replaced.
func NewFeature(v *Volumes, gate *freeze.Gate, freezer freeze.Freezer, log *slog.Logger) *Feature {
	return &Feature{v: v, gate: gate, freezer: freezer, log: log}
}

// AddVolume declares a new volume on a project.
func (f *Feature) AddVolume(ctx context.Context, p types.Principal, project string, req types.AddVolumeRequest) (types.Project, error) {
	proj, err := f.v.Add(ctx, p, project, req)
	if err != nil {
		return types.Project{}, err
	}
	return views.Project(proj), nil
}

// RemoveVolume removes a volume and deletes its data on this node.
func (f *Feature) RemoveVolume(ctx context.Context, p types.Principal, project, name string) (types.Project, error) {
	proj, err := f.v.Remove(ctx, p, project, name)
	if err != nil {
		return types.Project{}, err
	}
	return views.Project(proj), nil
}

// ListVolumes lists a project's volumes with their usage on this node.
func (f *Feature) ListVolumes(ctx context.Context, p types.Principal, project string) ([]types.Volume, error) {
	return f.v.List(ctx, p, project)
}

// ArchiveVolume copies a volume's content to object storage.
func (f *Feature) ArchiveVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.VolumeArchive, error) {
	return f.v.Archive(ctx, p, project, name, req)
}

// RestoreVolume replaces a volume's content on this node with an
// archive's, or with a checkpoint's archive of it (req.Checkpoint).
func (f *Feature) RestoreVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.Volume, error) {
	if req.Checkpoint != 0 {
		return f.restoreFromCheckpoint(ctx, p, project, name, req)
	}
	return f.v.Restore(ctx, p, project, name, req)
}

// ListArchives lists the archives of a project, of one volume or of all.
func (f *Feature) ListArchives(ctx context.Context, p types.Principal, project, volume string) ([]types.VolumeArchive, error) {
	return f.v.ListArchives(ctx, p, project, volume)
}

// DeleteArchive deletes an archive of a project's volume.
func (f *Feature) DeleteArchive(ctx context.Context, p types.Principal, project, volume, name string) (types.VolumeArchive, error) {
	return f.v.DeleteArchive(ctx, p, project, volume, name)
}

// restoreFromCheckpoint restores a volume to its checkpoint's archive on
// this node, also under running instances: this node's running (and
// paused) instances of the project are held frozen while the content is
// replaced in place, then thawed; they see the checkpoint's files when
// they run again. An instance between states refuses the restore.
func (f *Feature) restoreFromCheckpoint(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.Volume, error) {
	if err := names.Validate("project", project); err != nil {
		return types.Volume{}, err
	}
	if _, err := f.v.store.GetCheckpoint(ctx, p.Tenant, project, req.Checkpoint); err != nil {
		return types.Volume{}, err
	}
	ins, err := f.v.store.ListInstances(ctx, p.Tenant, project)
	if err != nil {
		return types.Volume{}, err
	}
	holder := fmt.Sprintf("restore:%s/%s", project, name)
	var held []string
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, id := range held {
			if err := f.gate.Release(rctx, f.freezer, id, holder, false); err != nil {
				f.log.Warn("thaw instance after a volume restore", "instance", id, "err", err)
			}
		}
	}()
	for _, in := range ins {
		if in.Node != f.v.node || !in.State.Live() || in.State == types.StateStopped {
			continue
		}
		if in.State != types.StateRunning && in.State != types.StatePaused {
			return types.Volume{}, errdefs.WithDetails(fmt.Errorf("instance %s of project %q is %s: restore the volume when it is not changing state: %w",
				in.ID, project, in.State, errdefs.ErrFailedPrecondition), map[string]any{"state": in.State})
		}
		if err := f.gate.Hold(ctx, f.freezer, in.ID, holder); err != nil {
			return types.Volume{}, err
		}
		held = append(held, in.ID)
	}
	return f.v.RestoreFromCheckpoint(ctx, p, project, name, req)
}
