package api

import (
	"context"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/api/types"
)

// CheckpointCore takes coordinated checkpoints of instances (rootfs and
// volumes at one freeze) and keeps them as units.
type CheckpointCore interface {
	// Checkpoint starts an operation of kind "checkpoint". A repeated call
	// with the same non-empty idempotencyKey returns the same operation.
	Checkpoint(ctx context.Context, p types.Principal, id string, req types.CheckpointRequest, idempotencyKey string) (types.Operation, error)
	ListCheckpoints(ctx context.Context, p types.Principal, project string) ([]types.Checkpoint, error)
	GetCheckpoint(ctx context.Context, p types.Principal, project string, id int) (types.Checkpoint, error)
	// DeleteCheckpoint deletes the checkpoint with its archives and
	// releases its version.
	DeleteCheckpoint(ctx context.Context, p types.Principal, project string, id int) (types.Checkpoint, error)
	// ExportCheckpoint writes the checkpoint as a tar of an OCI image
	// layout to w: its version's image and its memory image, if any.
	ExportCheckpoint(ctx context.Context, p types.Principal, project string, id int, w io.Writer) error
	// ImportCheckpoint makes a checkpoint of the project from such a tar.
	ImportCheckpoint(ctx context.Context, p types.Principal, project string, archive io.Reader) (types.Checkpoint, error)
}

type checkpoints struct{ core CheckpointCore }

func (g checkpoints) routes() []route {
	return []route{
		{http.MethodPost, "/instances/:i/checkpoint", started(func(r in, req types.CheckpointRequest) (types.Operation, error) {
			return g.core.Checkpoint(r.ctx, r.p, r.param("i"), req, r.key())
		})},
		{http.MethodGet, "/projects/:p/checkpoints", handle(http.StatusOK, func(r in, _ none) ([]types.Checkpoint, error) {
			return items(g.core.ListCheckpoints(r.ctx, r.p, r.param("p")))
		})},
		{http.MethodGet, "/projects/:p/checkpoints/:id", handle(http.StatusOK, func(r in, _ none) (types.Checkpoint, error) {
			id, err := r.checkpointID()
			if err != nil {
				return types.Checkpoint{}, err
			}
			return g.core.GetCheckpoint(r.ctx, r.p, r.param("p"), id)
		})},
		{http.MethodDelete, "/projects/:p/checkpoints/:id", handle(http.StatusOK, func(r in, _ none) (types.Checkpoint, error) {
			id, err := r.checkpointID()
			if err != nil {
				return types.Checkpoint{}, err
			}
			return g.core.DeleteCheckpoint(r.ctx, r.p, r.param("p"), id)
		})},
		{http.MethodGet, "/projects/:p/checkpoints/:id/export", g.export},
		{http.MethodPost, "/projects/:p/checkpoints/import", handle(http.StatusCreated, func(r in, _ none) (types.Checkpoint, error) {
			if ct := r.c.GetHeader("Content-Type"); ct != "" {
				mt, _, err := mime.ParseMediaType(ct)
				if err != nil || !imageContentTypes[mt] {
					return types.Checkpoint{}, invalidArgument("content type %q: a checkpoint upload is a tar stream (application/x-tar)", ct)
				}
			}
			return g.core.ImportCheckpoint(r.ctx, r.p, r.param("p"), r.c.Request.Body)
		})},
	}
}

// export streams checkpoint :id as an OCI image layout tar; as a version's
// export, a failure after the first byte aborts the connection.
func (g checkpoints) export(c *gin.Context) {
	r := in{ctx: c.Request.Context(), p: principal(c), c: c}
	id, err := r.checkpointID()
	if err != nil {
		writeError(c, err)
		return
	}
	streamTar(c, fmt.Sprintf("%s-checkpoint-%d.oci.tar", r.param("p"), id), func(w io.Writer) error {
		return g.core.ExportCheckpoint(r.ctx, r.p, r.param("p"), id, w)
	})
}

// checkpointID parses the :id path parameter of a checkpoint.
func (r in) checkpointID() (int, error) {
	s := r.param("id")
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, invalidArgument("checkpoint id %q in the path: must be a positive integer", s)
	}
	return n, nil
}
