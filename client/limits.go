package client

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// SetProjectLimits replaces a project's resource limits: PUT
// /v1/projects/{p}/limits. Zero fields take the node's defaults.
func (c *Client) SetProjectLimits(ctx context.Context, project string, l types.Limits) (types.Project, error) {
	return post[types.Project](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/limits", l)
}
