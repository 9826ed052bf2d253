package versions

import (
	"context"
	"fmt"

	"github.com/envd-dev/envd/api/types"
)

// OperationByIdempotencyKey returns the tenant's operation recorded with
// key, or an error of kind errdefs.ErrNotFound.
func (s Operations) OperationByIdempotencyKey(ctx context.Context, tenant, key string) (Operation, error) {
	if err := types.CheckIdempotencyKey(key); err != nil {
		return Operation{}, err
	}
	op, err := scanOperation(s.db.QueryRow(ctx, "SELECT "+operationCols+
		" FROM operations o WHERE o.tenant_id = $1 AND o.idempotency_key = $2", tenant, key))
	if err != nil {
		return Operation{}, translate(err, fmt.Sprintf("operation with idempotency key %q", key))
	}
	return op, nil
}
