package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/internal/errdefs"
)

var (
	errNotFound        = errdefs.ErrNotFound
	errInvalidArgument = errdefs.ErrInvalidArgument
	// errNotImplemented marks a route of the contract that is not served
	// yet. It is local to the API: the core never returns it.
	errNotImplemented = errors.New("not implemented")
)

// CodeNotImplemented is the error code of routes that are not served yet.
const CodeNotImplemented = "not_implemented"

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
	if errors.Is(err, errNotImplemented) {
		status, code = http.StatusNotImplemented, CodeNotImplemented
	}
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
	c.AbortWithStatusJSON(status, body)
}

func invalidArgument(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errInvalidArgument)
}

func notImplemented(what string) gin.HandlerFunc {
	return func(c *gin.Context) {
		writeError(c, fmt.Errorf("%s is not implemented by this server yet: %w", what, errNotImplemented))
	}
}
