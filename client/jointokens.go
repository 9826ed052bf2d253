package client

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// CreateJoinToken makes a join token and the short join command that uses
// it (admin token): POST /v1/cluster/join-tokens.
func (c *Client) CreateJoinToken(ctx context.Context, req types.JoinTokenRequest) (types.JoinToken, error) {
	return post[types.JoinToken](ctx, c, http.MethodPost, "/v1/cluster/join-tokens", req)
}

// Join fetches the cluster's settings with a join token, once per token:
// POST /v1/cluster/join. c must be made with the join token as its token
// (New(url, joinToken)); an unknown, expired or used token is an error
// with code join_token_invalid.
func (c *Client) Join(ctx context.Context, req types.JoinRequest) (types.JoinConfig, error) {
	return post[types.JoinConfig](ctx, c, http.MethodPost, "/v1/cluster/join", req)
}
