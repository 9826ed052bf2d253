package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/errdefs"
)

// TenantCore manages tenants: their quotas, usage and API tokens.
type TenantCore interface {
	// SetQuota sets a tenant's quota (admin only).
	SetQuota(ctx context.Context, p types.Principal, tenant string, q types.Quota) (types.Quota, error)
	// Usage reports a tenant's usage and quota ("" = the caller's).
	Usage(ctx context.Context, p types.Principal, tenant string) (types.Usage, error)
	// CreateToken creates an API token of a tenant (admin only).
	CreateToken(ctx context.Context, p types.Principal, tenant string, req types.CreateTokenRequest) (types.Token, error)
	// ListTokens lists tokens without the tokens: an admin's of tenant (""
	// = every tenant), anyone else's of its own tenant.
	ListTokens(ctx context.Context, p types.Principal, tenant string) ([]types.TokenInfo, error)
	// RevokeToken revokes token id; another tenant's id is not found for
	// a non-admin.
	RevokeToken(ctx context.Context, p types.Principal, id int64) (types.TokenInfo, error)
}

type tenants struct{ core TenantCore }

func (g tenants) routes() []route {
	usage := handle(http.StatusOK, func(r in, _ none) (types.Usage, error) {
		return g.core.Usage(r.ctx, r.p, r.param("t")) // "" on /usage: the caller's
	})
	return []route{
		{http.MethodPut, "/admin/tenants/:t/quota", handle(http.StatusOK, func(r in, req types.Quota) (types.Quota, error) {
			return g.core.SetQuota(r.ctx, r.p, r.param("t"), req)
		})},
		{http.MethodGet, "/admin/tenants/:t/usage", usage},
		{http.MethodGet, "/usage", usage},
		{http.MethodPost, "/admin/tenants/:t/tokens", handle(http.StatusCreated, func(r in, req types.CreateTokenRequest) (types.Token, error) {
			return g.core.CreateToken(r.ctx, r.p, r.param("t"), req)
		})},
		{http.MethodGet, "/admin/tokens", g.listTokens(true)},
		{http.MethodGet, "/admin/tenants/:t/tokens", g.listTokens(true)},
		{http.MethodDelete, "/admin/tokens/:id", g.revokeToken(true)},
		{http.MethodGet, "/tokens", g.listTokens(false)},
		{http.MethodDelete, "/tokens/:id", g.revokeToken(false)},
	}
}

// listTokens serves GET /admin/tokens[?tenant=T], /admin/tenants/:t/tokens
// and /tokens (the caller's tenant, or every tenant's for an admin).
func (g tenants) listTokens(admin bool) gin.HandlerFunc {
	return handle(http.StatusOK, func(r in, _ none) ([]types.TokenInfo, error) {
		if admin && !r.p.Admin {
			return nil, fmt.Errorf("listing tokens under /v1/admin needs an admin token (use /v1/tokens): %w", errdefs.ErrPermissionDenied)
		}
		tenant := r.param("t")
		if tenant == "" {
			tenant = r.c.Query("tenant")
		}
		return items(g.core.ListTokens(r.ctx, r.p, tenant))
	})
}

// revokeToken serves DELETE /admin/tokens/:id and /tokens/:id.
func (g tenants) revokeToken(admin bool) gin.HandlerFunc {
	return handle(http.StatusOK, func(r in, _ none) (types.TokenInfo, error) {
		if admin && !r.p.Admin {
			return types.TokenInfo{}, fmt.Errorf("revoking tokens under /v1/admin needs an admin token (use /v1/tokens): %w", errdefs.ErrPermissionDenied)
		}
		id, err := strconv.ParseInt(r.param("id"), 10, 64)
		if err != nil || id <= 0 {
			return types.TokenInfo{}, invalidArgument("token id %q: want a positive number", r.param("id"))
		}
		return g.core.RevokeToken(r.ctx, r.p, id)
	})
}
