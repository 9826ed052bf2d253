package client

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// SetProjectPool sets a project's warm pool: PUT /v1/projects/{p}/pool.
func (c *Client) SetProjectPool(ctx context.Context, project string, pool types.PoolSetting) (types.Project, error) {
	return post[types.Project](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/pool", pool)
}
