// Package errdefs defines the few error kinds envd uses across packages.
//
// Packages wrap a kind with the identifying value:
//
//	fmt.Errorf("version %d of project %q: %w", n, p, errdefs.ErrNotFound)
//
// and callers branch with errors.Is. The API maps kinds to HTTP statuses and
// stable codes in one place (Code and HTTPStatus below). Driver errors (pgx,
// containerd, registry) are translated into these kinds where the driver is
// used and go no further.
package errdefs

import (
	"context"
	"errors"
	"net/http"
)

var (
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrConflict           = errors.New("conflict")            // a compare-and-swap lost the race
	ErrFailedPrecondition = errors.New("failed precondition") // wrong state for the request
	ErrStaleGeneration    = errors.New("stale generation")    // a fencing token older than the newest
	ErrUnauthenticated    = errors.New("unauthenticated")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrQuotaExceeded      = errors.New("quota exceeded")
	ErrUnavailable        = errors.New("unavailable") // a dependency (registry, database, runtime) is down
	ErrIdempotencyReuse   = errors.New("idempotency key reused with a different request")
	ErrCanceled           = errors.New("canceled")
	// ErrResourceExhausted: a per-tenant limit on concurrent work (saves,
	// builds, exec and event streams) is reached; retry later.
	ErrResourceExhausted = errors.New("resource exhausted")
	// ErrStartFailed: the runtime could not start a process for a reason
	// in the image or the request (an instance's init whose /bin/sh is
	// missing or a symlink loop, an exec whose working directory does not
	// exist); the message carries the runtime's reason. A missing or
	// unexecutable command of an exec is not an error but exit code 127
	// or 126, as a shell would give.
	ErrStartFailed = errors.New("process could not start")
	// ErrWaking: the instance is being woken (started from stopped or
	// hibernated) and the request did not wait; retry after Retry-After.
	ErrWaking = errors.New("waking")
	// ErrPortUnreachable: nothing listens on the instance's port the port
	// proxy was asked to reach (the instance itself is running).
	ErrPortUnreachable = errors.New("port unreachable")
	// ErrTooLarge: a request body is over a size limit of the node.
	ErrTooLarge = errors.New("too large")
	// ErrVolumeElsewhere: the project's volume data is on another node and
	// no archive carries it here; the instance is not started with an
	// empty volume.
	ErrVolumeElsewhere = errors.New("volume elsewhere")
	// ErrMemoryUnsupported: a memory checkpoint (or its resume) of an
	// instance whose runtime class or state cannot give one (a runc
	// instance, a stopped one, an established external connection);
	// refused before anything is made. The message says why and how.
	ErrMemoryUnsupported = errors.New("memory checkpoint unsupported")
	// ErrInsufficientCapacity: the node (or, in a cluster, every node)
	// has no room for the instance now: its disk's real free space, less
	// what the instances' writable layers may still fill (overcommitted),
	// is at its reserve. Not the tenant's quota; retry later or elsewhere.
	ErrInsufficientCapacity = errors.New("insufficient capacity")
	// ErrJoinToken: a join token (envd serve --join) is unknown, expired
	// or already used; details.reason says which.
	ErrJoinToken = errors.New("join token not valid")
)

type kind struct {
	err    error
	code   string
	status int
}

// kinds is ordered: the first match wins, so more specific kinds come first.
var kinds = []kind{
	{ErrInvalidArgument, "invalid_argument", http.StatusBadRequest},
	{ErrNotFound, "not_found", http.StatusNotFound},
	{ErrAlreadyExists, "already_exists", http.StatusConflict},
	{ErrStaleGeneration, "stale_generation", http.StatusConflict},
	{ErrConflict, "conflict", http.StatusConflict},
	{ErrMemoryUnsupported, "memory_checkpoint_unsupported", http.StatusConflict},
	{ErrFailedPrecondition, "failed_precondition", http.StatusConflict},
	{ErrUnauthenticated, "unauthenticated", http.StatusUnauthorized},
	{ErrPermissionDenied, "permission_denied", http.StatusForbidden},
	{ErrQuotaExceeded, "quota_exceeded", http.StatusInsufficientStorage},
	{ErrWaking, "waking", http.StatusServiceUnavailable},
	{ErrInsufficientCapacity, "insufficient_capacity", http.StatusServiceUnavailable},
	{ErrUnavailable, "unavailable", http.StatusServiceUnavailable},
	{ErrIdempotencyReuse, "idempotency_key_reused", http.StatusUnprocessableEntity},
	{ErrResourceExhausted, "resource_exhausted", http.StatusTooManyRequests},
	{ErrStartFailed, "start_failed", http.StatusUnprocessableEntity},
	{ErrCanceled, "canceled", 499},
	{context.Canceled, "canceled", 499},
	{context.DeadlineExceeded, "deadline_exceeded", http.StatusGatewayTimeout},
	{ErrPortUnreachable, "port_unreachable", http.StatusBadGateway},
	{ErrTooLarge, "too_large", http.StatusRequestEntityTooLarge},
	{ErrVolumeElsewhere, "volume_elsewhere", http.StatusConflict},
	{ErrJoinToken, "join_token_invalid", http.StatusUnauthorized},
}

// Codes returns every stable code with its HTTP status, in kinds' order
// ("internal" 500 last), for documentation checks.
func Codes() []struct {
	Code   string
	Status int
} {
	var out []struct {
		Code   string
		Status int
	}
	seen := map[string]bool{}
	for _, k := range kinds {
		if !seen[k.code] {
			seen[k.code] = true
			out = append(out, struct {
				Code   string
				Status int
			}{k.code, k.status})
		}
	}
	return append(out, struct {
		Code   string
		Status int
	}{"internal", http.StatusInternalServerError})
}

// Code returns the stable machine-readable code of err, "internal" when it
// carries no known kind.
func Code(err error) string {
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k.code
		}
	}
	return "internal"
}

// HTTPStatus returns the HTTP status for err's kind, 500 when unknown.
func HTTPStatus(err error) int {
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			return k.status
		}
	}
	return http.StatusInternalServerError
}

// FromCode returns the kind for a stable code, so a client can rebuild a
// typed error from an API response. Unknown codes give nil.
func FromCode(code string) error {
	for _, k := range kinds {
		if k.code == code {
			return k.err
		}
	}
	return nil
}

// detailed is an error with machine-readable details for the API's error
// body (the current state of an instance, the numbers of a quota).
type detailed struct {
	err     error
	details map[string]any
}

func (d *detailed) Error() string           { return d.err.Error() }
func (d *detailed) Unwrap() error           { return d.err }
func (d *detailed) Details() map[string]any { return d.details }

// WithDetails attaches details to err; errors.Is still sees err's kind.
func WithDetails(err error, details map[string]any) error {
	if err == nil {
		return nil
	}
	return &detailed{err: err, details: details}
}

// Details returns the details attached anywhere in err's chain, or nil.
func Details(err error) map[string]any {
	var d interface{ Details() map[string]any }
	if errors.As(err, &d) {
		return d.Details()
	}
	return nil
}
