package client

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/envd"
)

// SetProjectLimits replaces a project's resource limits: PUT
// /v1/projects/{p}/limits. Zero fields take the node's defaults.
func (c *Client) SetProjectLimits(ctx context.Context, project string, l envd.Limits) (envd.Project, error) {
	return post[envd.Project](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/limits", l)
}
