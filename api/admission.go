package api

import (
	"strconv"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/versions"
)

// Admitter is implemented by a Core that limits how many exec and event
// streams one tenant holds at once (*envd.Service does); with a Core
// without it, streams are not limited. Admit returns
// errdefs.ErrResourceExhausted past the limit.
type Admitter interface {
	Admit(p types.Principal, kind string) (release func(), err error)
}

// admit takes a slot of kind for the request's tenant, or answers 429 and
// returns false. The caller defers release: a handler's defers run on
// every path, client disconnects and recovered panics included.
func (h *handlers) admit(c *gin.Context, kind string) (release func(), ok bool) {
	a, limited := h.core.(Admitter)
	if !limited {
		return func() {}, true
	}
	release, err := a.Admit(principal(c), kind)
	if err != nil {
		writeError(c, err)
		return nil, false
	}
	return release, true
}

// checkIdempotencyKey answers 400 for an Idempotency-Key the store cannot
// hold, on every route, before a handler does any work.
func (h *handlers) checkIdempotencyKey(c *gin.Context) {
	if err := versions.CheckIdempotencyKey(c.GetHeader(IdempotencyKeyHeader)); err != nil {
		writeError(c, err)
		return
	}
	c.Next()
}

// retryAfter is implemented by errors that suggest when to retry (a
// refused admission); writeError sends it as the Retry-After header.
type retryAfter interface {
	error
	RetryAfter() time.Duration
}

func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}
