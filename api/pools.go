package api

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// PoolCore sets a project's warm pool (docs/api.md, "Warm pools").
type PoolCore interface {
	// SetProjectPool sets the pool's size; the pool fills and drains in the
	// background.
	SetProjectPool(ctx context.Context, p types.Principal, project string, req types.PoolSetting) (types.Project, error)
}

type pools struct{ core PoolCore }

func (g pools) routes() []route {
	return []route{
		{http.MethodPut, "/projects/:p/pool", handle(http.StatusOK, func(r in, req types.PoolSetting) (types.Project, error) {
			return g.core.SetProjectPool(r.ctx, r.p, r.param("p"), req)
		})},
	}
}
