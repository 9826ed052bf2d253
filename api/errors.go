package api

import (
	"errors"
	"fmt"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/internal/errdefs"
)

var (
	errNotFound        = errdefs.ErrNotFound
	errInvalidArgument = errdefs.ErrInvalidArgument
)

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the error object: a stable code and a human message.
// Details carries machine-readable numbers when the error offers them (for
// example a quota's limit and usage).
type ErrorDetail struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// detailer is implemented by errors that carry machine-readable details.
type detailer interface {
	Details() map[string]any
}

// errorResponse is the one place an error becomes an HTTP status and body.
func errorResponse(err error) (int, ErrorBody) {
	status, code := errdefs.HTTPStatus(err), errdefs.Code(err)
	body := ErrorBody{Error: ErrorDetail{Code: code, Message: err.Error()}}
	var d detailer
	if errors.As(err, &d) {
		body.Error.Details = d.Details()
	}
	return status, body
}

// writeError answers the request with err.
func writeError(c *gin.Context, err error) {
	status, body := errorResponse(err)
	if ra, ok := errors.AsType[retryAfter](err); ok {
		c.Header("Retry-After", retryAfterSeconds(ra.RetryAfter()))
	}
	c.AbortWithStatusJSON(status, body)
}

func invalidArgument(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errInvalidArgument)
}
