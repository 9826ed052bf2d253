package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/syncbuf"
)

var generatedID = regexp.MustCompile(`^[0-9a-f]{24}$`)

// Every answer carries a request id: the client's when it is sane, a new
// one otherwise; an error body carries the same one.
func TestRequestID(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	core.Projects.GetProjectFunc = func(_ context.Context, name string) (types.Project, error) {
		return types.Project{}, fmt.Errorf("project %q: %w", name, errdefs.ErrNotFound)
	}
	sane := "Abc.1_2-" + strings.Repeat("x", 120) // 128 characters
	for _, tc := range []struct {
		name, sent string
		kept       bool
	}{
		{name: "none sent", sent: ""},
		{name: "sane", sent: "trace-42.a_B", kept: true},
		{name: "longest sane", sent: sane, kept: true},
		{name: "too long", sent: sane + "y"},
		{name: "space", sent: "a b"},
		{name: "colon", sent: "a:b"},
		{name: "non-ascii", sent: "caf\u00e9"},
		{name: "log injection", sent: "a\" level=ERROR msg=\"x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/projects/web", "/v1/nope", "/v1/projects"} {
				r := do(t, srv, http.MethodGet, path, nil, map[string]string{"X-Request-Id": tc.sent})
				id := r.header.Get("X-Request-Id")
				if tc.kept {
					assert.Equal(t, tc.sent, id, path)
				} else {
					assert.Regexp(t, generatedID, id, path)
				}
				if r.status >= 400 {
					assert.Equal(t, id, errorOf(t, r).RequestID, "error body of %s", path)
				}
			}
		})
	}
	a := do(t, srv, http.MethodGet, "/healthz", nil, nil).header.Get("X-Request-Id")
	b := do(t, srv, http.MethodGet, "/healthz", nil, nil).header.Get("X-Request-Id")
	assert.NotEqual(t, a, b, "each request gets its own id")
	r := do(t, srv, http.MethodGet, "/v1/projects", nil, map[string]string{"Authorization": "", "X-Request-Id": "unauth-1"})
	require.Equal(t, http.StatusUnauthorized, r.status)
	assert.Equal(t, "unauth-1", errorOf(t, r).RequestID, "a refused token's answer has it too")
}

// The exec WebSocket's exit message and an event stream's error event
// carry the request id of the stream's request.
func TestRequestIDInStreamErrors(t *testing.T) {
	t.Parallel()
	t.Run("exec exit", func(t *testing.T) {
		core, srv := newServer(t)
		core.Exec.ExecStreamFunc = func(_ context.Context, id string, _ types.ExecRequest, _ types.Stdio) (int, error) {
			return -1, fmt.Errorf("instance %q is Stopped: %w", id, errdefs.ErrFailedPrecondition)
		}
		c, resp, err := dialExecWithID(t, srv, "ws-7")
		require.NoError(t, err)
		assert.Equal(t, "ws-7", resp.Header.Get("X-Request-Id"))
		_, exit, _ := c.readUntilExit()
		require.NotNil(t, exit.Error)
		assert.Equal(t, "ws-7", exit.Error.RequestID)
	})
	t.Run("event stream", func(t *testing.T) {
		core := apitest.New()
		parts := core.Parts()
		parts.Operations = &failingEvents{Operations: core.Operations}
		h, err := api.New(parts, api.WithEventPollInterval(10*time.Millisecond))
		require.NoError(t, err)
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		op := core.Operations.NewOperation("save", "i-1")
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/v1/operations/"+op.ID+"/events", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apitest.Token)
		req.Header.Set("X-Request-Id", "sse-9")
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var event, data string
		for sc := bufio.NewScanner(resp.Body); sc.Scan(); {
			if v, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
				event = v
			}
			if v, ok := strings.CutPrefix(sc.Text(), "data: "); ok && event == api.SSEEventError {
				data = v
				break
			}
		}
		require.NotEmpty(t, data, "an error event")
		var body types.ErrorBody
		require.NoError(t, json.Unmarshal([]byte(data), &body))
		assert.Equal(t, "unavailable", body.Error.Code)
		assert.Equal(t, "sse-9", body.Error.RequestID)
	})
}

// failingEvents answers an operation's events once, then fails as a
// database that went away would.
type failingEvents struct {
	*apitest.Operations
	mu    sync.Mutex
	calls int
}

func (f *failingEvents) OperationEvents(ctx context.Context, p types.Principal, id string, after int) ([]types.Event, error) {
	f.mu.Lock()
	f.calls++
	n := f.calls
	f.mu.Unlock()
	if n > 1 {
		return nil, fmt.Errorf("operation %s events: %w", id, errdefs.ErrUnavailable)
	}
	return f.Operations.OperationEvents(ctx, p, id, after)
}

func dialExecWithID(t *testing.T, srv *httptest.Server, id string) (*wsClient, *http.Response, error) {
	t.Helper()
	return dialExec(t, srv, "cmd=ls", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + apitest.Token}, "X-Request-Id": {id}},
	})
}

// The access log: one line per request through the node's logger, with
// what an operator needs and never the token.
func TestAccessLogLine(t *testing.T) {
	t.Parallel()
	var buf syncbuf.Buffer
	core := apitest.New()
	core.Auth.Principal = types.Principal{Tenant: "acme"}
	h, err := api.New(core.Parts(), api.WithLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	r := do(t, srv, http.MethodGet, "/v1/projects/web", nil, map[string]string{"X-Request-Id": "log-1"})
	require.Equal(t, http.StatusOK, r.status)
	do(t, srv, http.MethodGet, "/v1/projects", nil, map[string]string{"Authorization": "Bearer wrong-secret-token", "X-Request-Id": "log-2"})
	do(t, srv, http.MethodPost, "/v1/projects", strings.NewReader(`{"name":"body-secret"}`), map[string]string{"X-Request-Id": "log-3"})
	do(t, srv, http.MethodGet, "/v1/nope/x", nil, map[string]string{"X-Request-Id": "log-4"})
	do(t, srv, http.MethodGet, "/healthz", nil, nil)
	do(t, srv, http.MethodGet, "/readyz", nil, nil)

	lines := logLines(t, buf.String())
	require.Len(t, lines, 4, "one line per request, probes below Info: %s", buf.String())
	first := lines[0]
	assert.Equal(t, "INFO", first["level"])
	assert.Equal(t, "http request", first["msg"])
	assert.Equal(t, "GET", first["method"])
	assert.Equal(t, "/v1/projects/:p", first["route"], "the route template, not the path")
	assert.EqualValues(t, 200, first["status"])
	assert.EqualValues(t, len(r.body), first["bytes"])
	assert.Equal(t, "acme", first["tenant"])
	assert.Equal(t, "log-1", first["request_id"])
	assert.Equal(t, "127.0.0.1", first["remote_addr"])
	assert.IsType(t, float64(0), first["duration_ms"])
	assert.NotContains(t, first, "path")

	refused := lines[1]
	assert.EqualValues(t, 401, refused["status"])
	assert.Equal(t, "/v1/projects", refused["route"])
	assert.NotContains(t, refused, "tenant", "no principal")
	assert.Equal(t, "log-2", refused["request_id"])

	assert.Equal(t, "POST", lines[2]["method"])
	assert.EqualValues(t, 201, lines[2]["status"])

	unmatched := lines[3]
	assert.EqualValues(t, 404, unmatched["status"])
	assert.Equal(t, "", unmatched["route"])
	assert.Equal(t, "/v1/nope/x", unmatched["path"])

	for _, secret := range []string{apitest.Token, "wrong-secret-token", "body-secret"} {
		assert.NotContains(t, buf.String(), secret)
	}

	// At Debug the probes are logged too.
	var dbg syncbuf.Buffer
	h, err = api.New(apitest.New().Parts(), api.WithLogger(slog.New(slog.NewJSONHandler(&dbg, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	require.NoError(t, err)
	probe := httptest.NewServer(h)
	t.Cleanup(probe.Close)
	do(t, probe, http.MethodGet, "/readyz", nil, nil)
	lines = logLines(t, dbg.String())
	require.Len(t, lines, 1)
	assert.Equal(t, "DEBUG", lines[0]["level"])
	assert.Equal(t, "/readyz", lines[0]["route"])
}

func logLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.Lines(s) {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), line)
		out = append(out, m)
	}
	return out
}

// /readyz runs every check at once, bounded, and names the failed ones.
func TestReadyz(t *testing.T) {
	t.Parallel()
	ok := api.CheckFunc(func(context.Context) error { return nil })
	down := api.CheckFunc(func(context.Context) error { return errors.New("dial tcp 127.0.0.1:5432: connection refused") })
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hangs := api.CheckFunc(func(context.Context) error { <-release; return nil }) // ignores its context
	// Each waits for the other: they pass only when run at the same time.
	var wg sync.WaitGroup
	wg.Add(2)
	together := api.CheckFunc(func(ctx context.Context) error {
		wg.Done()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	for _, tc := range []struct {
		name       string
		checks     map[string]api.Checker
		status     int
		wantStatus string
		failed     map[string]string // check -> part of its error
	}{
		{name: "no checks", checks: nil, status: 200, wantStatus: "ready"},
		{name: "all pass", checks: map[string]api.Checker{"postgresql": ok, "registry": ok}, status: 200, wantStatus: "ready"},
		{name: "one fails", checks: map[string]api.Checker{"postgresql": down, "registry": ok}, status: 503, wantStatus: "not_ready",
			failed: map[string]string{"postgresql": "connection refused"}},
		{name: "one hangs", checks: map[string]api.Checker{"containerd": hangs, "registry": ok}, status: 503, wantStatus: "not_ready",
			failed: map[string]string{"containerd": "no answer within 200ms"}},
		{name: "concurrent", checks: map[string]api.Checker{"a": together, "b": together}, status: 200, wantStatus: "ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := api.New(apitest.New().Parts(), api.WithReadiness(tc.checks), api.WithReadinessTimeout(200*time.Millisecond))
			require.NoError(t, err)
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			r := do(t, srv, http.MethodGet, "/readyz", nil, map[string]string{"Authorization": ""})
			require.Equal(t, tc.status, r.status, "%s", r.body)
			var got types.Readiness
			require.NoError(t, json.Unmarshal(r.body, &got), "%s", r.body)
			assert.Equal(t, tc.wantStatus, got.Status)
			require.Len(t, got.Checks, len(tc.checks))
			for name := range tc.checks {
				if want, failed := tc.failed[name]; failed {
					assert.Equal(t, "failed", got.Checks[name].Status, name)
					assert.Contains(t, got.Checks[name].Error, want, name)
				} else {
					assert.Equal(t, "ok", got.Checks[name].Status, name)
					assert.Empty(t, got.Checks[name].Error, name)
				}
			}
		})
	}
}

func TestObservabilityOptions(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opt  api.Option
		want string
	}{
		"nil logger":        {api.WithLogger(nil), "logger is nil"},
		"nil checker":       {api.WithReadiness(map[string]api.Checker{"db": nil}), `readiness check "db": needs a name and a checker`},
		"unnamed check":     {api.WithReadiness(map[string]api.Checker{"": api.CheckFunc(nil)}), `readiness check "": needs a name and a checker`},
		"zero check budget": {api.WithReadinessTimeout(0), "readiness timeout 0s: must be positive"},
	} {
		t.Run(name, func(t *testing.T) {
			h, err := api.New(apitest.New().Parts(), api.WithErrorLog(io.Discard), tc.opt)
			assert.Nil(t, h)
			assert.EqualError(t, err, "api: "+tc.want)
		})
	}
}

// The access log's cost per request: go test -bench AccessLog ./api/
func BenchmarkAccessLog(b *testing.B) {
	for _, bc := range []struct {
		name string
		opts []api.Option
	}{
		{"off", nil},
		{"json", []api.Option{api.WithLogger(slog.New(slog.NewJSONHandler(io.Discard, nil)))}},
		{"text", []api.Option{api.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h, err := api.New(apitest.New().Parts(), bc.opts...)
			require.NoError(b, err)
			req := httptest.NewRequest(http.MethodGet, "/v1/projects/web", nil)
			req.Header.Set("Authorization", "Bearer "+apitest.Token)
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatal(w.Code)
				}
			}
		})
	}
}
