package envd

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/versions"
)

// Join tokens: an admin makes one (CreateJoinToken), a new node started
// with `envd serve --join URL --token T` sends it to any node (Join) and
// gets the cluster's settings: database, registry and S3 with their
// credentials. The database credential is a login role of the new node's
// own (versions.CreateNodeRole: envd_node's rights, not the admin's). A
// token is stored hashed, expires by the database's clock and is used
// once.

// The bounds and default of a join token's lifetime.
const (
	MinJoinTokenTTL     = time.Minute
	MaxJoinTokenTTL     = 7 * 24 * time.Hour
	DefaultJoinTokenTTL = time.Hour
)

// JoinTokenPrefix starts every join token, so that one pasted in the
// wrong place (an API token's) is recognised.
const JoinTokenPrefix = "envdjoin_"

// CreateJoinToken makes a join token (admin: whoever holds it gets the
// cluster's credentials) and the short command that uses it.
func (s *Service) CreateJoinToken(ctx context.Context, p types.Principal, req types.JoinTokenRequest) (types.JoinToken, error) {
	if err := needAdmin(p, "a join token"); err != nil {
		return types.JoinToken{}, err
	}
	ttl := DefaultJoinTokenTTL
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d < MinJoinTokenTTL || d > MaxJoinTokenTTL {
			return types.JoinToken{}, fmt.Errorf("ttl %q: a Go duration from %s to %s: %w", req.TTL, MinJoinTokenTTL, MaxJoinTokenTTL, errdefs.ErrInvalidArgument)
		}
		ttl = d
	}
	if s.cfg.Cluster.JoinConfig == nil {
		return types.JoinToken{}, fmt.Errorf("this node cannot tell how to join it (its database or registry is private to it): %w", errdefs.ErrFailedPrecondition)
	}
	self, err := s.store.Nodes.GetMember(ctx, s.cfg.Node)
	if err != nil {
		return types.JoinToken{}, fmt.Errorf("this node's URL: %w", err)
	}
	var b [24]byte
	_, _ = rand.Read(b[:])
	token := JoinTokenPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	t, err := s.store.Nodes.CreateJoinToken(ctx, token, p.Tenant, ttl)
	if err != nil {
		return types.JoinToken{}, err
	}
	args := []string{"envd", "serve", "--join", self.APIURL, "--token", token,
		"--data-dir", "/var/lib/envd", "--node", "NAME", "--listen", "0.0.0.0:7777"}
	s.log.Info("join token made", "by", p.Tenant, "expires_at", t.ExpiresAt)
	return types.JoinToken{Token: token, ExpiresAt: t.ExpiresAt, Command: shellWords(args), Args: args}, nil
}

// Join answers a joining node's request with the cluster's settings, once
// per join token; an unknown, expired or used token is
// errdefs.ErrJoinToken (details.reason).
func (s *Service) Join(ctx context.Context, token string, req types.JoinRequest) (types.JoinConfig, error) {
	if req.Node == "" || len(req.Node) > 253 {
		return types.JoinConfig{}, fmt.Errorf("node %q: the joining node's name, 1-253 characters: %w", req.Node, errdefs.ErrInvalidArgument)
	}
	if s.cfg.Cluster.JoinConfig == nil {
		return types.JoinConfig{}, fmt.Errorf("this node cannot tell how to join it (its database or registry is private to it): %w", errdefs.ErrFailedPrecondition)
	}
	cfg, err := s.cfg.Cluster.JoinConfig()
	if err != nil {
		return types.JoinConfig{}, err
	}
	if _, err := s.store.Nodes.UseJoinToken(ctx, token, req.Node); err != nil {
		return types.JoinConfig{}, err
	}
	s.log.Info("join token used", "node", req.Node)
	// The new node logs in as a role of its own (envd_node's rights:
	// migrations/0028_node_role.sql), not as this node's role.
	role, password, err := s.store.Nodes.CreateNodeRole(ctx, req.Node)
	switch {
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		s.log.Warn("the joining node gets this node's database role: no node role can be made", "node", req.Node, "err", err)
		cfg.Notes = append(cfg.Notes, "the database has no envd_node role (the role that ran envd's migrations may not create roles): this node was given the admin's database credentials; see docs/deploy.md, \"What a node can do\"")
	case err != nil:
		return types.JoinConfig{}, err
	default:
		if cfg.Database, err = versions.DSNWithRole(cfg.Database, role, password); err != nil {
			return types.JoinConfig{}, err
		}
		s.log.Info("database role made for the joining node", "node", req.Node, "role", role)
	}
	return cfg, nil
}

// shellWords quotes each word that needs it for a POSIX shell.
func shellWords(words []string) string {
	out := ""
	for i, w := range words {
		if i > 0 {
			out += " "
		}
		safe := w != ""
		for _, r := range w {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == '/' || r == ':' || r == '=' || r == '@' || r == ',' || r == '+' || r == '%') {
				safe = false
				break
			}
		}
		if safe {
			out += w
			continue
		}
		q := "'"
		for _, r := range w {
			if r == '\'' {
				q += `'\''`
			} else {
				q += string(r)
			}
		}
		out += q + "'"
	}
	return out
}
