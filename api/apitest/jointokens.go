package apitest

import (
	"context"
	"fmt"
	"sync"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// JoinToken is the join token the fake makes; the fake accepts it once.
const JoinToken = "envdjoin_fake"

// Join is the fake JoinCore.
type Join struct {
	*Recorder
	mu     sync.Mutex
	joined bool // a join with JoinToken was answered
}

// CreateJoinToken answers JoinToken, expiring an hour after Epoch.
func (c *Join) CreateJoinToken(ctx context.Context, p types.Principal, req types.JoinTokenRequest) (types.JoinToken, error) {
	c.record("CreateJoinToken", p, req)
	if !p.Admin {
		return types.JoinToken{}, fmt.Errorf("join token: %w", errdefs.ErrPermissionDenied)
	}
	args := []string{"envd", "serve", "--join", "http://127.0.0.1:1", "--token", JoinToken}
	return types.JoinToken{Token: JoinToken, ExpiresAt: Epoch.Add(3600e9), Command: "envd serve --join http://127.0.0.1:1 --token " + JoinToken, Args: args}, nil
}

// Join answers a fixed configuration for JoinToken, once; another token
// is unknown, a second use is used.
func (c *Join) Join(ctx context.Context, token string, req types.JoinRequest) (types.JoinConfig, error) {
	c.record("Join", types.Principal{}, req)
	c.mu.Lock()
	defer c.mu.Unlock()
	refuse := func(reason string) error {
		return errdefs.WithDetails(fmt.Errorf("join token %s: %w", reason, errdefs.ErrJoinToken), map[string]any{"reason": reason})
	}
	switch {
	case token != JoinToken:
		return types.JoinConfig{}, refuse("unknown")
	case c.joined:
		return types.JoinConfig{}, refuse("used")
	}
	c.joined = true
	return types.JoinConfig{Database: "postgres://envd:pw@db/envd", Registry: "registry:5000", RegistryCredential: "envd-node:secret"}, nil
}
