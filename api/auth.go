package api

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/errdefs"
)

// Authenticator resolves bearer tokens.
type Authenticator interface {
	// Authenticate returns the principal a bearer token belongs to, or an
	// error of kind errdefs.ErrUnauthenticated.
	Authenticate(ctx context.Context, token string) (types.Principal, error)
}

const principalKey = "envd.principal"

// authenticate resolves the bearer token to a principal, or answers 401.
// The token comes from the Authorization header or, on a WebSocket upgrade
// (which browsers cannot give headers), from the bearer subprotocol.
func authenticate(core Authenticator) gin.HandlerFunc {
	return func(c *gin.Context) {
		token, ok := bearerToken(c.GetHeader("Authorization"))
		if !ok && strings.EqualFold(c.GetHeader("Upgrade"), "websocket") {
			token, ok = subprotocolToken(c.Request)
		}
		p, ok := principalOf(c, core, token, ok)
		if !ok {
			return
		}
		c.Set(principalKey, p)
		c.Next()
	}
}

func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func principal(c *gin.Context) types.Principal {
	p, _ := c.Get(principalKey)
	pr, _ := p.(types.Principal)
	return pr
}

// principalOf resolves token (found = a token was given at all) or answers
// 401 with the WWW-Authenticate challenge and reports false.
func principalOf(c *gin.Context, core Authenticator, token string, found bool) (types.Principal, bool) {
	if !found {
		c.Header("WWW-Authenticate", `Bearer realm="envd"`)
		writeError(c, fmt.Errorf("missing bearer token in the Authorization header: %w", errdefs.ErrUnauthenticated))
		return types.Principal{}, false
	}
	p, err := core.Authenticate(c.Request.Context(), token)
	if err != nil {
		if errors.Is(err, errdefs.ErrUnauthenticated) {
			c.Header("WWW-Authenticate", `Bearer realm="envd", error="invalid_token"`)
		}
		writeError(c, err)
		return types.Principal{}, false
	}
	return p, true
}
