// Package tokens is the API's bearer tokens: who a token is
// (api.Authenticator) and their management (api.TenantCore's token
// routes).
package tokens

import (
	"context"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Store is what tokens need of the store.
type Store interface {
	Authenticate(ctx context.Context, token string) (versions.Principal, error)
	NewToken(ctx context.Context, tenant string, admin bool, ttl time.Duration) (string, versions.TokenInfo, error)
	ListTokens(ctx context.Context, tenant string) ([]versions.TokenInfo, error)
	RevokeToken(ctx context.Context, tenant string, id int64) (versions.TokenInfo, error)
}

// Tokens serves the API's tokens.
type Tokens struct{ store Store }

// New makes the tokens' part.
func New(store Store) *Tokens { return &Tokens{store: store} }

// Authenticate resolves a bearer token.
func (tk *Tokens) Authenticate(ctx context.Context, token string) (types.Principal, error) {
	if token == "" {
		return types.Principal{}, fmt.Errorf("missing bearer token: %w", errdefs.ErrUnauthenticated)
	}
	p, err := tk.store.Authenticate(ctx, token)
	if err != nil {
		return types.Principal{}, err
	}
	return types.Principal{Tenant: p.Tenant, Admin: p.Admin}, nil
}

// maxTokenLifetime bounds ExpiresIn: ten years, which is "never" in
// practice, and keeps the database's interval arithmetic in range.
const maxTokenLifetime = 10 * 365 * 24 * time.Hour

// tokenLifetime parses CreateTokenRequest.ExpiresIn: "" is 0 (never).
func tokenLifetime(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 || d > maxTokenLifetime {
		return 0, fmt.Errorf("expires_in %q: want a positive Go duration of at most %v (e.g. 720h): %w", s, maxTokenLifetime, errdefs.ErrInvalidArgument)
	}
	return d, nil
}

func toTokenInfo(t versions.TokenInfo) types.TokenInfo {
	return types.TokenInfo{ID: t.ID, Tenant: t.Tenant, Admin: t.Admin, CreatedAt: t.CreatedAt,
		ExpiresAt: t.ExpiresAt, RevokedAt: t.RevokedAt, LastUsedAt: t.LastUsedAt}
}

// ListTokens lists API tokens, never the tokens themselves. An admin lists
// tenant's tokens, or every tenant's with tenant ""; any other caller lists
// its own tenant's (tenant "" or its own; another is ErrPermissionDenied).
func (tk *Tokens) ListTokens(ctx context.Context, p types.Principal, tenant string) ([]types.TokenInfo, error) {
	switch {
	case tenant == "" && !p.Admin:
		tenant = p.Tenant
	case tenant != "" && tenant != p.Tenant && !p.Admin:
		return nil, fmt.Errorf("another tenant's tokens need an admin token: %w", errdefs.ErrPermissionDenied)
	}
	if tenant != "" {
		if err := names.Validate("tenant", tenant); err != nil {
			return nil, err
		}
	}
	ts, err := tk.store.ListTokens(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]types.TokenInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, toTokenInfo(t))
	}
	return out, nil
}

// RevokeToken revokes token id: requests with it are refused from then on
// (401). An admin revokes any token but the last live admin token
// (ErrFailedPrecondition); any other caller revokes its own tenant's
// non-admin tokens (its own included): another tenant's id is
// ErrNotFound, an admin token of its tenant ErrPermissionDenied.
func (tk *Tokens) RevokeToken(ctx context.Context, p types.Principal, id int64) (types.TokenInfo, error) {
	if id <= 0 {
		return types.TokenInfo{}, fmt.Errorf("token id %d: must be positive: %w", id, errdefs.ErrInvalidArgument)
	}
	tenant := ""
	if !p.Admin {
		tenant = p.Tenant
		ts, err := tk.store.ListTokens(ctx, tenant)
		if err != nil {
			return types.TokenInfo{}, err
		}
		for _, t := range ts {
			if t.ID == id && t.Admin {
				return types.TokenInfo{}, fmt.Errorf("token %d is an admin token: revoking it needs an admin token: %w", id, errdefs.ErrPermissionDenied)
			}
		}
	}
	t, err := tk.store.RevokeToken(ctx, tenant, id)
	if err != nil {
		return types.TokenInfo{}, err
	}
	return toTokenInfo(t), nil
}

// CreateToken creates an API token of tenant (admin only), creating the
// tenant if needed. The token is shown once.
func (tk *Tokens) CreateToken(ctx context.Context, p types.Principal, tenant string, req types.CreateTokenRequest) (types.Token, error) {
	if !p.Admin {
		return types.Token{}, fmt.Errorf("creating tokens needs an admin token: %w", errdefs.ErrPermissionDenied)
	}
	if err := names.Validate("tenant", tenant); err != nil {
		return types.Token{}, err
	}
	if names.ImageRepo("") == names.ProjectRepo(tenant, "") {
		return types.Token{}, fmt.Errorf("tenant %q: reserved (its repositories would be the base images'): %w", tenant, errdefs.ErrInvalidArgument)
	}
	ttl, err := tokenLifetime(req.ExpiresIn)
	if err != nil {
		return types.Token{}, err
	}
	tok, info, err := tk.store.NewToken(ctx, tenant, req.Admin, ttl)
	if err != nil {
		return types.Token{}, err
	}
	return types.Token{Tenant: tenant, Token: tok, Admin: req.Admin, ID: info.ID, CreatedAt: info.CreatedAt, ExpiresAt: info.ExpiresAt}, nil
}
