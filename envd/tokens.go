package envd

import (
	"context"
	"fmt"
	"time"

	"github.com/envd-dev/envd/internal/errdefs"
	"github.com/envd-dev/envd/versions"
)

// TokenInfo describes an API token without the token itself, which is
// shown only once, at creation.
type TokenInfo struct {
	ID         int64      `json:"id"`
	Tenant     string     `json:"tenant"`
	Admin      bool       `json:"admin"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`   // absent: never expires
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`   // absent: not revoked
	LastUsedAt *time.Time `json:"last_used_at,omitempty"` // to the minute; absent: never used
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

func toTokenInfo(t versions.TokenInfo) TokenInfo {
	return TokenInfo{ID: t.ID, Tenant: t.Tenant, Admin: t.Admin, CreatedAt: t.CreatedAt,
		ExpiresAt: t.ExpiresAt, RevokedAt: t.RevokedAt, LastUsedAt: t.LastUsedAt}
}

// ListTokens lists API tokens, never the tokens themselves. An admin lists
// tenant's tokens, or every tenant's with tenant ""; any other caller lists
// its own tenant's (tenant "" or its own; another is ErrPermissionDenied).
func (s *Service) ListTokens(ctx context.Context, p Principal, tenant string) ([]TokenInfo, error) {
	switch {
	case tenant == "" && !p.Admin:
		tenant = p.Tenant
	case tenant != "" && tenant != p.Tenant && !p.Admin:
		return nil, fmt.Errorf("another tenant's tokens need an admin token: %w", errdefs.ErrPermissionDenied)
	}
	if tenant != "" {
		if err := ValidateName("tenant", tenant); err != nil {
			return nil, err
		}
	}
	ts, err := s.store.ListTokens(ctx, tenant)
	if err != nil {
		return nil, err
	}
	out := make([]TokenInfo, 0, len(ts))
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
func (s *Service) RevokeToken(ctx context.Context, p Principal, id int64) (TokenInfo, error) {
	if id <= 0 {
		return TokenInfo{}, fmt.Errorf("token id %d: must be positive: %w", id, errdefs.ErrInvalidArgument)
	}
	tenant := ""
	if !p.Admin {
		tenant = p.Tenant
		ts, err := s.store.ListTokens(ctx, tenant)
		if err != nil {
			return TokenInfo{}, err
		}
		for _, t := range ts {
			if t.ID == id && t.Admin {
				return TokenInfo{}, fmt.Errorf("token %d is an admin token: revoking it needs an admin token: %w", id, errdefs.ErrPermissionDenied)
			}
		}
	}
	t, err := s.store.RevokeToken(ctx, tenant, id)
	if err != nil {
		return TokenInfo{}, err
	}
	return toTokenInfo(t), nil
}
