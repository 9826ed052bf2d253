package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/errdefs"
)

func TestLifecycleVerbs(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	for _, tc := range []struct {
		args  []string
		call  string
		want  []any
		state types.InstanceState
	}{
		{[]string{"stop", "i-1"}, "InstanceVerb", []any{"i-1", "stop"}, "Stopped"},
		{[]string{"start", "i-1"}, "InstanceVerb", []any{"i-1", "start"}, "Running"},
		{[]string{"pause", "i-1"}, "InstanceVerb", []any{"i-1", "pause"}, "Paused"},
		{[]string{"resume", "i-1"}, "InstanceVerb", []any{"i-1", "resume"}, "Running"},
		{[]string{"renew", "i-1", "--ttl", "45m"}, "RenewInstance", []any{"i-1", "45m"}, "Running"},
		{[]string{"renew", "i-1", "--ttl", "none"}, "RenewInstance", []any{"i-1", "none"}, "Running"},
		{[]string{"hibernate", "i-1"}, "HibernateInstance", []any{"i-1"}, "Stopped"},
		{[]string{"hibernate", "i-1", "--memory"}, "HibernateInstance", []any{"i-1", types.HibernateRequest{Memory: true}}, "Stopped"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := envctl(t, env, nil, append([]string{"-o", "json"}, tc.args...)...)
			require.Equal(t, 0, r.code, r.stderr)
			var in types.Instance
			require.NoError(t, json.Unmarshal([]byte(r.stdout), &in), r.stdout)
			assert.Equal(t, tc.state, in.State)
			call, ok := core.LastCall(tc.call)
			require.True(t, ok)
			assert.Equal(t, tc.want, call.Args)
		})
	}

	r := envctl(t, env, nil, "pause", "i-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, []string{"i-1", "Paused"}, strings.Fields(strings.Split(r.stdout, "\n")[1])[:2])

	r = envctl(t, env, nil, "renew", "i-1") // --ttl is required
	assert.Equal(t, 2, r.code, r.stderr)
}

func TestIllegalTransitionShowsState(t *testing.T) {
	t.Parallel()
	_, env := server(t, func(core *apitest.Fakes) {
		core.Lifecycle.InstanceVerbFunc = func(_ context.Context, id, _ string) (types.Instance, error) {
			return types.Instance{}, errdefs.WithDetails(fmt.Errorf("instance %q is Running, resume needs Paused: %w", id, errdefs.ErrFailedPrecondition),
				map[string]any{"state": "Running"})
		}
	})
	r := envctl(t, env, nil, "resume", "i-1")
	assert.Equal(t, 1, r.code)
	assert.Equal(t, "envctl: instance \"i-1\" is Running, resume needs Paused: failed precondition (failed_precondition, state: Running)\n", r.stderr)
}

func TestIdempotencyKeyFlags(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "up", "web", "--idempotency-key", "k-up")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ := core.LastCall("CreateInstance")
	assert.Equal(t, []any{"web", types.CreateInstanceRequest{}, "k-up"}, call.Args)

	r = envctl(t, env, nil, "project", "create", "web", "--base", "busybox", "--idempotency-key", "k-p")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("CreateProject")
	assert.Equal(t, []any{types.CreateProjectRequest{Name: "web", Base: "busybox"}, "k-p"}, call.Args)
}

func TestShowPrintsAddressAndExpiry(t *testing.T) {
	t.Parallel()
	expires := time.Now().Add(2 * time.Hour)
	_, env := server(t, func(core *apitest.Fakes) {
		core.Instances.GetInstanceFunc = func(_ context.Context, id string) (types.Instance, error) {
			return types.Instance{ID: id, Project: "web", State: "Running", Address: "10.88.0.7", ExpiresAt: &expires}, nil
		}
	})
	r := envctl(t, env, nil, "show", "i-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `ADDRESS:\s+10\.88\.0\.7\n`, r.stdout)
	assert.Regexp(t, `EXPIRES:\s+`+expires.Local().Format("2006-01-02 15:04:05")+` \(in (1h59m|2h0m)`, r.stdout)

	r = envctl(t, env, nil, "-o", "json", "show", "i-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"address": "10.88.0.7"`)
	assert.Contains(t, r.stdout, `"expires_at": "`)
}
