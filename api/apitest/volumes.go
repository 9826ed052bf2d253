package apitest

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// Volumes is the fake VolumeCore.
type Volumes struct{ *Recorder }

func (c *Volumes) ListVolumes(ctx context.Context, p types.Principal, project string) ([]types.Volume, error) {
	return echo(c, "ListVolumes", p, []types.Volume(nil), project)
}

// AddVolume answers the project with the spec as its only volume's name.
func (c *Volumes) AddVolume(ctx context.Context, p types.Principal, project string, req types.AddVolumeRequest) (types.Project, error) {
	return echo(c, "AddVolume", p, types.Project{Name: project, Volumes: []types.Volume{{Name: req.Spec}}, CreatedAt: Epoch}, project, req)
}

func (c *Volumes) RemoveVolume(ctx context.Context, p types.Principal, project, name string) (types.Project, error) {
	return echo(c, "RemoveVolume", p, types.Project{Name: project, CreatedAt: Epoch}, project, name)
}

func (c *Volumes) ArchiveVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.VolumeArchive, error) {
	return echo(c, "ArchiveVolume", p, types.VolumeArchive{Key: req.Key, Bytes: 1, Files: 1}, project, name, req)
}

func (c *Volumes) RestoreVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.Volume, error) {
	return echo(c, "RestoreVolume", p, types.Volume{Name: name}, project, name, req)
}

// ListArchives answers one archive named "a1" of the volume ("work" for
// all volumes).
func (c *Volumes) ListArchives(ctx context.Context, p types.Principal, project, volume string) ([]types.VolumeArchive, error) {
	c.record("ListArchives", p, project, volume)
	if volume == "" {
		volume = "work"
	}
	return []types.VolumeArchive{{Key: "volumes/" + p.Tenant + "/" + project + "/" + volume + "/a1/0123456789abcdef.tar.zst",
		Bytes: 2048, Files: 3, Name: "a1", Project: project, Volume: volume, Node: "node-1", CreatedAt: Epoch}}, nil
}

func (c *Volumes) DeleteArchive(ctx context.Context, p types.Principal, project, volume, name string) (types.VolumeArchive, error) {
	return echo(c, "DeleteArchive", p, types.VolumeArchive{Name: name, Project: project, Volume: volume, CreatedAt: Epoch}, project, volume, name)
}
