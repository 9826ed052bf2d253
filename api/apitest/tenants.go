package apitest

import (
	"context"
	"time"

	"github.com/envd-dev/envd/api/types"
)

// Tenants is the fake TenantCore.
type Tenants struct{ *Recorder }

func (c *Tenants) SetQuota(ctx context.Context, p types.Principal, tenant string, q types.Quota) (types.Quota, error) {
	return echo(c, "SetQuota", p, q, tenant, q)
}

// Usage answers an empty usage of the tenant ("" = the caller's).
func (c *Tenants) Usage(ctx context.Context, p types.Principal, tenant string) (types.Usage, error) {
	u := types.Usage{Tenant: tenant, Versions: map[string]int{}}
	if tenant == "" {
		u.Tenant = p.Tenant
	}
	return echo(c, "Usage", p, u, tenant)
}

// CreateToken answers a fixed token of the tenant.
func (c *Tenants) CreateToken(ctx context.Context, p types.Principal, tenant string, req types.CreateTokenRequest) (types.Token, error) {
	return echo(c, "CreateToken", p, types.Token{Tenant: tenant, Token: "tok-" + tenant, Admin: req.Admin}, tenant, req)
}

// ListTokens answers two tokens of the tenant (tenant "t1" for ""): id 1
// an admin token, id 2 a plain one that expires a day after Epoch.
func (c *Tenants) ListTokens(ctx context.Context, p types.Principal, tenant string) ([]types.TokenInfo, error) {
	c.record("ListTokens", p, tenant)
	if tenant == "" {
		tenant = "t1"
	}
	exp := Epoch.Add(24 * time.Hour)
	return []types.TokenInfo{
		{ID: 1, Tenant: tenant, Admin: true, CreatedAt: Epoch, LastUsedAt: &Epoch},
		{ID: 2, Tenant: tenant, CreatedAt: Epoch, ExpiresAt: &exp},
	}, nil
}

// RevokeToken answers token id of the caller's tenant, revoked at Epoch.
func (c *Tenants) RevokeToken(ctx context.Context, p types.Principal, id int64) (types.TokenInfo, error) {
	return echo(c, "RevokeToken", p, types.TokenInfo{ID: id, Tenant: p.Tenant, CreatedAt: Epoch, RevokedAt: &Epoch}, id)
}
