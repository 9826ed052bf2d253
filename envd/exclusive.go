package envd

import (
	"context"
	"errors"
	"fmt"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/api/errdefs"
)

// captureKinds are the operations that capture an instance's layer: one at
// a time per instance (see CreateExclusiveOperation).
var captureKinds = []types.OpKind{types.OpKindSave}

// startExclusiveOp is startOp for an operation on an instance of which
// only one of captureKinds may run at a time, on any node: while one is
// unfinished, another answers ErrFailedPrecondition (409) naming it. A
// retry with the same idempotency key still returns its operation.
func (s *Service) startExclusiveOp(ctx context.Context, p types.Principal, kind types.OpKind, instance, idemKey string, asked, job any, run opFunc) (types.Operation, error) {
	return s.startOpIn(ctx, p, kind, instance, instance, idemKey, asked, job, run, captureKinds)
}

// captureGuard claims the instance's capture on this node for what, after
// checking that no capture operation of it runs on any node (a hibernation
// is not an operation; a save is). Call release when the capture ends.
func (s *Service) captureGuard(ctx context.Context, id, what string) (release func(), err error) {
	op, err := s.store.UnfinishedOperationOn(ctx, id, captureKinds)
	switch {
	case err == nil && op.ID != what:
		return nil, errdefs.WithDetails(fmt.Errorf("instance %q: %s operation %s is still running; one at a time: "+
			"wait for it to finish, then try again: %w", id, op.Kind, op.ID, errdefs.ErrFailedPrecondition),
			map[string]any{"operation": op.ID})
	case err != nil && !errors.Is(err, errdefs.ErrNotFound):
		return nil, err
	}
	return s.frozen.claimCapture(id, what)
}
