package api

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// EgressCore serves egress by host name: the denial log of a project and
// the tenant's brokered secrets (admin tokens only; values are write-only).
type EgressCore interface {
	// EgressLog returns a project's newest denials first, at most limit
	// (0 = 100), older than id before (0 = the newest).
	EgressLog(ctx context.Context, p types.Principal, project string, limit int, before int64) ([]types.EgressDenial, error)
	SetSecret(ctx context.Context, p types.Principal, name string, req types.SetSecretRequest) (types.Secret, error)
	BindSecret(ctx context.Context, p types.Principal, name string, b types.SecretBinding) (types.Secret, error)
	DeleteSecret(ctx context.Context, p types.Principal, name string) (types.Secret, error)
	ListSecrets(ctx context.Context, p types.Principal) ([]types.Secret, error)
}

type egressRoutes struct{ core EgressCore }

func (g egressRoutes) routes() []route {
	return []route{
		{http.MethodGet, "/projects/:p/egress/log", handle(http.StatusOK, func(r in, _ none) ([]types.EgressDenial, error) {
			limit, err := r.queryInt("limit")
			if err != nil {
				return nil, err
			}
			before, err := r.queryInt("before")
			if err != nil {
				return nil, err
			}
			return items(g.core.EgressLog(r.ctx, r.p, r.param("p"), limit, int64(before)))
		})},
		{http.MethodGet, "/secrets", handle(http.StatusOK, func(r in, _ none) ([]types.Secret, error) {
			return items(g.core.ListSecrets(r.ctx, r.p))
		})},
		{http.MethodPut, "/secrets/:s", handle(http.StatusOK, func(r in, req types.SetSecretRequest) (types.Secret, error) {
			return g.core.SetSecret(r.ctx, r.p, r.param("s"), req)
		})},
		{http.MethodPut, "/secrets/:s/binding", handle(http.StatusOK, func(r in, req types.SecretBinding) (types.Secret, error) {
			return g.core.BindSecret(r.ctx, r.p, r.param("s"), req)
		})},
		{http.MethodDelete, "/secrets/:s", handle(http.StatusOK, func(r in, _ none) (types.Secret, error) {
			return g.core.DeleteSecret(r.ctx, r.p, r.param("s"))
		})},
	}
}
