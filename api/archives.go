package api

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"
)

// ArchiveCore is the part of Core that lists and deletes volume archives
// (made by ArchiveVolume, used by RestoreVolume).
type ArchiveCore interface {
	// ListArchives lists a project's archives, of one volume or of all
	// (volume "").
	ListArchives(ctx context.Context, p types.Principal, project, volume string) ([]types.VolumeArchive, error)
	// DeleteArchive deletes archive name of a project's volume.
	DeleteArchive(ctx context.Context, p types.Principal, project, volume, name string) (types.VolumeArchive, error)
}

// listArchives serves GET /projects/:p/archives and
// /projects/:p/volumes/:v/archives.
func (h *handlers) listArchives(c *gin.Context) {
	v, err := h.core.ListArchives(c.Request.Context(), principal(c), c.Param("p"), c.Param("v"))
	list(c, v, err)
}

func (h *handlers) deleteArchive(c *gin.Context) {
	v, err := h.core.DeleteArchive(c.Request.Context(), principal(c), c.Param("p"), c.Param("v"), c.Param("name"))
	respond(c, http.StatusOK, v, err)
}
