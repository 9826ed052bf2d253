package versions

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// A join token lets a new node fetch the cluster's settings once
// (envd serve --join URL --token T). Only its sha256 is stored; it expires
// by the database's clock and is used at most once.

// Why a join token was refused: JoinTokenUnknown, JoinTokenExpired,
// JoinTokenUsed (the details' "reason" of errdefs.ErrJoinToken).
const (
	JoinTokenUnknown = "unknown"
	JoinTokenExpired = "expired"
	JoinTokenUsed    = "used"
)

// JoinToken is a join token's record.
type JoinToken struct {
	ID        int64
	CreatedBy string
	CreatedAt time.Time
	ExpiresAt time.Time
	UsedAt    *time.Time
	UsedBy    string
}

func joinTokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// CreateJoinToken records token, valid for ttl from now by the database's
// clock.
func (s Nodes) CreateJoinToken(ctx context.Context, token, createdBy string, ttl time.Duration) (JoinToken, error) {
	t := JoinToken{CreatedBy: createdBy}
	err := s.db.QueryRow(ctx, `INSERT INTO join_tokens (hash, created_by, expires_at)
		VALUES ($1, $2, now() + $3 * interval '1 microsecond') RETURNING id, created_at, expires_at`,
		joinTokenHash(token), createdBy, ttl.Microseconds()).Scan(&t.ID, &t.CreatedAt, &t.ExpiresAt)
	return t, translate(err, "create join token")
}

// UseJoinToken marks token used by node, once: an unknown, expired or
// used token is errdefs.ErrJoinToken with details {"reason": ...}.
func (s Nodes) UseJoinToken(ctx context.Context, token, node string) (JoinToken, error) {
	return WithTxV(ctx, s.db, func(tx pgx.Tx) (JoinToken, error) {
		var t JoinToken
		var expired bool
		err := tx.QueryRow(ctx, `SELECT id, created_by, created_at, expires_at, used_at, used_by, expires_at <= now()
			FROM join_tokens WHERE hash = $1 FOR UPDATE`, joinTokenHash(token)).
			Scan(&t.ID, &t.CreatedBy, &t.CreatedAt, &t.ExpiresAt, &t.UsedAt, &t.UsedBy, &expired)
		refuse := func(reason, msg string) error {
			return errdefs.WithDetails(fmt.Errorf("join token %s: %w", msg, errdefs.ErrJoinToken), map[string]any{"reason": reason})
		}
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return t, refuse(JoinTokenUnknown, "unknown: make one with envctl nodes join-token")
		case err != nil:
			return t, translate(err, "join token")
		case t.UsedAt != nil:
			return t, refuse(JoinTokenUsed, fmt.Sprintf("already used by node %q at %s: make another with envctl nodes join-token", t.UsedBy, t.UsedAt.UTC().Format(time.RFC3339)))
		case expired:
			return t, refuse(JoinTokenExpired, fmt.Sprintf("expired at %s: make another with envctl nodes join-token", t.ExpiresAt.UTC().Format(time.RFC3339)))
		}
		err = tx.QueryRow(ctx, `UPDATE join_tokens SET used_at = now(), used_by = $2 WHERE id = $1 RETURNING used_at`, t.ID, node).Scan(&t.UsedAt)
		t.UsedBy = node
		return t, translate(err, "use join token")
	})
}
