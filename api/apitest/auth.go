package apitest

import (
	"context"
	"crypto/subtle"
	"fmt"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Auth is the fake Authenticator: it accepts Token for Principal.
type Auth struct {
	*Recorder
	Token     string
	Principal types.Principal
}

func (c *Auth) Authenticate(ctx context.Context, token string) (types.Principal, error) {
	c.record("Authenticate", types.Principal{}, token)
	if subtle.ConstantTimeCompare([]byte(token), []byte(c.Token)) != 1 {
		return types.Principal{}, fmt.Errorf("token: %w", errdefs.ErrUnauthenticated)
	}
	return c.Principal, nil
}
