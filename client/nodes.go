package client

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// ListNodes lists the cluster's nodes (admin token): GET /v1/nodes.
func (c *Client) ListNodes(ctx context.Context) ([]types.Node, error) {
	l, err := get[types.NodeList](ctx, c, "/v1/nodes")
	return l.Nodes, err
}

// GetNode: GET /v1/nodes/{name} (admin token).
func (c *Client) GetNode(ctx context.Context, name string) (types.Node, error) {
	return get[types.Node](ctx, c, "/v1/nodes/"+esc(name))
}

// CordonNode stops placements on a node: POST /v1/nodes/{name}/cordon.
func (c *Client) CordonNode(ctx context.Context, name string) (types.Node, error) {
	return post[types.Node](ctx, c, http.MethodPost, "/v1/nodes/"+esc(name)+"/cordon", nil)
}

// UncordonNode makes a node ready again: POST /v1/nodes/{name}/uncordon.
func (c *Client) UncordonNode(ctx context.Context, name string) (types.Node, error) {
	return post[types.Node](ctx, c, http.MethodPost, "/v1/nodes/"+esc(name)+"/uncordon", nil)
}

// DrainNode drains a node: POST /v1/nodes/{name}/drain. The node hibernates
// its instances and then shows state drained.
func (c *Client) DrainNode(ctx context.Context, name string) (types.Node, error) {
	return post[types.Node](ctx, c, http.MethodPost, "/v1/nodes/"+esc(name)+"/drain", nil)
}

// JoinCommand is the command another machine runs to join (admin token):
// GET /v1/cluster/join-command.
func (c *Client) JoinCommand(ctx context.Context) (types.JoinCommand, error) {
	return get[types.JoinCommand](ctx, c, "/v1/cluster/join-command")
}

// SetProjectCheckpoint sets how often the project's running retained
// instances are checkpointed: PUT /v1/projects/{p}/checkpoint ("0" = never).
func (c *Client) SetProjectCheckpoint(ctx context.Context, project string, s types.CheckpointSetting) (types.CheckpointSetting, error) {
	return post[types.CheckpointSetting](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/checkpoint", s)
}

// GetProjectCheckpoint: GET /v1/projects/{p}/checkpoint.
func (c *Client) GetProjectCheckpoint(ctx context.Context, project string) (types.CheckpointSetting, error) {
	return get[types.CheckpointSetting](ctx, c, "/v1/projects/"+esc(project)+"/checkpoint")
}
