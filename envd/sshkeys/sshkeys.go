// Package sshkeys is the tenants' SSH public keys (api.SSHKeyCore) and
// the key logins of the node's SSH endpoint (sshd.Core's SSHLogin).
package sshkeys

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/crypto/ssh"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Store is what the keys need of the store.
type Store interface {
	AddSSHKey(ctx context.Context, k versions.SSHKey) (versions.SSHKey, error)
	ListSSHKeys(ctx context.Context, tenant string) ([]versions.SSHKey, error)
	DeleteSSHKey(ctx context.Context, tenant string, id int64) (versions.SSHKey, error)
	// SSHKeyTenant is the tenant of instance id when that tenant
	// registered the key of fingerprint; else ErrNotFound.
	SSHKeyTenant(ctx context.Context, id, fingerprint string) (string, error)
}

// Keys serves the tenants' SSH keys.
type Keys struct{ store Store }

// New makes the SSH keys' part.
func New(store Store) *Keys { return &Keys{store: store} }

// maxSSHKeyName bounds AddSSHKeyRequest.Name.
const maxSSHKeyName = 128

// ParseSSHKey parses one public key in authorized_keys form and returns
// it with its comment. Options, certificates, RSA keys under 2048 bits and
// more than one key are refused with ErrInvalidArgument.
func ParseSSHKey(text string) (ssh.PublicKey, string, error) {
	text = strings.TrimSpace(text)
	if text == "" {
		return nil, "", fmt.Errorf("public_key: required (the content of a .pub file): %w", errdefs.ErrInvalidArgument)
	}
	key, comment, opts, rest, err := ssh.ParseAuthorizedKey([]byte(text))
	if err != nil {
		return nil, "", fmt.Errorf("public_key: not an OpenSSH public key (want \"ssh-ed25519 AAAA... comment\", a .pub file's content): %w", errdefs.ErrInvalidArgument)
	}
	if len(opts) > 0 {
		return nil, "", fmt.Errorf("public_key: options (%s) are not supported: give the key alone: %w", strings.Join(opts, ","), errdefs.ErrInvalidArgument)
	}
	if len(strings.TrimSpace(string(rest))) > 0 {
		return nil, "", fmt.Errorf("public_key: one key per request: %w", errdefs.ErrInvalidArgument)
	}
	if _, ok := key.(*ssh.Certificate); ok {
		return nil, "", fmt.Errorf("public_key: certificates are not supported: give the plain key: %w", errdefs.ErrInvalidArgument)
	}
	if ck, ok := key.(ssh.CryptoPublicKey); ok {
		if rk, ok := ck.CryptoPublicKey().(*rsa.PublicKey); ok && rk.N.BitLen() < 2048 {
			return nil, "", fmt.Errorf("public_key: RSA key of %d bits: at least 2048 are needed: %w", rk.N.BitLen(), errdefs.ErrInvalidArgument)
		}
	}
	return key, comment, nil
}

func toSSHKey(k versions.SSHKey) types.SSHKey {
	return types.SSHKey{ID: k.ID, Name: k.Name, Fingerprint: k.Fingerprint, PublicKey: k.PublicKey, CreatedAt: k.CreatedAt}
}

// AddSSHKey registers a public key for the caller's tenant: it then logs
// in to every instance of the tenant. A key the tenant has already is
// ErrAlreadyExists; a malformed one ErrInvalidArgument.
func (ks *Keys) AddSSHKey(ctx context.Context, p types.Principal, req types.AddSSHKeyRequest) (types.SSHKey, error) {
	key, comment, err := ParseSSHKey(req.PublicKey)
	if err != nil {
		return types.SSHKey{}, err
	}
	name := strings.TrimSpace(req.Name)
	if name == "" {
		name = strings.TrimSpace(comment)
	}
	fp := ssh.FingerprintSHA256(key)
	if name == "" {
		name = fp
	}
	if len(name) > maxSSHKeyName || strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return types.SSHKey{}, fmt.Errorf("name %q: at most %d printable characters: %w", name, maxSSHKeyName, errdefs.ErrInvalidArgument)
	}
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
	k, err := ks.store.AddSSHKey(ctx, versions.SSHKey{Tenant: p.Tenant, Name: name, Fingerprint: fp, PublicKey: pub})
	if err != nil {
		return types.SSHKey{}, err
	}
	return toSSHKey(k), nil
}

// ListSSHKeys lists the caller's tenant's keys.
func (ks *Keys) ListSSHKeys(ctx context.Context, p types.Principal) ([]types.SSHKey, error) {
	keys, err := ks.store.ListSSHKeys(ctx, p.Tenant)
	if err != nil {
		return nil, err
	}
	out := make([]types.SSHKey, 0, len(keys))
	for _, k := range keys {
		out = append(out, toSSHKey(k))
	}
	return out, nil
}

// DeleteSSHKey removes the caller's tenant's key id; sessions it opened
// go on, new logins with it are refused. Another tenant's id is
// ErrNotFound.
func (ks *Keys) DeleteSSHKey(ctx context.Context, p types.Principal, id int64) (types.SSHKey, error) {
	if id <= 0 {
		return types.SSHKey{}, fmt.Errorf("ssh key id %d: must be positive: %w", id, errdefs.ErrInvalidArgument)
	}
	k, err := ks.store.DeleteSSHKey(ctx, p.Tenant, id)
	if err != nil {
		return types.SSHKey{}, err
	}
	return toSSHKey(k), nil
}

// SSHLogin decides a public-key login to instance id: it returns the
// principal the session acts for (the instance's tenant, never admin) when
// that tenant registered key. Every refusal is the same
// ErrUnauthenticated, whether the instance does not exist, is another
// tenant's, or the key is unknown: the answer is no oracle.
func (ks *Keys) SSHLogin(ctx context.Context, id string, key ssh.PublicKey) (types.Principal, error) {
	refused := fmt.Errorf("ssh login to %q: %w", id, errdefs.ErrUnauthenticated)
	if names.ValidateInstanceID(id) != nil {
		return types.Principal{}, refused
	}
	tenant, err := ks.store.SSHKeyTenant(ctx, id, ssh.FingerprintSHA256(key))
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return types.Principal{}, refused
		}
		return types.Principal{}, err
	}
	return types.Principal{Tenant: tenant}, nil
}
