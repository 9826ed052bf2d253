package envd

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// The volume methods are workspace.Volumes's; see there for each contract.

// AddVolume declares a new volume on a project.
func (s *Service) AddVolume(ctx context.Context, p types.Principal, project string, req types.AddVolumeRequest) (types.Project, error) {
	proj, err := s.vols.Add(ctx, p, project, req)
	if err != nil {
		return types.Project{}, err
	}
	return toProject(proj), nil
}

// RemoveVolume removes a volume and deletes its data on this node.
func (s *Service) RemoveVolume(ctx context.Context, p types.Principal, project, name string) (types.Project, error) {
	proj, err := s.vols.Remove(ctx, p, project, name)
	if err != nil {
		return types.Project{}, err
	}
	return toProject(proj), nil
}

// ListVolumes lists a project's volumes with their usage on this node.
func (s *Service) ListVolumes(ctx context.Context, p types.Principal, project string) ([]types.Volume, error) {
	return s.vols.List(ctx, p, project)
}

// ArchiveVolume copies a volume's content to object storage.
func (s *Service) ArchiveVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.VolumeArchive, error) {
	return s.vols.Archive(ctx, p, project, name, req)
}

// RestoreVolume replaces a volume's content on this node with an archive's.
func (s *Service) RestoreVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.Volume, error) {
	if req.Checkpoint != 0 {
		return s.restoreVolumeFromCheckpoint(ctx, p, project, name, req) // checkpoint.go
	}
	return s.vols.Restore(ctx, p, project, name, req)
}

// ListArchives lists the archives of a project, of one volume or of all.
func (s *Service) ListArchives(ctx context.Context, p types.Principal, project, volume string) ([]types.VolumeArchive, error) {
	return s.vols.ListArchives(ctx, p, project, volume)
}

// DeleteArchive deletes an archive of a project's volume.
func (s *Service) DeleteArchive(ctx context.Context, p types.Principal, project, volume, name string) (types.VolumeArchive, error) {
	return s.vols.DeleteArchive(ctx, p, project, volume, name)
}
