package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// JoinCore makes join tokens and answers the nodes that join with one.
type JoinCore interface {
	// CreateJoinToken makes a join token (admin) and the short command
	// that uses it.
	CreateJoinToken(ctx context.Context, p types.Principal, req types.JoinTokenRequest) (types.JoinToken, error)
	// Join gives the cluster's settings to a joining node, once per
	// token; an unknown, expired or used token is errdefs.ErrJoinToken.
	Join(ctx context.Context, token string, req types.JoinRequest) (types.JoinConfig, error)
}

type joinTokens struct{ core JoinCore }

func (g joinTokens) routes() []route {
	return []route{
		{http.MethodPost, "/cluster/join-tokens", handle(http.StatusCreated, func(r in, req types.JoinTokenRequest) (types.JoinToken, error) {
			return g.core.CreateJoinToken(r.ctx, r.p, req)
		})},
	}
}

// join is POST /v1/cluster/join, outside the API tokens' authentication:
// its bearer token is a join token, which only this route accepts.
func (g joinTokens) join(c *gin.Context) {
	token, ok := bearerToken(c.GetHeader("Authorization"))
	if !ok {
		c.Header("WWW-Authenticate", `Bearer realm="envd"`)
		writeError(c, errdefs.WithDetails(fmt.Errorf("missing join token in the Authorization header: %w", errdefs.ErrJoinToken), map[string]any{"reason": "unknown"}))
		return
	}
	var req types.JoinRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	cfg, err := g.core.Join(c.Request.Context(), token, req)
	if err != nil {
		writeError(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusOK, cfg)
}
