package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/envd-dev/envd/api/types"
)

// Checkpoint starts an operation of kind "checkpoint" (POST
// /v1/instances/{i}/checkpoint): the instance is frozen once and its rootfs
// saved as a version (not current unless req.SetCurrent) and every volume
// of its project archived at that moment, recorded together; the result is
// a types.CheckpointResult.
func (c *Client) Checkpoint(ctx context.Context, id string, req types.CheckpointRequest, opts ...RequestOption) (types.Operation, error) {
	var op types.Operation
	err := c.call(ctx, http.MethodPost, "/v1/instances/"+esc(id)+"/checkpoint", req, &op, headerOf(opts))
	return op, err
}

// ListCheckpoints lists a project's checkpoints, newest first: GET
// /v1/projects/{p}/checkpoints.
func (c *Client) ListCheckpoints(ctx context.Context, project string) ([]types.Checkpoint, error) {
	return get[[]types.Checkpoint](ctx, c, "/v1/projects/"+esc(project)+"/checkpoints")
}

// GetCheckpoint returns one checkpoint: GET /v1/projects/{p}/checkpoints/{id}.
func (c *Client) GetCheckpoint(ctx context.Context, project string, id int) (types.Checkpoint, error) {
	return get[types.Checkpoint](ctx, c, "/v1/projects/"+esc(project)+"/checkpoints/"+strconv.Itoa(id))
}

// DeleteCheckpoint deletes a checkpoint with its volume archives and
// releases its version (DELETE /v1/projects/{p}/checkpoints/{id}); the
// answer is the checkpoint as it was.
func (c *Client) DeleteCheckpoint(ctx context.Context, project string, id int) (types.Checkpoint, error) {
	var cp types.Checkpoint
	err := c.call(ctx, http.MethodDelete, "/v1/projects/"+esc(project)+"/checkpoints/"+strconv.Itoa(id), nil, &cp, nil)
	return cp, err
}

// ExportCheckpoint writes checkpoint id of project as a tar of an OCI image
// layout to w (GET /v1/projects/{p}/checkpoints/{id}/export): its version's
// image and, for a checkpoint with memory, its memory image. It returns the
// bytes written; a stream cut by the server is an error, never a short tar.
func (c *Client) ExportCheckpoint(ctx context.Context, project string, id int, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/v1/projects/" + esc(project) + "/checkpoints/" + strconv.Itoa(id) + "/export"})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	written, err := io.Copy(w, resp.Body)
	if err != nil {
		return written, fmt.Errorf("export checkpoint %d of %q: %w", id, project, err)
	}
	return written, nil
}

// ImportCheckpoint makes a checkpoint of project from a tar ExportCheckpoint
// wrote, on this or another installation (POST
// /v1/projects/{p}/checkpoints/import); the answer is the new checkpoint.
func (c *Client) ImportCheckpoint(ctx context.Context, project string, archive io.Reader) (types.Checkpoint, error) {
	return sendDecode[types.Checkpoint](ctx, c, request{
		method: http.MethodPost, path: "/v1/projects/" + esc(project) + "/checkpoints/import",
		body: archive, contentType: "application/x-tar",
	}, fmt.Sprintf("import a checkpoint into %q", project))
}
