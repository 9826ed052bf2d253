package versions

import (
	"context"
	"fmt"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Claim is the outcome of claiming an idempotency key.
type Claim struct {
	ObjectID string // the object the key points at
	Claimed  bool   // true: this call claimed the key and must make ObjectID
}

// ClaimIdempotencyKey claims key for a request of kind with requestHash,
// pointing at objectID. If the key was claimed before with the same kind and
// hash, it returns that claim's object (Claimed false); with a different
// request it fails with ErrIdempotencyReuse.
func (s Operations) ClaimIdempotencyKey(ctx context.Context, tenant, key, kind, requestHash, objectID string) (Claim, error) {
	if err := types.CheckIdempotencyKey(key); err != nil {
		return Claim{}, err
	}
	tag, err := s.db.Exec(ctx, `INSERT INTO idempotency_keys (tenant_id, key, kind, request_hash, object_id)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (tenant_id, key) DO NOTHING`, tenant, key, kind, requestHash, objectID)
	if err != nil {
		return Claim{}, translate(err, fmt.Sprintf("idempotency key %q", key))
	}
	if tag.RowsAffected() == 1 {
		return Claim{ObjectID: objectID, Claimed: true}, nil
	}
	var gotKind, gotHash, gotObject string
	err = s.db.QueryRow(ctx, `SELECT kind, request_hash, object_id FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`,
		tenant, key).Scan(&gotKind, &gotHash, &gotObject)
	if err != nil {
		return Claim{}, translate(err, fmt.Sprintf("idempotency key %q", key))
	}
	if gotKind != kind || gotHash != requestHash {
		return Claim{}, fmt.Errorf("idempotency key %q was used for another %s request: %w", key, gotKind, errdefs.ErrIdempotencyReuse)
	}
	return Claim{ObjectID: gotObject}, nil
}

// RepointIdempotencyKey makes a claimed key name objectID: the request
// was answered with another object than the one it claimed the key for (a
// create served from a warm pool), and a retry must get that one.
func (s Operations) RepointIdempotencyKey(ctx context.Context, tenant, key, objectID string) error {
	_, err := s.db.Exec(ctx, `UPDATE idempotency_keys SET object_id = $3 WHERE tenant_id = $1 AND key = $2`, tenant, key, objectID)
	return translate(err, fmt.Sprintf("idempotency key %q", key))
}

// ReleaseIdempotencyKey forgets a claim whose object could not be made, so
// a retry with the same key tries again.
func (s Operations) ReleaseIdempotencyKey(ctx context.Context, tenant, key string) error {
	_, err := s.db.Exec(ctx, `DELETE FROM idempotency_keys WHERE tenant_id = $1 AND key = $2`, tenant, key)
	return translate(err, fmt.Sprintf("idempotency key %q", key))
}
