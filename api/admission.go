package api

import (
	"strconv"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"
)

// Admitter limits how many exec and event streams one tenant holds at
// once (Parts.Admitter; *envd.Service does); without one, streams are not
// limited. Admit returns errdefs.ErrResourceExhausted past the limit.
type Admitter interface {
	Admit(p types.Principal, kind string) (release func(), err error)
}

// admitFunc takes a slot of kind for p, or fails with the error to answer.
// The caller defers release: a handler's defers run on every path, client
// disconnects and recovered panics included.
type admitFunc func(p types.Principal, kind string) (release func(), err error)

// admission is a's Admit, or one that admits everything when a is nil.
func admission(a Admitter) admitFunc {
	if a != nil {
		return a.Admit
	}
	return func(types.Principal, string) (func(), error) { return func() {}, nil }
}

// checkIdempotencyKey answers 400 for an Idempotency-Key the store cannot
// hold, on every route, before a handler does any work.
func checkIdempotencyKey(c *gin.Context) {
	if err := types.CheckIdempotencyKey(c.GetHeader(IdempotencyKeyHeader)); err != nil {
		writeError(c, err)
		return
	}
	c.Next()
}

// IdempotencyKeyHeader carries a client-chosen key on creating POSTs
// (projects, instances, saves): a retry with the same key and body returns
// the same object or operation; the same key with a different body is 422
// idempotency_key_reused.
const IdempotencyKeyHeader = "Idempotency-Key"

// retryAfter is implemented by errors that suggest when to retry (a
// refused admission); writeError sends it as the Retry-After header.
type retryAfter interface {
	error
	RetryAfter() time.Duration
}

func retryAfterSeconds(d time.Duration) string {
	return strconv.Itoa(max(1, int((d+time.Second-1)/time.Second)))
}
