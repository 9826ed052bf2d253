package versions

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/internal/errdefs"
)

// Principal is who a token authenticates: a tenant, with admin rights or not.
type Principal struct {
	Tenant string
	Admin  bool
}

// hashToken is what the tokens table stores: sha256(token) in hex. Tokens
// are 256 random bits, so an unsalted fast hash is enough, and lookup by hash
// needs no constant-time comparison.
func hashToken(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

func ensureTenant(ctx context.Context, tx pgx.Tx, tenant string) error {
	if tenant == "" {
		return fmt.Errorf("empty tenant: %w", errdefs.ErrInvalidArgument)
	}
	_, err := tx.Exec(ctx, "INSERT INTO tenants (id) VALUES ($1) ON CONFLICT (id) DO NOTHING", tenant)
	return translate(err, fmt.Sprintf("tenant %q", tenant))
}

// EnsureAdminToken makes token an admin token of tenant, creating the tenant
// if needed (envd up writes its admin token this way at every start).
// Idempotent; fails with ErrAlreadyExists if token belongs to another tenant.
func (s *Store) EnsureAdminToken(ctx context.Context, tenant, token string) error {
	if token == "" {
		return fmt.Errorf("empty admin token: %w", errdefs.ErrInvalidArgument)
	}
	return WithTx(ctx, s.db, func(tx pgx.Tx) error {
		if err := ensureTenant(ctx, tx, tenant); err != nil {
			return err
		}
		var one int
		err := tx.QueryRow(ctx, `INSERT INTO tokens (token_hash, tenant_id, admin) VALUES ($1, $2, true)
			ON CONFLICT (token_hash) DO UPDATE SET admin = true WHERE tokens.tenant_id = EXCLUDED.tenant_id
			RETURNING 1`, hashToken(token), tenant).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("admin token of tenant %q belongs to another tenant: %w", tenant, errdefs.ErrAlreadyExists)
		}
		return translate(err, "admin token")
	})
}

// CreateToken creates a new random token (32 bytes, hex) for tenant,
// creating the tenant if needed. Only its hash is stored: the returned token
// cannot be recovered later.
func (s *Store) CreateToken(ctx context.Context, tenant string, admin bool) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	token := hex.EncodeToString(b[:])
	err := WithTx(ctx, s.db, func(tx pgx.Tx) error {
		if err := ensureTenant(ctx, tx, tenant); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO tokens (token_hash, tenant_id, admin) VALUES ($1, $2, $3)",
			hashToken(token), tenant, admin)
		return translate(err, fmt.Sprintf("token of tenant %q", tenant))
	})
	if err != nil {
		return "", err
	}
	return token, nil
}

// Authenticate returns the principal of token; ErrUnauthenticated if it is
// empty or unknown.
func (s *Store) Authenticate(ctx context.Context, token string) (Principal, error) {
	if token == "" {
		return Principal{}, fmt.Errorf("no token: %w", errdefs.ErrUnauthenticated)
	}
	var p Principal
	err := s.db.QueryRow(ctx, "SELECT tenant_id, admin FROM tokens WHERE token_hash = $1", hashToken(token)).
		Scan(&p.Tenant, &p.Admin)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, fmt.Errorf("unknown token: %w", errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return Principal{}, translate(err, "authenticate")
	}
	return p, nil
}
