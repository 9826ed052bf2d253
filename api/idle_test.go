package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

func TestSetProjectIdle(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	r := do(t, srv, http.MethodPut, "/v1/projects/web/idle", strings.NewReader(`{"after": "30m", "action": "hibernate"}`), nil)
	require.Equal(t, http.StatusOK, r.status, "body %s", r.body)
	call, ok := core.LastCall("SetProjectIdle")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.IdleSetting{After: "30m", Action: "hibernate"}}, call.Args)
	var p types.Project
	require.NoError(t, json.Unmarshal(r.body, &p))
	assert.Equal(t, &types.IdleSetting{After: "30m", Action: "hibernate"}, p.Idle)

	r = do(t, srv, http.MethodPut, "/v1/projects/web/idle", strings.NewReader(`{"after": 30}`), nil)
	assert.Equal(t, http.StatusBadRequest, r.status)
}

// wakingErr is what the core answers for an instance that did not run in
// time.
type wakingErr struct{}

func (wakingErr) Error() string             { return `instance "p-1" is waking (Pending); retry in 2s` }
func (wakingErr) Unwrap() error             { return errdefs.ErrWaking }
func (wakingErr) RetryAfter() time.Duration { return 2 * time.Second }
func (wakingErr) Details() map[string]any {
	return map[string]any{"state": "Pending", "retry_after_seconds": 2}
}

// An exec with wake passes the client's Prefer wait to the core, and a
// waking answer is 503 waking with Retry-After, on the WebSocket before
// the upgrade.
func TestExecWake(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	var wait time.Duration
	var hasWait bool
	core.Exec.ExecFunc = func(ctx context.Context, id string, req types.ExecRequest) (types.ExecResult, error) {
		wait, hasWait = types.WakeWait(ctx)
		if req.Wake {
			return types.ExecResult{}, wakingErr{}
		}
		return types.ExecResult{}, nil
	}
	r := do(t, srv, http.MethodPost, "/v1/instances/p-1/exec", strings.NewReader(`{"args": ["true"], "wake": true}`), map[string]string{"Prefer": "wait=0"})
	require.Equal(t, http.StatusServiceUnavailable, r.status, "body %s", r.body)
	assert.Equal(t, "2", r.header.Get("Retry-After"))
	var eb types.ErrorBody
	require.NoError(t, json.Unmarshal(r.body, &eb))
	assert.Equal(t, "waking", eb.Error.Code)
	assert.Equal(t, "Pending", eb.Error.Details["state"])
	require.True(t, hasWait)
	assert.Zero(t, wait)

	do(t, srv, http.MethodPost, "/v1/instances/p-1/exec", strings.NewReader(`{"args": ["true"]}`), nil)
	assert.False(t, hasWait, "no Prefer: the node's wake wait")

	core.Exec.WakeInstanceFunc = func(ctx context.Context, id string) (types.Instance, error) { return types.Instance{}, wakingErr{} }
	r = do(t, srv, http.MethodGet, "/v1/instances/p-1/exec/ws?cmd=sh&wake=1", nil,
		map[string]string{"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="})
	require.Equal(t, http.StatusServiceUnavailable, r.status, "a plain answer before the upgrade: %s", r.body)
	assert.Equal(t, "2", r.header.Get("Retry-After"))
	_, ok := core.LastCall("ExecStream")
	assert.False(t, ok, "nothing ran")

	r = do(t, srv, http.MethodGet, "/v1/instances/p-1/exec/ws?cmd=sh&wake=maybe", nil, map[string]string{"Upgrade": "websocket"})
	assert.Equal(t, http.StatusBadRequest, r.status)
}

// POST /v1/instances/{i}/hibernate takes an optional body: none (or {})
// is the disk hibernation of a stopped retained instance, {"memory": true}
// keeps its processes; an unknown field is 400.
func TestHibernateWithMemoryOption(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	r := do(t, srv, http.MethodPost, "/v1/instances/p-1/hibernate", nil, nil)
	require.Equal(t, http.StatusOK, r.status, "body %s", r.body)
	call, ok := core.LastCall("HibernateInstance")
	require.True(t, ok)
	assert.Equal(t, []any{"p-1"}, call.Args)

	r = do(t, srv, http.MethodPost, "/v1/instances/p-1/hibernate", strings.NewReader(`{"memory": true}`), nil)
	require.Equal(t, http.StatusOK, r.status, "body %s", r.body)
	call, ok = core.LastCall("HibernateInstance")
	require.True(t, ok)
	assert.Equal(t, []any{"p-1", types.HibernateRequest{Memory: true}}, call.Args)
	var in types.Instance
	require.NoError(t, json.Unmarshal(r.body, &in))
	assert.Equal(t, 3, in.HibernatedCheckpoint)

	r = do(t, srv, http.MethodPost, "/v1/instances/p-1/hibernate", strings.NewReader(`{"memroy": true}`), nil)
	assert.Equal(t, http.StatusBadRequest, r.status, "body %s", r.body)
}
