package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/internal/limiter"
)

// limited is the fakes with the real limiter the service uses.
func limited(core *apitest.Fakes, lim *limiter.Limiter) api.Parts {
	parts := core.Parts()
	parts.Admitter = admitter{lim}
	return parts
}

type admitter struct{ lim *limiter.Limiter }

func (a admitter) Admit(p types.Principal, kind string) (func(), error) {
	return a.lim.Acquire(p.Tenant, kind)
}

func newLimitedServer(t *testing.T, max int) (*apitest.Fakes, *limiter.Limiter, *httptest.Server) {
	t.Helper()
	core := apitest.New()
	lim := limiter.New(map[string]limiter.Limit{
		types.AdmitExec:   {Max: max, RetryAfter: 3 * time.Second},
		types.AdmitEvents: {Max: max, RetryAfter: 3 * time.Second},
	})
	h, err := api.New(limited(core, lim), api.WithEventPollInterval(10*time.Millisecond), api.WithErrorLog(io.Discard))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return core, lim, srv
}

func assertExhausted(t *testing.T, r response) {
	t.Helper()
	assert.Equal(t, http.StatusTooManyRequests, r.status, "body %s", r.body)
	assert.Equal(t, "resource_exhausted", errorOf(t, r).Code)
	assert.Equal(t, "3", r.header.Get("Retry-After"))
	assert.Equal(t, "exec", errorOf(t, r).Details["kind"])
}

// eventually waits for the tenant's slots of kind to drop to want.
func eventually(t *testing.T, lim *limiter.Limiter, kind string, want int) {
	t.Helper()
	require.Eventually(t, func() bool { return lim.InUse("t1", kind) == want }, 5*time.Second, 10*time.Millisecond,
		"%s slots in use: %d, want %d", kind, lim.InUse("t1", kind), want)
}

func TestExecLimitPerTenant(t *testing.T) {
	t.Parallel()
	core, lim, srv := newLimitedServer(t, 1)
	block := make(chan struct{})
	core.Exec.ExecFunc = func(ctx context.Context, id string, req types.ExecRequest) (types.ExecResult, error) {
		switch req.Args[0] {
		case "block":
			select {
			case <-block:
			case <-ctx.Done():
				return types.ExecResult{}, ctx.Err()
			}
		case "hang":
			<-ctx.Done()
			return types.ExecResult{}, ctx.Err()
		case "panic":
			panic("core exploded")
		}
		return types.ExecResult{Stdout: "ok"}, nil
	}
	exec := func(cmd string) response {
		return do(t, srv, http.MethodPost, "/v1/instances/i-1/exec", strings.NewReader(`{"args":["`+cmd+`"]}`), nil)
	}

	first := make(chan response)
	go func() { first <- exec("block") }()
	eventually(t, lim, types.AdmitExec, 1)
	assertExhausted(t, exec("echo"))
	close(block)
	assert.Equal(t, http.StatusOK, (<-first).status)
	eventually(t, lim, types.AdmitExec, 0)

	t.Run("released after a panic", func(t *testing.T) {
		r := exec("panic")
		assert.Equal(t, http.StatusInternalServerError, r.status)
		eventually(t, lim, types.AdmitExec, 0)
	})
	t.Run("released after an error", func(t *testing.T) {
		r := do(t, srv, http.MethodPost, "/v1/instances/i-1/exec", strings.NewReader(`{"args":[]}`), nil)
		assert.Equal(t, http.StatusOK, exec("echo").status, "an invalid request held no slot: %s", r.body)
		eventually(t, lim, types.AdmitExec, 0)
	})
	t.Run("released when the client goes away", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/v1/instances/i-1/exec", strings.NewReader(`{"args":["hang"]}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apitest.Token)
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := srv.Client().Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		eventually(t, lim, types.AdmitExec, 1)
		cancel()
		<-done
		eventually(t, lim, types.AdmitExec, 0)
	})
}

// The exec WebSocket is admitted before the upgrade: past the limit the
// client gets a plain 429, and one buffered exec and one stream count
// against the same limit.
func TestExecWebSocketLimitPerTenant(t *testing.T) {
	t.Parallel()
	core, lim, srv := newLimitedServer(t, 1)
	core.Exec.ExecStreamFunc = func(ctx context.Context, _ string, _ types.ExecRequest, _ types.Stdio) (int, error) {
		<-ctx.Done()
		return -1, ctx.Err()
	}
	c, _, err := dialExec(t, srv, "cmd=sh", nil)
	require.NoError(t, err)
	eventually(t, lim, types.AdmitExec, 1)

	_, resp, err := dialExec(t, srv, "cmd=sh", nil)
	require.Error(t, err)
	require.NotNil(t, resp)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "3", resp.Header.Get("Retry-After"))
	assertExhausted(t, do(t, srv, http.MethodPost, "/v1/instances/i-1/exec", strings.NewReader(`{"args":["x"]}`), nil))

	require.NoError(t, c.conn.Close(websocket.StatusNormalClosure, ""))
	eventually(t, lim, types.AdmitExec, 0)
	_, _, err = dialExec(t, srv, "cmd=sh", nil)
	require.NoError(t, err)
}

func TestEventStreamLimitPerTenant(t *testing.T) {
	t.Parallel()
	core, lim, srv := newLimitedServer(t, 1)
	op := core.Operations.NewOperation("save", "i-1")
	ctx, cancel := context.WithCancel(context.Background())
	resp := openStream(t, ctx, srv, "/v1/operations/"+op.ID+"/events", nil)
	eventually(t, lim, types.AdmitEvents, 1)

	r := do(t, srv, http.MethodGet, "/v1/operations/"+op.ID+"/events", nil, map[string]string{"Accept": "text/event-stream"})
	assert.Equal(t, http.StatusTooManyRequests, r.status, "body %s", r.body)
	assert.Equal(t, "resource_exhausted", errorOf(t, r).Code)
	assert.Equal(t, "3", r.header.Get("Retry-After"))
	// The one-shot JSON list is not a stream and is not limited.
	assert.Equal(t, http.StatusOK, do(t, srv, http.MethodGet, "/v1/operations/"+op.ID+"/events?wait=false", nil, nil).status)

	cancel()
	resp.Body.Close()
	eventually(t, lim, types.AdmitEvents, 0)
	openStream(t, context.Background(), srv, "/v1/operations/"+op.ID+"/events", nil)
}

// An Idempotency-Key the store cannot hold is refused on every route
// before the core is called.
func TestIdempotencyKeyTooLong(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/projects", `{"name":"p","base":"b"}`},
		{http.MethodPost, "/v1/projects/p/instances", `{}`},
		{http.MethodPost, "/v1/instances/i-1/save", `{}`},
		{http.MethodPost, "/v1/projects/p/builds", `{"manager":"apt","packages":["x1"]}`},
		{http.MethodPost, "/v1/projects/p/migrations", `{}`},
		{http.MethodPost, "/v1/admin/gc", `{}`},
	} {
		for name, key := range map[string]string{"256 bytes": strings.Repeat("k", 256), "control character": "a\tb"} {
			r := do(t, srv, tc.method, tc.path, strings.NewReader(tc.body), map[string]string{api.IdempotencyKeyHeader: key})
			assert.Equal(t, http.StatusBadRequest, r.status, "%s %s with %s: %s", tc.method, tc.path, name, r.body)
			assert.Equal(t, "invalid_argument", errorOf(t, r).Code)
		}
	}
	for _, c := range core.Calls() {
		assert.Equal(t, "Authenticate", c.Method, "no request reached the core past authentication")
	}
	r := do(t, srv, http.MethodPost, "/v1/projects", strings.NewReader(`{"name":"p","base":"b"}`),
		map[string]string{api.IdempotencyKeyHeader: strings.Repeat("k", 255)})
	assert.Equal(t, http.StatusCreated, r.status, "255 bytes is allowed: %s", r.body)
}
