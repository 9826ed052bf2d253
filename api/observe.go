package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"
)

// What the API does for operators: request ids, the access log and the
// readiness check.

// RequestIDHeader carries a request's id: a client may send one, every
// answer carries the one the server used.
const RequestIDHeader = "X-Request-Id"

const (
	requestIDKey = "envd.request_id"
	// maxRequestID bounds a client's request id; a longer one is replaced.
	maxRequestID = 128
)

// requestID gives every request an id: the client's X-Request-Id when it
// is sane (validRequestID), a new one otherwise. It is echoed in the
// answer's header, in error bodies (error.request_id) and in the access log.
func requestID(c *gin.Context) {
	id := c.GetHeader(RequestIDHeader)
	if !validRequestID(id) {
		id = newRequestID()
	}
	c.Set(requestIDKey, id)
	c.Header(RequestIDHeader, id)
	c.Next()
}

// validRequestID is whether a client's id can go into headers and log
// lines as it is: 1 to 128 of [A-Za-z0-9._-].
func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch b := id[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '.', b == '_', b == '-':
		default:
			return false
		}
	}
	return true
}

func newRequestID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// requestIDOf is the id requestID gave c's request ("" outside it).
func requestIDOf(c *gin.Context) string { return c.GetString(requestIDKey) }

// accessLog writes one line per request to log when the request is done
// (a stream's when it ends): method, route template, status, duration,
// bytes written, tenant (when authenticated), request id and client
// address. It never logs headers, query strings or bodies, so no token
// reaches the log. Probes (/healthz, /readyz) log at Debug.
func accessLog(log *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		level := slog.LevelInfo
		route := c.FullPath()
		if route == "/healthz" || route == "/readyz" {
			level = slog.LevelDebug
		}
		ctx := c.Request.Context()
		if !log.Enabled(ctx, level) {
			return
		}
		attrs := []slog.Attr{
			slog.String("method", c.Request.Method),
			slog.String("route", route),
		}
		if route == "" {
			// No route matched: the path says what was asked.
			attrs = append(attrs, slog.String("path", c.Request.URL.Path))
		}
		attrs = append(attrs,
			slog.Int("status", c.Writer.Status()),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
			slog.Int("bytes", max(c.Writer.Size(), 0)),
		)
		if p := principal(c); p.Tenant != "" {
			attrs = append(attrs, slog.String("tenant", p.Tenant))
		}
		attrs = append(attrs,
			slog.String("request_id", requestIDOf(c)),
			slog.String("remote_addr", c.ClientIP()),
		)
		log.LogAttrs(context.WithoutCancel(ctx), level, "http request", attrs...)
	}
}

// Checker is one dependency GET /readyz checks; Check returns nil when the
// dependency answers. It should give up when ctx is done (each check gets
// a short deadline).
type Checker interface {
	Check(ctx context.Context) error
}

// CheckFunc makes a function a Checker.
type CheckFunc func(ctx context.Context) error

// Check calls f.
func (f CheckFunc) Check(ctx context.Context) error { return f(ctx) }

// readiness serves GET /readyz (no token, like /healthz): it runs every
// check at once, each bounded by timeout, and answers 200 when all pass,
// 503 naming the failed ones and why otherwise.
type readiness struct {
	checks  map[string]Checker
	timeout time.Duration
}

func (g readiness) serve(c *gin.Context) {
	out := types.Readiness{Status: types.ReadyStatus, Checks: make(map[string]types.Check, len(g.checks))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, ch := range g.checks {
		wg.Go(func() {
			start := time.Now()
			err := runCheck(c.Request.Context(), ch, g.timeout)
			res := types.Check{Status: types.CheckOK, DurationMS: float64(time.Since(start).Microseconds()) / 1000}
			if err != nil {
				res.Status, res.Error = types.CheckFailed, err.Error()
			}
			mu.Lock()
			defer mu.Unlock()
			out.Checks[name] = res
			if err != nil {
				out.Status = types.NotReadyStatus
			}
		})
	}
	wg.Wait()
	status := http.StatusOK
	if out.Status != types.ReadyStatus {
		status = http.StatusServiceUnavailable
	}
	c.JSON(status, out)
}

// runCheck is ch's answer, or a timeout error when it takes longer than
// timeout, even if ch ignores its context.
func runCheck(ctx context.Context, ch Checker, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ch.Check(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer within %v", timeout)
	}
}
