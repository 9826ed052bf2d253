package apitest

import (
	"context"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/types"
)

// Egress is the fake EgressCore.
type Egress struct{ *Recorder }

var _ api.EgressCore = (*Egress)(nil)

func fakeSecret(name string) types.Secret {
	return types.Secret{Name: name, Binding: &types.SecretBinding{Host: "api.example.org", Header: "Authorization", Format: "Bearer {{value}}", Scheme: "http"},
		CreatedAt: Epoch, UpdatedAt: Epoch}
}

func (e *Egress) EgressLog(ctx context.Context, p types.Principal, project string, limit int, before int64) ([]types.EgressDenial, error) {
	return echo(e, "EgressLog", p, []types.EgressDenial{{ID: 7, Time: Epoch, Instance: project + "-1", Kind: "dns", Name: "other.example", Reason: "name not allowed by the project's egress policy"}}, project, limit, before)
}

func (e *Egress) SetSecret(ctx context.Context, p types.Principal, name string, req types.SetSecretRequest) (types.Secret, error) {
	return echo(e, "SetSecret", p, fakeSecret(name), name, req)
}

func (e *Egress) BindSecret(ctx context.Context, p types.Principal, name string, b types.SecretBinding) (types.Secret, error) {
	return echo(e, "BindSecret", p, fakeSecret(name), name, b)
}

func (e *Egress) DeleteSecret(ctx context.Context, p types.Principal, name string) (types.Secret, error) {
	return echo(e, "DeleteSecret", p, fakeSecret(name), name)
}

func (e *Egress) ListSecrets(ctx context.Context, p types.Principal) ([]types.Secret, error) {
	return echo(e, "ListSecrets", p, []types.Secret{fakeSecret("api-key")})
}
