package client

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// SetProjectNetwork sets a project's network policy: PUT
// /v1/projects/{p}/network. Egress "" is open.
func (c *Client) SetProjectNetwork(ctx context.Context, project string, n types.ProjectNetwork) (types.Project, error) {
	return post[types.Project](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/network", n)
}
