package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/api/errdefs"
)

// TokenCore is the part of Core that lists and revokes API tokens.
type TokenCore interface {
	// ListTokens lists tokens without the tokens: an admin's of tenant (""
	// = every tenant), anyone else's of its own tenant.
	ListTokens(ctx context.Context, p types.Principal, tenant string) ([]types.TokenInfo, error)
	// RevokeToken revokes token id; another tenant's id is not found for
	// a non-admin.
	RevokeToken(ctx context.Context, p types.Principal, id int64) (types.TokenInfo, error)
}

// listTokens serves GET /admin/tokens[?tenant=T], /admin/tenants/:t/tokens
// and /tokens (the caller's tenant, or every tenant's for an admin).
func (h *handlers) listTokens(admin bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		p := principal(c)
		if admin && !p.Admin {
			writeError(c, fmt.Errorf("listing tokens under /v1/admin needs an admin token (use /v1/tokens): %w", errdefs.ErrPermissionDenied))
			return
		}
		tenant := c.Param("t")
		if tenant == "" {
			tenant = c.Query("tenant")
		}
		v, err := h.core.ListTokens(c.Request.Context(), p, tenant)
		list(c, v, err)
	}
}

// revokeToken serves DELETE /admin/tokens/:id and /tokens/:id.
func (h *handlers) revokeToken(admin bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		p := principal(c)
		if admin && !p.Admin {
			writeError(c, fmt.Errorf("revoking tokens under /v1/admin needs an admin token (use /v1/tokens): %w", errdefs.ErrPermissionDenied))
			return
		}
		id, err := strconv.ParseInt(c.Param("id"), 10, 64)
		if err != nil || id <= 0 {
			writeError(c, invalidArgument("token id %q: want a positive number", c.Param("id")))
			return
		}
		v, err := h.core.RevokeToken(c.Request.Context(), p, id)
		respond(c, http.StatusOK, v, err)
	}
}
