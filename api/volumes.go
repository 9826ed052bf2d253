package api

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// VolumeCore manages a project's volumes and their archives in object
// storage (made by ArchiveVolume, used by RestoreVolume).
type VolumeCore interface {
	ListVolumes(ctx context.Context, p types.Principal, project string) ([]types.Volume, error)
	AddVolume(ctx context.Context, p types.Principal, project string, req types.AddVolumeRequest) (types.Project, error)
	RemoveVolume(ctx context.Context, p types.Principal, project, name string) (types.Project, error)
	ArchiveVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.VolumeArchive, error)
	RestoreVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.Volume, error)
	// ListArchives lists a project's archives, of one volume or of all
	// (volume "").
	ListArchives(ctx context.Context, p types.Principal, project, volume string) ([]types.VolumeArchive, error)
	// DeleteArchive deletes archive name of a project's volume.
	DeleteArchive(ctx context.Context, p types.Principal, project, volume, name string) (types.VolumeArchive, error)
}

type volumes struct{ core VolumeCore }

func (g volumes) routes() []route {
	archives := handle(http.StatusOK, func(r in, _ none) ([]types.VolumeArchive, error) {
		return items(g.core.ListArchives(r.ctx, r.p, r.param("p"), r.param("v"))) // "" on /projects/:p/archives: all
	})
	return []route{
		{http.MethodGet, "/projects/:p/volumes", handle(http.StatusOK, func(r in, _ none) ([]types.Volume, error) {
			return items(g.core.ListVolumes(r.ctx, r.p, r.param("p")))
		})},
		{http.MethodPost, "/projects/:p/volumes", handle(http.StatusCreated, func(r in, req types.AddVolumeRequest) (types.Project, error) {
			return g.core.AddVolume(r.ctx, r.p, r.param("p"), req)
		})},
		{http.MethodDelete, "/projects/:p/volumes/:v", handle(http.StatusOK, func(r in, _ none) (types.Project, error) {
			return g.core.RemoveVolume(r.ctx, r.p, r.param("p"), r.param("v"))
		})},
		{http.MethodPost, "/projects/:p/volumes/:v/archive", handle(http.StatusOK, func(r in, req types.VolumeArchiveRequest) (types.VolumeArchive, error) {
			return g.core.ArchiveVolume(r.ctx, r.p, r.param("p"), r.param("v"), req)
		})},
		{http.MethodPost, "/projects/:p/volumes/:v/restore", handle(http.StatusOK, func(r in, req types.VolumeArchiveRequest) (types.Volume, error) {
			return g.core.RestoreVolume(r.ctx, r.p, r.param("p"), r.param("v"), req)
		})},
		{http.MethodGet, "/projects/:p/archives", archives},
		{http.MethodGet, "/projects/:p/volumes/:v/archives", archives},
		{http.MethodDelete, "/projects/:p/volumes/:v/archives/:name", handle(http.StatusOK, func(r in, _ none) (types.VolumeArchive, error) {
			return g.core.DeleteArchive(r.ctx, r.p, r.param("p"), r.param("v"), r.param("name"))
		})},
	}
}
