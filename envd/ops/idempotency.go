package ops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Claim makes a creating request that is not an operation idempotent: with
// a key, the first request claims it for objectID and must make that
// object (calling release if it fails); a retry with the same key and
// request gets the first one's object id (existing != ""). Without a key,
// nothing is recorded.
func (r *Runner) Claim(ctx context.Context, p types.Principal, key, kind string, req any, objectID string) (existing string, release func(), err error) {
	noop := func() {}
	if key == "" {
		return "", noop, nil
	}
	if len(key) > 255 {
		return "", noop, fmt.Errorf("idempotency key: longer than 255 bytes: %w", errdefs.ErrInvalidArgument)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return "", noop, err
	}
	sum := sha256.Sum256(append([]byte(kind+"\x00"), body...))
	c, err := r.store.ClaimIdempotencyKey(ctx, p.Tenant, key, kind, hex.EncodeToString(sum[:]), objectID)
	if err != nil {
		return "", noop, err
	}
	if !c.Claimed {
		return c.ObjectID, noop, nil
	}
	return "", func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := r.store.ReleaseIdempotencyKey(rctx, p.Tenant, key); err != nil {
			r.log.Warn("release idempotency key", "key", key, "err", err)
		}
	}, nil
}

// Repoint makes a key claimed with Claim name objectID instead (the
// request was answered with another object); no key, no change.
func (r *Runner) Repoint(ctx context.Context, p types.Principal, key, objectID string) error {
	if key == "" {
		return nil
	}
	return r.store.RepointIdempotencyKey(ctx, p.Tenant, key, objectID)
}

// Await polls get until the object a concurrent request is making appears.
func Await[T any](ctx context.Context, get func(context.Context) (T, error)) (T, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		v, err := get(ctx)
		if err == nil || !errors.Is(err, errdefs.ErrNotFound) || time.Now().After(deadline) {
			return v, err
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return v, ctx.Err()
		}
	}
}
