package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

func TestProjectIdle(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "project", "create", "web", "--base", "busybox", "--idle-after", "30m", "--idle-action", "stop")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok := core.LastCall("CreateProject")
	require.True(t, ok)
	req := call.Args[0].(types.CreateProjectRequest)
	assert.Equal(t, &types.IdleSetting{After: "30m", Action: "stop"}, req.Idle)

	r = envctl(t, env, nil, "project", "idle", "web", "--after", "2h", "--action", "hibernate")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "after 2h, hibernate")
	call, ok = core.LastCall("SetProjectIdle")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.IdleSetting{After: "2h", Action: "hibernate"}}, call.Args)

	r = envctl(t, env, nil, "admin", "quota", "acme", "--max-idle-after", "4h")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok = core.LastCall("SetQuota")
	require.True(t, ok)
	assert.Equal(t, "4h", call.Args[1].(types.Quota).MaxIdleAfter)
}

func TestExecWakeFlag(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "exec", "--wake", "--no-stdin", "web-1", "--", "true")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok := core.LastCall("Exec")
	require.True(t, ok)
	assert.True(t, call.Args[1].(types.ExecRequest).Wake)
}

// show tells how long the instance has been idle and when its action runs.
func TestShowIdle(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	since := time.Now().Add(-90 * time.Second)
	at := since.Add(30 * time.Minute)
	core.Instances.GetInstanceFunc = func(ctx context.Context, id string) (types.Instance, error) {
		return types.Instance{ID: id, Project: "web", State: types.StateRunning, IdleAfter: "30m0s", IdleAction: "hibernate",
			IdleSince: &since, IdleActionAt: &at}, nil
	}
	r := envctl(t, env, nil, "show", "web-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `IDLE:\s+1m3\ds \(since `, r.stdout)
	assert.Regexp(t, `IDLE ACTION:\s+hibernate after 30m0s idle, at .* \(in 28m[23]\ds\)`, r.stdout)
}

// show tells whether a hibernated instance keeps its processes, or why
// the idle action hibernate-memory kept its files only.
func TestShowHibernatedWithMemory(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	core.Instances.GetInstanceFunc = func(ctx context.Context, id string) (types.Instance, error) {
		if id == "web-1" {
			return types.Instance{ID: id, Project: "web", State: types.StateStopped, HibernatedVersion: 4, HibernatedCheckpoint: 2}, nil
		}
		return types.Instance{ID: id, Project: "web", State: types.StateStopped, HibernatedVersion: 5, MemoryNotKept: "class"}, nil
	}
	r := envctl(t, env, nil, "show", "web-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `HIBERNATED AS:\s+version 4 with its processes in checkpoint 2`, r.stdout)
	assert.NotContains(t, r.stdout, "MEMORY NOT KEPT")
	r = envctl(t, env, nil, "show", "web-2")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `HIBERNATED AS:\s+version 5 \(start brings it back`, r.stdout)
	assert.Regexp(t, `MEMORY NOT KEPT:\s+class `, r.stdout)
}

func TestProjectPool(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "project", "pool", "web", "3")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "3 started instances of the current version kept ready")
	call, ok := core.LastCall("SetProjectPool")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.PoolSetting{Size: 3}}, call.Args)
	r = envctl(t, env, nil, "project", "pool", "web", "many")
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "SIZE")
}
