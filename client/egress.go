package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/envd-dev/envd/api/types"
)

// EgressLog returns a project's newest egress denials first: GET
// /v1/projects/{p}/egress/log. limit 0 = the server's default (100).
func (c *Client) EgressLog(ctx context.Context, project string, limit int) ([]types.EgressDenial, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	path := "/v1/projects/" + esc(project) + "/egress/log"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return get[[]types.EgressDenial](ctx, c, path)
}

// SetSecret stores or rotates a brokered secret: PUT /v1/secrets/{name}.
func (c *Client) SetSecret(ctx context.Context, name, value string) (types.Secret, error) {
	return post[types.Secret](ctx, c, http.MethodPut, "/v1/secrets/"+esc(name), types.SetSecretRequest{Value: value})
}

// BindSecret binds a secret to a host (Host "" unbinds): PUT
// /v1/secrets/{name}/binding.
func (c *Client) BindSecret(ctx context.Context, name string, b types.SecretBinding) (types.Secret, error) {
	return post[types.Secret](ctx, c, http.MethodPut, "/v1/secrets/"+esc(name)+"/binding", b)
}

// DeleteSecret revokes a secret: DELETE /v1/secrets/{name}.
func (c *Client) DeleteSecret(ctx context.Context, name string) (types.Secret, error) {
	return post[types.Secret](ctx, c, http.MethodDelete, "/v1/secrets/"+esc(name), nil)
}

// ListSecrets lists the tenant's secrets, without values: GET /v1/secrets.
func (c *Client) ListSecrets(ctx context.Context) ([]types.Secret, error) {
	return get[[]types.Secret](ctx, c, "/v1/secrets")
}
