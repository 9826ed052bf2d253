package runtime

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/envd-dev/envd/errdefs"
)

// kindError carries one of envd's error kinds next to the containerd error it
// was translated from, so errors.Is matches both.
type kindError struct {
	kind error
	err  error
}

func (e *kindError) Error() string   { return e.err.Error() }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// translate wraps a containerd (or gRPC) error with the envd kind it means and
// a description of what was being done: translate(err, "container %q", id).
// Containerd errors go no further than this package.
func translate(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf(format, args...)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", msg, err)
	}
	var kind error
	switch {
	case cerrdefs.IsNotFound(err):
		kind = errdefs.ErrNotFound
	case cerrdefs.IsAlreadyExists(err):
		kind = errdefs.ErrAlreadyExists
	case cerrdefs.IsInvalidArgument(err):
		kind = errdefs.ErrInvalidArgument
	case cerrdefs.IsFailedPrecondition(err), cerrdefs.IsNotModified(err):
		kind = errdefs.ErrFailedPrecondition
	case cerrdefs.IsConflict(err):
		kind = errdefs.ErrConflict
	case cerrdefs.IsUnavailable(err):
		kind = errdefs.ErrUnavailable
	case cerrdefs.IsPermissionDenied(err):
		kind = errdefs.ErrPermissionDenied
	case cerrdefs.IsUnauthorized(err):
		kind = errdefs.ErrUnauthenticated
	case cerrdefs.IsCanceled(err):
		kind = errdefs.ErrCanceled
	case cerrdefs.IsDeadlineExceeded(err):
		kind = context.DeadlineExceeded
	default:
		return fmt.Errorf("%s: %w", msg, err)
	}
	return fmt.Errorf("%s: %w", msg, &kindError{kind: kind, err: err})
}
