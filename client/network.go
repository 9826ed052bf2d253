package client

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/envd"
)

// SetProjectNetwork sets a project's network policy: PUT
// /v1/projects/{p}/network. Egress "" is open.
func (c *Client) SetProjectNetwork(ctx context.Context, project string, n envd.ProjectNetwork) (envd.Project, error) {
	return post[envd.Project](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/network", n)
}
