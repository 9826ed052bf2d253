package api

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"
)

// NodeCore is the node as a whole: what it runs, its metrics, its GC.
type NodeCore interface {
	Info(ctx context.Context) (types.Info, error)
	// Metrics is the Prometheus text exposition of the node (admin only).
	Metrics(ctx context.Context, p types.Principal) (string, error)
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

// metrics serves GET /metrics (outside /v1): text, not JSON.
func (g node) metrics(c *gin.Context) {
	text, err := g.core.Metrics(c.Request.Context(), principal(c))
	if err != nil {
		writeError(c, err)
		return
	}
	c.Data(http.StatusOK, "text/plain; version=0.0.4; charset=utf-8", []byte(text))
}
