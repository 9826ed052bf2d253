package versions

import (
	"context"
	"fmt"

	"github.com/envd-dev/envd/api/errdefs"
)

// MaxIdempotencyKey is the longest idempotency key, in bytes.
const MaxIdempotencyKey = 255

// CheckIdempotencyKey refuses a key the store cannot hold: longer than
// MaxIdempotencyKey bytes, or with control characters. "" (no key) is
// valid. The error wraps errdefs.ErrInvalidArgument.
func CheckIdempotencyKey(key string) error {
	if len(key) > MaxIdempotencyKey {
		return fmt.Errorf("idempotency key: %d bytes, longer than %d: %w", len(key), MaxIdempotencyKey, errdefs.ErrInvalidArgument)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c == 0x7f {
			return fmt.Errorf("idempotency key %q: control character at byte %d: %w", key, i, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// OperationByIdempotencyKey returns the tenant's operation recorded with
// key, or an error of kind errdefs.ErrNotFound.
func (s Operations) OperationByIdempotencyKey(ctx context.Context, tenant, key string) (Operation, error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return Operation{}, err
	}
	op, err := scanOperation(s.db.QueryRow(ctx, "SELECT "+operationCols+
		" FROM operations o WHERE o.tenant_id = $1 AND o.idempotency_key = $2", tenant, key))
	if err != nil {
		return Operation{}, translate(err, fmt.Sprintf("operation with idempotency key %q", key))
	}
	return op, nil
}
