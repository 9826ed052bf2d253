package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"
)

// Every route but the streams (operations.go, exec_ws.go) is one call of
// handle: decode the body, call the core, answer the result or the error.

// in is what a route's call gets besides its decoded body.
type in struct {
	ctx context.Context // the request's: canceled when the client goes away
	p   types.Principal
	c   *gin.Context
}

// param is the path parameter name ("" when the route has none).
func (r in) param(name string) string { return r.c.Param(name) }

// key is the request's Idempotency-Key ("" when absent).
func (r in) key() string { return r.c.GetHeader(IdempotencyKeyHeader) }

// none is the body of a route that reads none, and the answer of one that
// answers no body.
type none struct{}

// handle is the one decode-call-respond path. Unless Req is none it decodes
// the JSON body into a Req (decodeJSON); it calls call and answers its
// result with status, or its error through writeError. A none result
// answers status without a body.
func handle[Req, Resp any](status int, call func(r in, req Req) (Resp, error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		var req Req
		if _, empty := any(req).(none); !empty {
			if err := decodeJSON(c, &req); err != nil {
				writeError(c, err)
				return
			}
		}
		v, err := call(in{ctx: c.Request.Context(), p: principal(c), c: c}, req)
		if err != nil {
			writeError(c, err)
			return
		}
		if _, empty := any(v).(none); empty {
			c.Status(status)
			return
		}
		c.JSON(status, v)
	}
}

// started answers an operation the call started: 202 with a Location to
// follow it.
func started[Req any](call func(r in, req Req) (types.Operation, error)) gin.HandlerFunc {
	return handle(http.StatusAccepted, func(r in, req Req) (types.Operation, error) {
		op, err := call(r, req)
		if err == nil {
			r.c.Header("Location", "/v1/operations/"+op.ID)
		}
		return op, err
	})
}

// items makes a list answer [] rather than null when it is empty.
func items[T any](v []T, err error) ([]T, error) {
	if v == nil {
		v = []T{}
	}
	return v, err
}

// decodeJSON reads a JSON request body of at most MaxJSONBody bytes into
// dst, refusing unknown fields and trailing data. An empty body leaves dst
// as it is (the zero request).
func decodeJSON(c *gin.Context, dst any) error {
	body := http.MaxBytesReader(c.Writer, c.Request.Body, MaxJSONBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return describeJSONError(err)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return describeJSONError(err)
		}
		return invalidArgument("request body: unexpected data after the JSON object")
	}
	return nil
}

func describeJSONError(err error) error {
	var (
		tooBig *http.MaxBytesError
		syn    *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooBig):
		return invalidArgument("request body exceeds the %d byte limit", tooBig.Limit)
	case errors.As(err, &syn):
		return invalidArgument("request body: malformed JSON at offset %d: %v", syn.Offset, syn)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidArgument("request body: malformed JSON: unexpected end of input")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "(top level)"
		}
		return invalidArgument("request body: field %s: cannot use a JSON %s as %s", field, typ.Value, typ.Type)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return invalidArgument("request body: %s", strings.TrimPrefix(err.Error(), "json: "))
	default:
		return invalidArgument("request body: %v", err)
	}
}

// version parses the :n path parameter.
func (r in) version() (int, error) {
	s := r.param("n")
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, invalidArgument("version number %q in the path: must be a positive integer", s)
	}
	return n, nil
}

// queryInt parses an optional non-negative integer query parameter; absent
// is 0.
func (r in) queryInt(name string) (int, error) {
	s, ok := r.c.GetQuery(name)
	if !ok {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, invalidArgument("query parameter %s %q: must be a non-negative integer", name, s)
	}
	return n, nil
}
