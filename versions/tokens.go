package versions

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// Principal is who a token authenticates: a tenant, with admin rights or not.
type Principal struct {
	Tenant string
	Admin  bool
}

// hashToken is what the tokens table stores: sha256(token) in hex. Tokens
// are 256 random bits, so an unsalted fast hash is enough, and lookup by hash
// needs no constant-time comparison: what an index lookup's timing could
// reveal is about hashes, which tell nothing about a token.
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
func (s Access) EnsureAdminToken(ctx context.Context, tenant, token string) error {
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

// CreateToken creates a new random token for tenant that never expires
// (NewToken with no TTL), returning only the token.
func (s Access) CreateToken(ctx context.Context, tenant string, admin bool) (string, error) {
	tok, _, err := s.NewToken(ctx, tenant, admin, 0)
	return tok, err
}

// TokenInfo describes a token without the token: what listing shows.
type TokenInfo struct {
	ID         int64
	Tenant     string
	Admin      bool
	CreatedAt  time.Time
	ExpiresAt  *time.Time // nil = never
	RevokedAt  *time.Time // nil = live
	LastUsedAt *time.Time // nil = never used; updated at most once a minute
}

var tokenColumns = columns[TokenInfo]{
	{"id", func(t *TokenInfo) any { return &t.ID }},
	{"tenant_id", func(t *TokenInfo) any { return &t.Tenant }},
	{"admin", func(t *TokenInfo) any { return &t.Admin }},
	{"created_at", func(t *TokenInfo) any { return &t.CreatedAt }},
	{"expires_at", func(t *TokenInfo) any { return &t.ExpiresAt }},
	{"revoked_at", func(t *TokenInfo) any { return &t.RevokedAt }},
	{"last_used_at", func(t *TokenInfo) any { return &t.LastUsedAt }},
}

var tokenCols = tokenColumns.list()

func scanTokenInfo(row pgx.Row) (TokenInfo, error) { return tokenColumns.scan(row) }

// NewToken creates a new random token (32 bytes, hex) for tenant, creating
// the tenant if needed. ttl > 0 makes it expire ttl after now (the
// database's clock); 0 = never. Only its hash is stored: the returned token
// cannot be recovered later.
func (s Access) NewToken(ctx context.Context, tenant string, admin bool, ttl time.Duration) (string, TokenInfo, error) {
	if ttl < 0 {
		return "", TokenInfo{}, fmt.Errorf("token lifetime %v: must be positive: %w", ttl, errdefs.ErrInvalidArgument)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", TokenInfo{}, fmt.Errorf("generate token: %w", err)
	}
	token := hex.EncodeToString(b[:])
	var ttlMicros *int64
	if ttl > 0 {
		us := ttl.Microseconds()
		ttlMicros = &us
	}
	info, err := WithTxV(ctx, s.db, func(tx pgx.Tx) (TokenInfo, error) {
		if err := ensureTenant(ctx, tx, tenant); err != nil {
			return TokenInfo{}, err
		}
		info, err := scanTokenInfo(tx.QueryRow(ctx, `INSERT INTO tokens (token_hash, tenant_id, admin, expires_at)
			VALUES ($1, $2, $3, now() + $4::bigint * interval '1 microsecond')
			RETURNING `+tokenCols, hashToken(token), tenant, admin, ttlMicros))
		return info, translate(err, fmt.Sprintf("token of tenant %q", tenant))
	})
	if err != nil {
		return "", TokenInfo{}, err
	}
	return token, info, nil
}

// ListTokens lists the tokens of tenant ("" = of every tenant), revoked and
// expired ones included, by id.
func (s Access) ListTokens(ctx context.Context, tenant string) ([]TokenInfo, error) {
	rows, err := s.db.Query(ctx, `SELECT `+tokenCols+` FROM tokens
		WHERE $1 = '' OR tenant_id = $1 ORDER BY id`, tenant)
	if err != nil {
		return nil, translate(err, "list tokens")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TokenInfo, error) { return scanTokenInfo(r) })
	return out, translate(err, "list tokens")
}

// RevokeToken revokes token id of tenant ("" = of any tenant); the token is
// refused from then on. ErrNotFound when there is no such token (of that
// tenant); ErrFailedPrecondition when it is the last live admin token (the
// node would have no admin left). Revoking a revoked token answers it as it
// is.
func (s Access) RevokeToken(ctx context.Context, tenant string, id int64) (TokenInfo, error) {
	what := fmt.Sprintf("token %d", id)
	return WithTxV(ctx, s.db, func(tx pgx.Tx) (TokenInfo, error) {
		t, err := scanTokenInfo(tx.QueryRow(ctx, `SELECT `+tokenCols+` FROM tokens
			WHERE id = $1 AND ($2 = '' OR tenant_id = $2) FOR UPDATE`, id, tenant))
		if err != nil {
			return TokenInfo{}, translate(err, what)
		}
		if t.RevokedAt != nil {
			return t, nil
		}
		if t.Admin {
			// Serialise admin revocations, so two cannot each leave the
			// other as the last one.
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", adminTokensLock); err != nil {
				return TokenInfo{}, translate(err, what)
			}
			var others int
			err := tx.QueryRow(ctx, `SELECT count(*) FROM tokens WHERE admin AND id <> $1
				AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())`, id).Scan(&others)
			if err != nil {
				return TokenInfo{}, translate(err, what)
			}
			if others == 0 {
				return TokenInfo{}, fmt.Errorf("%s is the last live admin token: create another admin token first: %w", what, errdefs.ErrFailedPrecondition)
			}
		}
		t, err = scanTokenInfo(tx.QueryRow(ctx, `UPDATE tokens SET revoked_at = now() WHERE id = $1
			RETURNING `+tokenCols, id))
		return t, translate(err, what)
	})
}

// adminTokensLock is the pg_advisory_xact_lock key that serialises
// revocations of admin tokens ("envdtokn" in ASCII).
const adminTokensLock int64 = 0x656e7664746f6b6e

// Authenticate returns the principal of token; ErrUnauthenticated if it is
// empty, unknown, revoked or expired (by the database's clock). The token
// is looked up by its hash, so no secret is compared here. A use is
// recorded in last_used_at at most once a minute, by a second statement
// only then.
func (s Access) Authenticate(ctx context.Context, token string) (Principal, error) {
	if token == "" {
		return Principal{}, fmt.Errorf("no token: %w", errdefs.ErrUnauthenticated)
	}
	hash := hashToken(token)
	var (
		p                       Principal
		revoked, expired, stale bool
	)
	err := s.db.QueryRow(ctx, `SELECT tenant_id, admin, revoked_at IS NOT NULL,
			COALESCE(expires_at <= now(), false),
			last_used_at IS NULL OR last_used_at < now() - interval '1 minute'
		FROM tokens WHERE token_hash = $1`, hash).
		Scan(&p.Tenant, &p.Admin, &revoked, &expired, &stale)
	if errors.Is(err, pgx.ErrNoRows) {
		return Principal{}, fmt.Errorf("unknown token: %w", errdefs.ErrUnauthenticated)
	}
	if err != nil {
		return Principal{}, translate(err, "authenticate")
	}
	switch {
	case revoked:
		return Principal{}, fmt.Errorf("token revoked: %w", errdefs.ErrUnauthenticated)
	case expired:
		return Principal{}, fmt.Errorf("token expired: %w", errdefs.ErrUnauthenticated)
	}
	if stale {
		// Informational only: a failure here must not refuse the request.
		_, _ = s.db.Exec(ctx, `UPDATE tokens SET last_used_at = now() WHERE token_hash = $1
			AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')`, hash)
	}
	return p, nil
}
