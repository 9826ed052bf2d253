// Package gateway is what envd keeps for the egress gateway of its
// instances (runtime/egress): the log of the names and addresses it denied,
// per project, and the tenants' brokered secrets it adds to requests
// (sealed with the node's secret key). It serves api.EgressCore.
package gateway

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/runtime/egress"
	"github.com/envd-dev/envd/versions"
)

// Egress by host name (runtime/egress) reports its denials to
// EgressDenied and asks SecretHeaders for the brokered secrets of each
// request: plain HTTP ones, and HTTPS ones to hosts with an "https"
// binding, for which the gateway terminates TLS with the node's egress CA. A gateway key is the instance's network group,
// "project:<id>" (lifecycle's policy).

// SecretKeySize is the size of the node's secret key (AES-256).
const SecretKeySize = 32

// Store is what the gateway needs of the store: the projects' denial logs
// (versions.Projects) and the tenants' secrets (versions.Tenants).
type Store interface {
	AddEgressDenial(ctx context.Context, project int64, d versions.EgressDenial) error
	EgressDenials(ctx context.Context, tenant, project string, limit int, before int64) ([]versions.EgressDenial, error)
	ProjectTenant(ctx context.Context, project int64) (string, error)
	PutSecret(ctx context.Context, tenant, name string, sealed []byte) (versions.Secret, error)
	BindSecret(ctx context.Context, tenant, name string, b versions.Secret) (versions.Secret, error)
	DeleteSecret(ctx context.Context, tenant, name string) (versions.Secret, error)
	Secrets(ctx context.Context, tenant string, boundOnly bool) ([]versions.Secret, error)
}

// Gateway is the egress gateway's part of envd.
type Gateway struct {
	store Store
	key   []byte // SecretKeySize bytes, or nil: the secret store refuses
	log   *slog.Logger
}

// New makes the gateway's part; key is the node's secret key (nil: the
// secret store refuses with ErrFailedPrecondition).
func New(store Store, key []byte, log *slog.Logger) *Gateway {
	return &Gateway{store: store, key: key, log: log}
}

// maxSecretBytes bounds a secret's value.
const maxSecretBytes = 8 << 10

// denialWriters bounds the denials being written at once; more are
// dropped (and logged) rather than queued without end.
var denialWriters = make(chan struct{}, 16)

func projectOfKey(key string) (int64, bool) {
	s, ok := strings.CutPrefix(key, "project:")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseInt(s, 10, 64)
	return id, err == nil
}

// EgressDenied records a denial of the gateway in its project's log. It
// does not block: the write runs in the background.
func (s *Gateway) EgressDenied(d egress.Denial) {
	id, ok := projectOfKey(d.Key)
	if !ok {
		return
	}
	select {
	case denialWriters <- struct{}{}:
	default:
		s.log.Warn("egress denial dropped: too many being written", "project", id, "name", d.Name)
		return
	}
	go func() {
		defer func() { <-denialWriters }()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := s.store.AddEgressDenial(ctx, id, versions.EgressDenial{At: d.Time, Instance: d.Instance,
			Kind: d.Kind, Name: d.Name, Dest: d.Dest, Reason: d.Reason})
		if err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition) {
			s.log.Warn("egress denial not recorded", "project", id, "err", err)
		}
	}()
}

// EgressLog returns a project's newest egress denials, newest first (at
// most limit, 1..1000, default 100), older than before when before > 0.
func (s *Gateway) EgressLog(ctx context.Context, p types.Principal, project string, limit int, before int64) ([]types.EgressDenial, error) {
	if err := names.Validate("project", project); err != nil {
		return nil, err
	}
	if limit == 0 {
		limit = 100
	}
	if limit < 0 || limit > 1000 {
		return nil, fmt.Errorf("limit %d: want 1..1000: %w", limit, errdefs.ErrInvalidArgument)
	}
	rows, err := s.store.EgressDenials(ctx, p.Tenant, project, limit, before)
	if err != nil {
		return nil, err
	}
	out := make([]types.EgressDenial, 0, len(rows))
	for _, r := range rows {
		out = append(out, types.EgressDenial{ID: r.ID, Time: r.At.UTC(), Instance: r.Instance, Kind: r.Kind,
			Name: r.Name, Dest: r.Dest, Reason: r.Reason})
	}
	return out, nil
}

// secretsAllowed refuses callers without an admin token: the secret store
// is admin-scoped (an admin token of the tenant).
func secretsAllowed(p types.Principal) error {
	if !p.Admin {
		return fmt.Errorf("the secret store needs an admin token: %w", errdefs.ErrPermissionDenied)
	}
	return nil
}

func (s *Gateway) secretAEAD() (cipher.AEAD, error) {
	if len(s.key) != SecretKeySize {
		return nil, fmt.Errorf("this node has no secret key (envd --secret-key-file): %w", errdefs.ErrFailedPrecondition)
	}
	b, err := aes.NewCipher(s.key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// secretAD binds a sealed value to its tenant and name.
func secretAD(tenant, name string) []byte { return []byte(tenant + "\x00" + name) }

// SetSecret stores or rotates a secret of the caller's tenant; requests
// after it returns carry the new value.
func (s *Gateway) SetSecret(ctx context.Context, p types.Principal, name string, req types.SetSecretRequest) (types.Secret, error) {
	if err := secretsAllowed(p); err != nil {
		return types.Secret{}, err
	}
	if err := names.Validate("secret", name); err != nil {
		return types.Secret{}, err
	}
	if req.Value == "" || len(req.Value) > maxSecretBytes || strings.ContainsAny(req.Value, "\r\n\x00") {
		return types.Secret{}, fmt.Errorf("secret %q: value must be 1..%d bytes without CR, LF or NUL (it goes into a header): %w", name, maxSecretBytes, errdefs.ErrInvalidArgument)
	}
	aead, err := s.secretAEAD()
	if err != nil {
		return types.Secret{}, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return types.Secret{}, err
	}
	sealed := aead.Seal(nonce, nonce, []byte(req.Value), secretAD(p.Tenant, name))
	sec, err := s.store.PutSecret(ctx, p.Tenant, name, sealed)
	if err != nil {
		return types.Secret{}, err
	}
	return toSecret(sec), nil
}

// BindSecret binds a secret to a host (b.Host "" unbinds it).
func (s *Gateway) BindSecret(ctx context.Context, p types.Principal, name string, b types.SecretBinding) (types.Secret, error) {
	if err := secretsAllowed(p); err != nil {
		return types.Secret{}, err
	}
	if err := names.Validate("secret", name); err != nil {
		return types.Secret{}, err
	}
	scheme := strings.ToLower(b.Scheme)
	switch scheme {
	case "":
		scheme = "http"
	case "http", "https":
	default:
		return types.Secret{}, fmt.Errorf("secret %q: scheme %q: want http or https: %w", name, b.Scheme, errdefs.ErrInvalidArgument)
	}
	host := strings.ToLower(strings.TrimSpace(b.Host))
	if host != "" {
		e, err := runtime.ParseEgress("allow:" + host)
		if err != nil || len(e.Allow) != 1 || !strings.ContainsAny(e.Allow[0], "abcdefghijklmnopqrstuvwxyz") || strings.Contains(e.Allow[0], "/") {
			return types.Secret{}, fmt.Errorf("secret %q: host %q: want a host name or *.domain: %w", name, b.Host, errdefs.ErrInvalidArgument)
		}
		host = e.Allow[0]
	}
	if b.Header == "" {
		b.Header = "Authorization"
	}
	if b.Format == "" {
		b.Format = "Bearer {{value}}"
	}
	if textproto.CanonicalMIMEHeaderKey(b.Header) == "" || strings.ContainsAny(b.Header, " :\t\r\n\x00") || len(b.Header) > 128 {
		return types.Secret{}, fmt.Errorf("secret %q: header %q: not a header name: %w", name, b.Header, errdefs.ErrInvalidArgument)
	}
	if !strings.Contains(b.Format, "{{value}}") || strings.ContainsAny(b.Format, "\r\n\x00") || len(b.Format) > 1024 {
		return types.Secret{}, fmt.Errorf("secret %q: format %q: must contain {{value}}, on one line: %w", name, b.Format, errdefs.ErrInvalidArgument)
	}
	sec, err := s.store.BindSecret(ctx, p.Tenant, name, versions.Secret{Host: host, Header: b.Header, Format: b.Format, Scheme: scheme})
	if err != nil {
		return types.Secret{}, err
	}
	return toSecret(sec), nil
}

// DeleteSecret revokes a secret: requests after it returns go without it.
func (s *Gateway) DeleteSecret(ctx context.Context, p types.Principal, name string) (types.Secret, error) {
	if err := secretsAllowed(p); err != nil {
		return types.Secret{}, err
	}
	if err := names.Validate("secret", name); err != nil {
		return types.Secret{}, err
	}
	sec, err := s.store.DeleteSecret(ctx, p.Tenant, name)
	if err != nil {
		return types.Secret{}, err
	}
	return toSecret(sec), nil
}

// ListSecrets lists the caller's tenant's secrets, without values.
func (s *Gateway) ListSecrets(ctx context.Context, p types.Principal) ([]types.Secret, error) {
	if err := secretsAllowed(p); err != nil {
		return nil, err
	}
	rows, err := s.store.Secrets(ctx, p.Tenant, false)
	if err != nil {
		return nil, err
	}
	out := make([]types.Secret, 0, len(rows))
	for _, r := range rows {
		out = append(out, toSecret(r))
	}
	return out, nil
}

func toSecret(r versions.Secret) types.Secret {
	sec := types.Secret{Name: r.Name, CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
	if r.Host != "" {
		sec.Binding = &types.SecretBinding{Host: r.Host, Header: r.Header, Format: r.Format, Scheme: r.Scheme}
	}
	return sec
}

// SecretHeaders returns the headers of the secrets bound to host and
// scheme ("http" or "https") for the instances of gateway key (looked up on
// every request, so rotation and revocation apply to the next request; for
// "https" also when a TLS connection opens, to decide whether the gateway
// terminates it).
func (s *Gateway) SecretHeaders(ctx context.Context, key, scheme, host string) ([]egress.Header, error) {
	id, ok := projectOfKey(key)
	if !ok {
		return nil, nil
	}
	tenant, err := s.store.ProjectTenant(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	rows, err := s.store.Secrets(ctx, tenant, true)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	aead, err := s.secretAEAD()
	if err != nil {
		return nil, err
	}
	var out []egress.Header
	for _, r := range rows {
		if r.Scheme != scheme || !egress.Match([]string{r.Host}, host) {
			continue
		}
		n := aead.NonceSize()
		if len(r.Sealed) < n {
			return nil, fmt.Errorf("secret %q: sealed value too short", r.Name)
		}
		v, err := aead.Open(nil, r.Sealed[:n], r.Sealed[n:], secretAD(tenant, r.Name))
		if err != nil {
			return nil, fmt.Errorf("secret %q does not open with this node's key: %w", r.Name, err)
		}
		out = append(out, egress.Header{Name: r.Header, Value: strings.ReplaceAll(r.Format, "{{value}}", string(v))})
	}
	return out, nil
}
