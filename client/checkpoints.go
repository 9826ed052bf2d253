package client

import (
	"context"
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
