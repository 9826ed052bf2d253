package types

import (
	"fmt"

	"github.com/envd-dev/envd/errdefs"
)

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error object: a stable code and a human message.
// Details carries machine-readable numbers when the error offers them (for
// example a quota's limit and usage). RequestID is the id of the request
// that failed (its X-Request-Id), to quote when reporting it.
type ErrorDetail struct {
	Code      string         `json:"code"`
	Message   string         `json:"message"`
	Details   map[string]any `json:"details,omitempty"`
	RequestID string         `json:"request_id,omitempty"`
}

// Error is an error the API answered. errors.Is matches it against the
// kinds of package errdefs by its code:
//
//	if errors.Is(err, errdefs.ErrNotFound) { ... }
type Error struct {
	Status  int            // HTTP status
	Code    string         // stable code, as in errdefs.Code
	Message string         // human-readable message
	Details map[string]any // machine-readable details, when the server sent any
	// RequestID is the server's id of the failed request (error.request_id,
	// or the X-Request-Id header), "" when it sent none; the server's
	// access log has a line with it.
	RequestID string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s (%s)", e.Message, e.Code)
}

// Is reports whether target is the errdefs kind of the error's code.
func (e *Error) Is(target error) bool {
	k := errdefs.FromCode(e.Code)
	return k != nil && k == target
}

// Unwrap returns the errdefs kind of the error's code, nil when unknown.
func (e *Error) Unwrap() error { return errdefs.FromCode(e.Code) }

// ExecExit is the payload of the exec stream's exit message. Error is set
// when the exec could not run (the instance is not Running, the command
// does not exist); ExitCode is then -1.
type ExecExit struct {
	ExitCode int          `json:"exit_code"`
	Error    *ErrorDetail `json:"error,omitempty"`
}
