package api

import (
	"errors"
	"fmt"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/errdefs"
)

var (
	errNotFound        = errdefs.ErrNotFound
	errInvalidArgument = errdefs.ErrInvalidArgument
)

// detailer is implemented by errors that carry machine-readable details.
type detailer interface {
	Details() map[string]any
}

// errorResponse is the one place an error becomes an HTTP status and body
// (with the request's id).
func errorResponse(c *gin.Context, err error) (int, types.ErrorBody) {
	status, code := errdefs.HTTPStatus(err), errdefs.Code(err)
	body := types.ErrorBody{Error: types.ErrorDetail{Code: code, Message: err.Error(), RequestID: requestIDOf(c)}}
	var d detailer
	if errors.As(err, &d) {
		body.Error.Details = d.Details()
	}
	return status, body
}

// writeError answers the request with err.
func writeError(c *gin.Context, err error) {
	status, body := errorResponse(c, err)
	if ra, ok := errors.AsType[retryAfter](err); ok {
		c.Header("Retry-After", retryAfterSeconds(ra.RetryAfter()))
	}
	c.AbortWithStatusJSON(status, body)
}

func invalidArgument(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errInvalidArgument)
}
