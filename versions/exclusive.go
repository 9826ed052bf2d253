package versions

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// CreateExclusiveOperation records op as CreateOperation does, unless an
// unfinished operation of one of kinds already targets the instance
// op.Target: then it fails with ErrFailedPrecondition (details: the other
// operation's id under "operation"). A retry (same idempotency key and
// request hash) returns its operation whatever runs.
//
// The instance's row is locked (FOR UPDATE) for the check and the insert,
// so concurrent creations through any node are serialized: of two saves of
// one instance, exactly one is created. The unfinished operation is the
// marker: it ends with the operation, and a node that restarts runs its own
// unfinished operations again (so they end), so no marker outlives its work.
// ErrNotFound if the instance does not exist.
func (s Operations) CreateExclusiveOperation(ctx context.Context, op Operation, kinds []types.OpKind) (Operation, bool, error) {
	if op.ID == "" {
		return Operation{}, false, fmt.Errorf("empty operation id: %w", errdefs.ErrInvalidArgument)
	}
	if op.State == "" {
		op.State = OpPending
	}
	type created struct {
		op Operation
		ok bool
	}
	c, err := WithTxV(ctx, s.db, func(tx pgx.Tx) (created, error) {
		var one int
		if err := tx.QueryRow(ctx, "SELECT 1 FROM instances WHERE id = $1 FOR UPDATE", op.Target).Scan(&one); err != nil {
			return created{}, translate(err, fmt.Sprintf("instance %q", op.Target))
		}
		if op.IdempotencyKey != "" {
			got, err := scanOperation(tx.QueryRow(ctx, "SELECT "+operationCols+
				" FROM operations o WHERE o.tenant_id = $1 AND o.idempotency_key = $2", op.Tenant, op.IdempotencyKey))
			switch {
			case err == nil && got.RequestHash != op.RequestHash:
				return created{}, fmt.Errorf("idempotency key %q (operation %s): %w", op.IdempotencyKey, got.ID, errdefs.ErrIdempotencyReuse)
			case err == nil:
				return created{op: got}, nil // a retry
			case !errors.Is(err, pgx.ErrNoRows):
				return created{}, translate(err, fmt.Sprintf("idempotency key %q", op.IdempotencyKey))
			}
		}
		var other, otherKind string
		err := tx.QueryRow(ctx, `SELECT id, kind FROM operations
			WHERE target = $1 AND kind = ANY($2) AND state IN ('pending', 'running') ORDER BY created_at LIMIT 1`,
			op.Target, kindNames(kinds)).Scan(&other, &otherKind)
		if err == nil {
			return created{}, errdefs.WithDetails(fmt.Errorf("instance %q: %s operation %s is still running; one at a time: "+
				"wait for it to finish, then try again: %w", op.Target, otherKind, other, errdefs.ErrFailedPrecondition),
				map[string]any{"operation": other})
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return created{}, translate(err, fmt.Sprintf("operations on %q", op.Target))
		}
		// A concurrent creation with the same key for another instance
		// conflicts here: the caller retries.
		got, err := scanOperation(tx.QueryRow(ctx, `INSERT INTO operations AS o
				(id, tenant_id, kind, target, state, idempotency_key, request_hash, node, request)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			RETURNING `+operationCols,
			op.ID, op.Tenant, op.Kind, op.Target, op.State, nullString(op.IdempotencyKey), op.RequestHash, op.Node, jsonOrEmpty(op.Request)))
		if err != nil {
			return created{}, translate(err, fmt.Sprintf("operation %q", op.ID))
		}
		return created{op: got, ok: true}, nil
	})
	return c.op, c.ok, err
}

// UnfinishedOperationOn returns the oldest unfinished operation of one of
// kinds on target, or ErrNotFound.
func (s Operations) UnfinishedOperationOn(ctx context.Context, target string, kinds []types.OpKind) (Operation, error) {
	op, err := scanOperation(s.db.QueryRow(ctx, "SELECT "+operationCols+` FROM operations o
		WHERE o.target = $1 AND o.kind = ANY($2) AND o.state IN ('pending', 'running') ORDER BY o.created_at LIMIT 1`, target, kindNames(kinds)))
	if err != nil {
		return Operation{}, translate(err, fmt.Sprintf("unfinished operations on %q", target))
	}
	return op, nil
}

// kindNames is kinds as the text[] the queries compare with.
func kindNames(kinds []types.OpKind) []string {
	out := make([]string, len(kinds))
	for i, k := range kinds {
		out[i] = string(k)
	}
	return out
}
