package versions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/envd-dev/envd/errdefs"
)

// SSHKey is a public key registered by a tenant: it logs in to the
// tenant's instances through the SSH endpoint.
type SSHKey struct {
	ID          int64
	Tenant      string
	Name        string
	Fingerprint string // SHA256:<base64>, as ssh-keygen -l shows it
	PublicKey   string // authorized_keys form, no comment
	CreatedAt   time.Time
}

var sshKeyColumns = columns[SSHKey]{
	{"id", func(k *SSHKey) any { return &k.ID }},
	{"tenant_id", func(k *SSHKey) any { return &k.Tenant }},
	{"name", func(k *SSHKey) any { return &k.Name }},
	{"fingerprint", func(k *SSHKey) any { return &k.Fingerprint }},
	{"public_key", func(k *SSHKey) any { return &k.PublicKey }},
	{"created_at", func(k *SSHKey) any { return &k.CreatedAt }},
}

var sshKeyCols = sshKeyColumns.list()

func scanSSHKey(row pgx.Row) (SSHKey, error) { return sshKeyColumns.scan(row) }

// AddSSHKey registers k (Tenant, Name, Fingerprint, PublicKey) and returns
// it with its id and creation time. A key the tenant has registered
// already is ErrAlreadyExists; the tenant is created if needed.
func (s Access) AddSSHKey(ctx context.Context, k SSHKey) (SSHKey, error) {
	return WithTxV(ctx, s.db, func(tx pgx.Tx) (SSHKey, error) {
		if err := ensureTenant(ctx, tx, k.Tenant); err != nil {
			return SSHKey{}, err
		}
		out, err := scanSSHKey(tx.QueryRow(ctx, `INSERT INTO ssh_keys (tenant_id, name, fingerprint, public_key)
			VALUES ($1, $2, $3, $4) RETURNING `+sshKeyCols, k.Tenant, k.Name, k.Fingerprint, k.PublicKey))
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "23505" {
			return SSHKey{}, fmt.Errorf("ssh key %s: registered already: %w", k.Fingerprint, errdefs.ErrAlreadyExists)
		}
		return out, translate(err, fmt.Sprintf("ssh key %s", k.Fingerprint))
	})
}

// ListSSHKeys lists tenant's keys, oldest first.
func (s Access) ListSSHKeys(ctx context.Context, tenant string) ([]SSHKey, error) {
	rows, err := s.db.Query(ctx, "SELECT "+sshKeyCols+" FROM ssh_keys WHERE tenant_id = $1 ORDER BY id", tenant)
	if err != nil {
		return nil, translate(err, "ssh keys")
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SSHKey, error) { return scanSSHKey(r) })
	return keys, translate(err, "ssh keys")
}

// DeleteSSHKey removes tenant's key id and returns it; another tenant's
// id is ErrNotFound.
func (s Access) DeleteSSHKey(ctx context.Context, tenant string, id int64) (SSHKey, error) {
	k, err := scanSSHKey(s.db.QueryRow(ctx, "DELETE FROM ssh_keys WHERE tenant_id = $1 AND id = $2 RETURNING "+sshKeyCols, tenant, id))
	return k, translate(err, fmt.Sprintf("ssh key %d", id))
}

// SSHKeyTenant returns the tenant of instance id when that tenant has
// registered the key of fingerprint. Every other case (no such instance,
// no such key, the key of another tenant) is the same ErrNotFound, so the
// answer tells a client nothing about what exists.
func (s Access) SSHKeyTenant(ctx context.Context, instance, fingerprint string) (string, error) {
	var tenant string
	err := s.db.QueryRow(ctx, `SELECT i.tenant_id FROM instances i
		JOIN ssh_keys k ON k.tenant_id = i.tenant_id AND k.fingerprint = $2
		WHERE i.id = $1`, instance, fingerprint).Scan(&tenant)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("instance %q with this key: %w", instance, errdefs.ErrNotFound)
	}
	return tenant, translate(err, "ssh key lookup")
}
