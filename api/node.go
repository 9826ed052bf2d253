package api

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// NodeCore is the node as a whole: what it runs, its GC. Its metrics are
// served by WithMetrics' handler (metrics.go).
type NodeCore interface {
	Info(ctx context.Context) (types.Info, error)
	// GC starts an operation of kind "gc" (admin only).
	GC(ctx context.Context, p types.Principal, req types.GCRequest, idempotencyKey string) (types.Operation, error)
}

type node struct{ core NodeCore }

func (g node) routes() []route {
	return []route{
		{http.MethodGet, "/info", handle(http.StatusOK, func(r in, _ none) (types.Info, error) {
			return g.core.Info(r.ctx)
		})},
		{http.MethodPost, "/admin/gc", started(func(r in, req types.GCRequest) (types.Operation, error) {
			return g.core.GC(r.ctx, r.p, req, r.key())
		})},
	}
}
