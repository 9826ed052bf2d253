package client

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// SetProjectIdle sets a project's idle stop: PUT /v1/projects/{p}/idle.
// An empty setting returns to the node's default.
func (c *Client) SetProjectIdle(ctx context.Context, project string, idle types.IdleSetting) (types.Project, error) {
	return post[types.Project](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/idle", idle)
}
