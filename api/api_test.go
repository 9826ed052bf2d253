package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/syncbuf"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/errdefs"
)

func newServer(t *testing.T) (*apitest.Fakes, *httptest.Server) {
	t.Helper()
	core := apitest.New()
	h, err := api.New(core.Parts(), api.WithEventPollInterval(10*time.Millisecond), api.WithForwardKey(testClusterKey))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return core, srv
}

// testClusterKey is the cluster key of every test server: two of them
// forward to each other as two nodes of one cluster.
var testClusterKey = []byte("0123456789abcdef0123456789abcdef")

type response struct {
	status int
	header http.Header
	body   []byte
}

func do(t *testing.T, srv *httptest.Server, method, path string, body io.Reader, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, body)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apitest.Token)
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{resp.StatusCode, resp.Header, b}
}

// errorOf decodes an error body, failing the test when it is not one.
func errorOf(t *testing.T, r response) types.ErrorDetail {
	t.Helper()
	var body types.ErrorBody
	require.NoError(t, json.Unmarshal(r.body, &body), "body %s", r.body)
	require.NotEmpty(t, body.Error.Code, "body %s", r.body)
	return body.Error
}

func TestHealthzNeedsNoAuth(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t)
	r := do(t, srv, http.MethodGet, "/healthz", nil, map[string]string{"Authorization": ""})
	assert.Equal(t, http.StatusOK, r.status)
	assert.JSONEq(t, `{"status":"ok"}`, string(r.body))
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t)
	for name, tc := range map[string]struct {
		header string
		status int
	}{
		"missing":      {"", http.StatusUnauthorized},
		"wrong token":  {"Bearer nope", http.StatusUnauthorized},
		"wrong scheme": {"Basic " + apitest.Token, http.StatusUnauthorized},
		"empty token":  {"Bearer ", http.StatusUnauthorized},
		"valid":        {"Bearer " + apitest.Token, http.StatusOK},
		"lower case":   {"bearer " + apitest.Token, http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			r := do(t, srv, http.MethodGet, "/v1/projects", nil, map[string]string{"Authorization": tc.header})
			assert.Equal(t, tc.status, r.status, "body %s", r.body)
			if tc.status == http.StatusUnauthorized {
				assert.Equal(t, "unauthenticated", errorOf(t, r).Code)
				assert.Equal(t, "application/json; charset=utf-8", r.header.Get("Content-Type"))
				assert.NotEmpty(t, r.header.Get("WWW-Authenticate"))
			} else {
				assert.JSONEq(t, `[]`, string(r.body), "an empty list is [], not null")
			}
		})
	}
}

func TestPrincipalReachesCore(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	core.Auth.Principal = types.Principal{Tenant: "acme"}
	r := do(t, srv, http.MethodGet, "/v1/projects/web", nil, nil)
	require.Equal(t, http.StatusOK, r.status)
	call, ok := core.LastCall("GetProject")
	require.True(t, ok)
	assert.Equal(t, "acme", call.Principal.Tenant)
	assert.Equal(t, []any{"web"}, call.Args)
}

func TestUnknownRoutes(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t)
	for _, path := range []string{"/nope", "/v1/nope", "/v1/projects/", "/v1/instances/i-1/bogus"} {
		r := do(t, srv, http.MethodPost, path, nil, nil)
		assert.Equal(t, http.StatusNotFound, r.status, path)
		assert.Equal(t, "not_found", errorOf(t, r).Code, path)
	}
}

func TestBadRequestBodies(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	for name, tc := range map[string]struct {
		path, body, want string
	}{
		"malformed":     {"/v1/projects", `{"name": "p",`, "malformed JSON"},
		"syntax error":  {"/v1/projects", `{"name" "p"}`, "malformed JSON"},
		"unknown field": {"/v1/projects", `{"name": "p", "colour": "red"}`, `unknown field "colour"`},
		"wrong type":    {"/v1/projects/p/instances", `{"version": "two"}`, "field version"},
		"trailing data": {"/v1/instances/i-1/exec", `{"args": ["ls"]} {}`, "after the JSON object"},
		"too big": {"/v1/instances/i-1/exec",
			`{"args": ["` + strings.Repeat("a", api.MaxJSONBody) + `"]}`, "exceeds the 1048576 byte limit"},
		"unknown save field": {"/v1/instances/i-1/save", `{"msg": "x"}`, `unknown field "msg"`},
		"cas wrong type":     {"/v1/projects/p/current", `{"version": 2, "expected_current": "1"}`, "expected_current"},
	} {
		t.Run(name, func(t *testing.T) {
			r := do(t, srv, http.MethodPost, tc.path, strings.NewReader(tc.body), map[string]string{"Content-Type": "application/json"})
			assert.Equal(t, http.StatusBadRequest, r.status)
			e := errorOf(t, r)
			assert.Equal(t, "invalid_argument", e.Code)
			assert.Contains(t, e.Message, tc.want)
		})
	}
	for _, c := range core.Calls() {
		assert.Equal(t, "Authenticate", c.Method, "a bad request must not reach the core")
	}
}

func TestEmptyBodyIsZeroRequest(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	r := do(t, srv, http.MethodPost, "/v1/projects/p/instances", nil, nil)
	require.Equal(t, http.StatusCreated, r.status, "body %s", r.body)
	call, _ := core.LastCall("CreateInstance")
	assert.Equal(t, []any{"p", types.CreateInstanceRequest{}, ""}, call.Args)
}

func TestBadVersionNumbers(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/v1/projects/p/versions/abc"},
		{http.MethodGet, "/v1/projects/p/versions/0"},
		{http.MethodGet, "/v1/projects/p/versions/-1"},
		{http.MethodGet, "/v1/projects/p/versions/1.5"},
		{http.MethodPost, "/v1/projects/p/versions/x/pin"},
		{http.MethodDelete, "/v1/projects/p/versions/99999999999999999999/pin"},
	} {
		r := do(t, srv, tc.method, tc.path, nil, nil)
		assert.Equal(t, http.StatusBadRequest, r.status, tc.path)
		e := errorOf(t, r)
		assert.Equal(t, "invalid_argument", e.Code, tc.path)
		assert.Contains(t, e.Message, "version number", tc.path)
	}
	_, called := core.LastCall("GetVersion")
	assert.False(t, called)
}

func TestCoreErrorsMapToStatusAndCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kind   error
		status int
		code   string
	}{
		{errdefs.ErrInvalidArgument, 400, "invalid_argument"},
		{errdefs.ErrNotFound, 404, "not_found"},
		{errdefs.ErrAlreadyExists, 409, "already_exists"},
		{errdefs.ErrConflict, 409, "conflict"},
		{errdefs.ErrFailedPrecondition, 409, "failed_precondition"},
		{errdefs.ErrStaleGeneration, 409, "stale_generation"},
		{errdefs.ErrUnauthenticated, 401, "unauthenticated"},
		{errdefs.ErrPermissionDenied, 403, "permission_denied"},
		{errdefs.ErrQuotaExceeded, 507, "quota_exceeded"},
		{errdefs.ErrUnavailable, 503, "unavailable"},
		{errdefs.ErrIdempotencyReuse, 422, "idempotency_key_reused"},
		{errdefs.ErrCanceled, 499, "canceled"},
		{context.DeadlineExceeded, 504, "deadline_exceeded"},
		{errors.New("disk on fire"), 500, "internal"},
	} {
		t.Run(tc.code, func(t *testing.T) {
			t.Parallel()
			core, srv := newServer(t)
			err := fmt.Errorf("project %q: %w", "web", tc.kind)
			core.Projects.GetProjectFunc = func(context.Context, string) (types.Project, error) { return types.Project{}, err }
			r := do(t, srv, http.MethodGet, "/v1/projects/web", nil, nil)
			assert.Equal(t, tc.status, r.status)
			e := errorOf(t, r)
			assert.Equal(t, tc.code, e.Code)
			assert.Equal(t, err.Error(), e.Message)
		})
	}
}

type quotaError struct{ used, limit int64 }

func (e quotaError) Error() string { return fmt.Sprintf("stored bytes %d of %d", e.used, e.limit) }
func (e quotaError) Unwrap() error { return errdefs.ErrQuotaExceeded }
func (e quotaError) Details() map[string]any {
	return map[string]any{"used_bytes": e.used, "limit_bytes": e.limit}
}

func TestErrorDetails(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	core.Versions.SaveFunc = func(context.Context, string, types.SaveRequest, string) (types.Operation, error) {
		return types.Operation{}, fmt.Errorf("save: %w", quotaError{10, 5})
	}
	r := do(t, srv, http.MethodPost, "/v1/instances/i-1/save", nil, map[string]string{"X-Request-Id": "req-1"})
	assert.Equal(t, http.StatusInsufficientStorage, r.status)
	assert.JSONEq(t, `{"error": {"code": "quota_exceeded", "message": "save: stored bytes 10 of 5",
		"details": {"used_bytes": 10, "limit_bytes": 5}, "request_id": "req-1"}}`, string(r.body))
}

func TestLifecycleRoutesReachTheCore(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	for _, tc := range []struct {
		verb, body, call string
		args             []any
		state            types.InstanceState
	}{
		{"stop", "", "InstanceVerb", []any{"i-1", "stop"}, types.StateStopped},
		{"start", "", "InstanceVerb", []any{"i-1", "start"}, types.StateRunning},
		{"pause", "", "InstanceVerb", []any{"i-1", "pause"}, types.StatePaused},
		{"resume", "", "InstanceVerb", []any{"i-1", "resume"}, types.StateRunning},
		{"renew", `{"ttl": "30m"}`, "RenewInstance", []any{"i-1", "30m"}, types.StateRunning},
		{"renew", `{"ttl": "none"}`, "RenewInstance", []any{"i-1", "none"}, types.StateRunning},
	} {
		t.Run(tc.verb+tc.body, func(t *testing.T) {
			r := do(t, srv, http.MethodPost, "/v1/instances/i-1/"+tc.verb, strings.NewReader(tc.body), nil)
			require.Equal(t, http.StatusOK, r.status, "body %s", r.body)
			var in types.Instance
			require.NoError(t, json.Unmarshal(r.body, &in))
			assert.Equal(t, "i-1", in.ID)
			assert.Equal(t, tc.state, in.State)
			call, ok := core.LastCall(tc.call)
			require.True(t, ok)
			assert.Equal(t, tc.args, call.Args)
			assert.Equal(t, "t1", call.Principal.Tenant)
		})
	}
	r := do(t, srv, http.MethodPost, "/v1/instances/i-1/renew", strings.NewReader(`{"ttl": "1h"}`), nil)
	var in types.Instance
	require.NoError(t, json.Unmarshal(r.body, &in))
	require.NotNil(t, in.ExpiresAt)
	assert.Equal(t, apitest.Epoch.Add(time.Hour), in.ExpiresAt.UTC())

	r = do(t, srv, http.MethodPost, "/v1/instances/i-1/renew", strings.NewReader(`{"ttl": 5}`), nil)
	assert.Equal(t, http.StatusBadRequest, r.status)
}

func TestIllegalTransitionIs409WithState(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	core.Lifecycle.InstanceVerbFunc = func(_ context.Context, id, verb string) (types.Instance, error) {
		return types.Instance{}, errdefs.WithDetails(
			fmt.Errorf("instance %q is Paused, cannot %s: %w", id, verb, errdefs.ErrFailedPrecondition),
			map[string]any{"state": types.StatePaused})
	}
	for _, verb := range []string{"pause", "start"} {
		r := do(t, srv, http.MethodPost, "/v1/instances/i-1/"+verb, nil, nil)
		assert.Equal(t, http.StatusConflict, r.status)
		e := errorOf(t, r)
		assert.Equal(t, "failed_precondition", e.Code)
		assert.Equal(t, map[string]any{"state": "Paused"}, e.Details)
		assert.Contains(t, e.Message, "cannot "+verb)
	}
}

// Every plain verb of the list has its route; a verb the list does not
// hold is an unknown route (404 not_found, "no route ..."), and the core
// is not called.
func TestInstanceVerbRoutesFollowTheList(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	for _, v := range types.InstanceVerbs {
		r := do(t, srv, http.MethodPost, "/v1/instances/i-1/"+v.Name, nil, nil)
		require.Equal(t, http.StatusOK, r.status, "%s: body %s", v.Name, r.body)
		var in types.Instance
		require.NoError(t, json.Unmarshal(r.body, &in))
		assert.Equal(t, v.To, in.State, v.Name)
		call, ok := core.LastCall("InstanceVerb")
		require.True(t, ok)
		assert.Equal(t, []any{"i-1", v.Name}, call.Args)
	}
	before := len(core.Calls())
	for _, name := range []string{"reboot", "Stop", "stop%2Fx"} {
		r := do(t, srv, http.MethodPost, "/v1/instances/i-1/"+name, nil, nil)
		assert.Equal(t, http.StatusNotFound, r.status, name)
		e := errorOf(t, r)
		assert.Equal(t, "not_found", e.Code, name)
		assert.Contains(t, e.Message, "no route POST /v1/instances/i-1/", name)
	}
	for _, c := range core.Calls()[before:] {
		assert.NotEqual(t, "InstanceVerb", c.Method)
	}
}

func TestIdempotencyKeyReachesCreates(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	key := map[string]string{"Idempotency-Key": "k-1"}
	r := do(t, srv, http.MethodPost, "/v1/projects", strings.NewReader(`{"name":"web","base":"busybox"}`), key)
	require.Equal(t, http.StatusCreated, r.status, "body %s", r.body)
	call, _ := core.LastCall("CreateProject")
	assert.Equal(t, []any{types.CreateProjectRequest{Name: "web", Base: "busybox"}, "k-1"}, call.Args)

	r = do(t, srv, http.MethodPost, "/v1/projects/web/instances", strings.NewReader(`{"ttl":"1h"}`), key)
	require.Equal(t, http.StatusCreated, r.status, "body %s", r.body)
	call, _ = core.LastCall("CreateInstance")
	assert.Equal(t, []any{"web", types.CreateInstanceRequest{TTL: "1h"}, "k-1"}, call.Args)

	core.Instances.CreateInstanceFunc = func(context.Context, string, types.CreateInstanceRequest, string) (types.Instance, error) {
		return types.Instance{}, fmt.Errorf("idempotency key %q: %w", "k-1", errdefs.ErrIdempotencyReuse)
	}
	r = do(t, srv, http.MethodPost, "/v1/projects/web/instances", strings.NewReader(`{"ttl":"2h"}`), key)
	assert.Equal(t, http.StatusUnprocessableEntity, r.status)
	assert.Equal(t, "idempotency_key_reused", errorOf(t, r).Code)
}

func TestSave(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	r := do(t, srv, http.MethodPost, "/v1/instances/i-7/save", strings.NewReader(`{"message": "graphviz", "expected_current": 3}`),
		map[string]string{"Idempotency-Key": "key-42"})
	require.Equal(t, http.StatusAccepted, r.status, "body %s", r.body)
	var op types.Operation
	require.NoError(t, json.Unmarshal(r.body, &op))
	assert.Equal(t, types.OpKindSave, op.Kind)
	assert.Equal(t, types.OpRunning, op.State)
	assert.Equal(t, "/v1/operations/"+op.ID, r.header.Get("Location"))

	call, ok := core.LastCall("Save")
	require.True(t, ok)
	three := 3
	assert.Equal(t, []any{"i-7", types.SaveRequest{Message: "graphviz", ExpectedCurrent: &three}, "key-42"}, call.Args)
}

// Prefer: respond-async turns starting an instance into a restore
// operation; refusals stay synchronous errors.
func TestRestoreAsync(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	r := do(t, srv, http.MethodPost, "/v1/projects/web/instances", strings.NewReader(`{"version": 2, "ttl": "1h"}`),
		map[string]string{"Prefer": "wait=10, respond-async", "Idempotency-Key": "k-9"})
	require.Equal(t, http.StatusAccepted, r.status, "body %s", r.body)
	var op types.Operation
	require.NoError(t, json.Unmarshal(r.body, &op))
	assert.Equal(t, types.OpKindRestore, op.Kind)
	assert.Equal(t, "/v1/operations/"+op.ID, r.header.Get("Location"))
	assert.Equal(t, "respond-async", r.header.Get("Preference-Applied"))
	call, ok := core.LastCall("Restore")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.CreateInstanceRequest{Version: 2, TTL: "1h"}, "k-9"}, call.Args)
	_, ok = core.LastCall("CreateInstance")
	assert.False(t, ok, "no synchronous create")

	core.Instances.RestoreFunc = func(_ context.Context, p string, req types.CreateInstanceRequest, _ string) (types.Operation, error) {
		return types.Operation{}, fmt.Errorf("version %d of project %q: %w", req.Version, p, errdefs.ErrNotFound)
	}
	r = do(t, srv, http.MethodPost, "/v1/projects/web/instances", strings.NewReader(`{"version": 9}`),
		map[string]string{"Prefer": "respond-async"})
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, "not_found", errorOf(t, r).Code)
	assert.Empty(t, r.header.Get("Location"))
}

func TestRetentionAndGC(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	r := do(t, srv, http.MethodPut, "/v1/projects/web/retention", strings.NewReader(`{"keep_last": 3, "keep_newer_than": "72h"}`), nil)
	require.Equal(t, http.StatusOK, r.status, "body %s", r.body)
	call, ok := core.LastCall("SetRetention")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.Retention{KeepLast: 3, KeepNewerThan: "72h"}}, call.Args)
	var p types.Project
	require.NoError(t, json.Unmarshal(r.body, &p))
	require.NotNil(t, p.Retention)
	assert.Equal(t, 3, p.Retention.KeepLast)

	r = do(t, srv, http.MethodPut, "/v1/projects/web/retention", strings.NewReader(`{"keep_last": "three"}`), nil)
	assert.Equal(t, http.StatusBadRequest, r.status)

	r = do(t, srv, http.MethodPost, "/v1/admin/gc", strings.NewReader(`{"dry_run": true}`), map[string]string{"Idempotency-Key": "gc-1"})
	require.Equal(t, http.StatusAccepted, r.status, "body %s", r.body)
	var op types.Operation
	require.NoError(t, json.Unmarshal(r.body, &op))
	assert.Equal(t, types.OpKindGC, op.Kind)
	assert.Equal(t, "/v1/operations/"+op.ID, r.header.Get("Location"))
	call, ok = core.LastCall("GC")
	require.True(t, ok)
	assert.Equal(t, []any{types.GCRequest{DryRun: true}, "gc-1"}, call.Args)
}

func TestTenantAdminRoutes(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	r := do(t, srv, http.MethodPost, "/v1/admin/tenants/t2/tokens", strings.NewReader(`{}`), nil)
	require.Equal(t, http.StatusCreated, r.status, "body %s", r.body)
	call, _ := core.LastCall("CreateToken")
	assert.Equal(t, []any{"t2", types.CreateTokenRequest{}}, call.Args)

	r = do(t, srv, http.MethodPut, "/v1/admin/tenants/t2/quota", strings.NewReader(`{"max_instances": 3, "max_ttl": "8h"}`), nil)
	require.Equal(t, http.StatusOK, r.status, "body %s", r.body)
	call, _ = core.LastCall("SetQuota")
	assert.Equal(t, []any{"t2", types.Quota{MaxInstances: 3, MaxTTL: "8h"}}, call.Args)

	r = do(t, srv, http.MethodGet, "/v1/admin/tenants/t2/usage", nil, nil)
	require.Equal(t, http.StatusOK, r.status, "body %s", r.body)
	call, _ = core.LastCall("Usage")
	assert.Equal(t, []any{"t2"}, call.Args)
	r = do(t, srv, http.MethodGet, "/v1/usage", nil, nil)
	require.Equal(t, http.StatusOK, r.status, "body %s", r.body)
	call, _ = core.LastCall("Usage")
	assert.Equal(t, []any{""}, call.Args, "the caller's own tenant")
}

func TestSetCurrentConflict(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	core.Versions.SetCurrentFunc = func(_ context.Context, p string, req types.SetCurrentRequest) (types.Project, error) {
		return types.Project{}, fmt.Errorf("project %q: current is 4, not %d: %w", p, *req.ExpectedCurrent, errdefs.ErrConflict)
	}
	r := do(t, srv, http.MethodPost, "/v1/projects/web/current", strings.NewReader(`{"version": 2, "expected_current": 3}`), nil)
	assert.Equal(t, http.StatusConflict, r.status)
	assert.Equal(t, "conflict", errorOf(t, r).Code)
}

func TestRoutesReachTheCore(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	for _, tc := range []struct {
		method, path, body string
		status             int
		call               string
		args               []any
	}{
		{"GET", "/v1/info", "", 200, "Info", nil},
		{"GET", "/v1/images", "", 200, "ListImages", nil},
		{"POST", "/v1/projects", `{"name":"web","base":"busybox"}`, 201, "CreateProject", []any{types.CreateProjectRequest{Name: "web", Base: "busybox"}, ""}},
		{"GET", "/v1/projects", "", 200, "ListProjects", nil},
		{"GET", "/v1/projects/web", "", 200, "GetProject", []any{"web"}},
		{"DELETE", "/v1/projects/web", "", 204, "DeleteProject", []any{"web"}},
		{"POST", "/v1/projects/web/instances", `{"version":2,"ttl":"1h","retain":true}`, 201, "CreateInstance",
			[]any{"web", types.CreateInstanceRequest{Version: 2, TTL: "1h", Retain: true}, ""}},
		{"GET", "/v1/projects/web/instances", "", 200, "ListInstances", []any{"web"}},
		{"GET", "/v1/instances", "", 200, "ListInstances", []any{""}},
		{"GET", "/v1/instances/i-1", "", 200, "GetInstance", []any{"i-1"}},
		{"DELETE", "/v1/instances/i-1", "", 200, "DeleteInstance", []any{"i-1"}},
		{"POST", "/v1/instances/i-1/exec", `{"args":["ls","-l"],"env":["A=1"],"cwd":"/w"}`, 200, "Exec",
			[]any{"i-1", types.ExecRequest{Args: []string{"ls", "-l"}, Env: []string{"A=1"}, Cwd: "/w"}}},
		{"GET", "/v1/projects/web/versions", "", 200, "ListVersions", []any{"web"}},
		{"GET", "/v1/projects/web/versions/3", "", 200, "GetVersion", []any{"web", 3}},
		{"POST", "/v1/projects/web/current", `{"version":2}`, 200, "SetCurrent", []any{"web", types.SetCurrentRequest{Version: 2}}},
		{"POST", "/v1/projects/web/versions/3/pin", "", 200, "PinVersion", []any{"web", 3, true}},
		{"DELETE", "/v1/projects/web/versions/3/pin", "", 200, "PinVersion", []any{"web", 3, false}},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			r := do(t, srv, tc.method, tc.path, strings.NewReader(tc.body), nil)
			assert.Equal(t, tc.status, r.status, "body %s", r.body)
			call, ok := core.LastCall(tc.call)
			require.True(t, ok)
			assert.Equal(t, tc.args, call.Args)
		})
	}
}

func TestImportImage(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	big := bytes.Repeat([]byte("x"), 3<<20) // uploads are not held to the JSON limit
	r := do(t, srv, http.MethodPost, "/v1/images?name=busybox", bytes.NewReader(big), map[string]string{"Content-Type": "application/x-tar"})
	require.Equal(t, http.StatusCreated, r.status, "body %s", r.body)
	var img types.Image
	require.NoError(t, json.Unmarshal(r.body, &img))
	assert.Equal(t, "busybox", img.Name)
	assert.Equal(t, int64(len(big)), img.Size)
	call, _ := core.LastCall("ImportImage")
	assert.Equal(t, []any{"busybox", big}, call.Args)

	r = do(t, srv, http.MethodPost, "/v1/images", strings.NewReader("x"), nil)
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, errorOf(t, r).Message, "name is required")

	r = do(t, srv, http.MethodPost, "/v1/images?name=x", strings.NewReader("{}"), map[string]string{"Content-Type": "application/json"})
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, errorOf(t, r).Message, "tar stream")
}

// sseEvent is one parsed server-sent event.
type sseEvent struct {
	id, typ, data string
}

// readSSE reads events until the stream ends.
func readSSE(t *testing.T, body io.Reader) []sseEvent {
	t.Helper()
	var (
		out []sseEvent
		cur sseEvent
	)
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur != (sseEvent{}) {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.typ = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		default:
			t.Fatalf("unexpected SSE line %q", line)
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func openStream(t *testing.T, ctx context.Context, srv *httptest.Server, path string, header map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apitest.Token)
	req.Header.Set("Accept", "text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	return resp
}

func TestOperationEventStream(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	op := core.Operations.NewOperation("save", "i-1")
	core.Operations.AppendEvent(op.ID, "freeze", "froze the instance")
	core.Operations.AppendEvent(op.ID, "spool", "spooled 3 files")

	resp := openStream(t, context.Background(), srv, "/v1/operations/"+op.ID+"/events", nil)
	go func() {
		// Events that arrive while the client is streaming.
		time.Sleep(50 * time.Millisecond)
		core.Operations.AppendEvent(op.ID, "push", "pushed the layer")
		time.Sleep(50 * time.Millisecond)
		core.Operations.AppendEvent(op.ID, "commit", "version 2 is current")
		core.Operations.Finish(op.ID, types.OpSucceeded, types.SaveResult{Project: "p", Version: 2, Current: true}, nil)
	}()
	events := readSSE(t, resp.Body) // returns only when the server ends the stream

	require.Len(t, events, 5)
	for i, typ := range []string{"freeze", "spool", "push", "commit"} {
		assert.Equal(t, strconv.Itoa(i+1), events[i].id)
		assert.Equal(t, typ, events[i].typ)
		var ev types.Event
		require.NoError(t, json.Unmarshal([]byte(events[i].data), &ev))
		assert.Equal(t, i+1, ev.Seq)
	}
	end := events[4]
	assert.Equal(t, api.SSEEventEnd, end.typ)
	assert.Empty(t, end.id, "the end event must not move the client's cursor")
	var final types.Operation
	require.NoError(t, json.Unmarshal([]byte(end.data), &final))
	assert.Equal(t, types.OpSucceeded, final.State)
	assert.JSONEq(t, `2`, string(mustField(t, final.Result, "version")))
}

func mustField(t *testing.T, raw json.RawMessage, field string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m))
	return m[field]
}

func TestOperationEventStreamResume(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	op := core.Operations.NewOperation("save", "i-1")
	for i := 1; i <= 5; i++ {
		core.Operations.AppendEvent(op.ID, "step", fmt.Sprintf("step %d", i))
	}
	core.Operations.Finish(op.ID, types.OpFailed, nil, &types.OpError{Code: "unavailable", Message: "registry down"})

	for name, header := range map[string]map[string]string{
		"Last-Event-ID":            {"Last-Event-ID": "3"},
		"after":                    nil,
		"header wins over query ?": {"Last-Event-ID": "3"},
	} {
		t.Run(name, func(t *testing.T) {
			path := "/v1/operations/" + op.ID + "/events"
			switch name {
			case "after":
				path += "?after=3"
			case "header wins over query ?":
				path += "?after=1"
			}
			events := readSSE(t, openStream(t, context.Background(), srv, path, header).Body)
			var ids []string
			for _, e := range events {
				ids = append(ids, e.id)
			}
			assert.Equal(t, []string{"4", "5", ""}, ids)
			assert.Equal(t, api.SSEEventEnd, events[2].typ)
			assert.Contains(t, events[2].data, `"registry down"`)
		})
	}
}

func TestOperationEventsAsJSON(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	op := core.Operations.NewOperation("save", "i-1")
	for i := 1; i <= 3; i++ {
		core.Operations.AppendEvent(op.ID, "step", fmt.Sprintf("step %d", i))
	}
	for _, tc := range []struct {
		path   string
		header map[string]string
		want   []int
	}{
		{"/events", map[string]string{"Accept": "application/json"}, []int{1, 2, 3}},
		{"/events?after=1", map[string]string{"Accept": "application/json"}, []int{2, 3}},
		{"/events?wait=false&after=2", nil, []int{3}},
		{"/events?after=3", map[string]string{"Accept": "application/json"}, []int{}},
	} {
		r := do(t, srv, http.MethodGet, "/v1/operations/"+op.ID+tc.path, nil, tc.header)
		require.Equal(t, http.StatusOK, r.status, "body %s", r.body)
		var evs []types.Event
		require.NoError(t, json.Unmarshal(r.body, &evs))
		require.NotNil(t, evs, "[] not null")
		seqs := []int{}
		for _, e := range evs {
			seqs = append(seqs, e.Seq)
		}
		assert.Equal(t, tc.want, seqs, tc.path)
	}
}

func TestOperationEventStreamErrors(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	r := do(t, srv, http.MethodGet, "/v1/operations/op-missing/events", nil, map[string]string{"Accept": "text/event-stream"})
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, "not_found", errorOf(t, r).Code)

	op := core.Operations.NewOperation("save", "i-1")
	for _, h := range []map[string]string{{"Last-Event-ID": "x"}, {"Last-Event-ID": "-1"}} {
		r = do(t, srv, http.MethodGet, "/v1/operations/"+op.ID+"/events", nil, h)
		assert.Equal(t, http.StatusBadRequest, r.status)
		assert.Contains(t, errorOf(t, r).Message, "Last-Event-ID")
	}
	r = do(t, srv, http.MethodGet, "/v1/operations/"+op.ID+"/events?after=two", nil, nil)
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Contains(t, errorOf(t, r).Message, "after")
}

func TestOperationEventStreamDisconnectKeepsOperation(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	op := core.Operations.NewOperation("save", "i-1")
	core.Operations.AppendEvent(op.ID, "step", "one")

	ctx, cancel := context.WithCancel(context.Background())
	resp := openStream(t, ctx, srv, "/v1/operations/"+op.ID+"/events", nil)
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "id: 1\n", line)
	cancel()

	// The handler stops polling once the client is gone.
	require.Eventually(t, func() bool {
		n := len(core.Calls())
		time.Sleep(50 * time.Millisecond)
		return len(core.Calls()) == n
	}, 2*time.Second, 10*time.Millisecond)
	_, canceled := core.LastCall("CancelOperation")
	assert.False(t, canceled)
	r := do(t, srv, http.MethodGet, "/v1/operations/"+op.ID, nil, nil)
	require.Equal(t, http.StatusOK, r.status)
	assert.Contains(t, string(r.body), `"state":"running"`)
}

func TestCancelOperation(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	op := core.Operations.NewOperation("save", "i-1")
	r := do(t, srv, http.MethodDelete, "/v1/operations/"+op.ID, nil, nil)
	require.Equal(t, http.StatusAccepted, r.status)
	var got types.Operation
	require.NoError(t, json.Unmarshal(r.body, &got))
	assert.Equal(t, types.OpCanceled, got.State)
}

func TestAccessLog(t *testing.T) {
	t.Parallel()
	var buf syncbuf.Buffer
	h, err := api.New(apitest.New().Parts(), api.WithAccessLog(&buf))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()
	do(t, srv, http.MethodGet, "/healthz", nil, nil)
	assert.Contains(t, buf.String(), "/healthz")
}

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opt  api.Option
		want string
	}{
		"nil access log":      {api.WithAccessLog(nil), "access log writer is nil"},
		"nil error log":       {api.WithErrorLog(nil), "error log writer is nil"},
		"zero poll interval":  {api.WithEventPollInterval(0), "event poll interval 0s: must be positive"},
		"negative keep-alive": {api.WithKeepAlive(-time.Second), "keep-alive interval -1s: must be positive"},
	} {
		t.Run(name, func(t *testing.T) {
			h, err := api.New(apitest.New().Parts(), api.WithErrorLog(io.Discard), tc.opt)
			assert.Nil(t, h)
			require.Error(t, err)
			assert.Equal(t, "api: "+tc.want, err.Error())
		})
	}
}
