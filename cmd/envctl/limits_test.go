package main

import (
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLimitFlags(t *testing.T) {
	t.Parallel()
	core, env := server(t)

	r := envctl(t, env, nil, "project", "create", "web", "--base", "busybox", "--memory", "2G", "--pids", "512",
		"--cpus", "1.5", "--cpu-weight", "200", "--io-weight", "300", "--disk", "10G")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok := core.LastCall("CreateProject")
	require.True(t, ok)
	req := call.Args[0].(types.CreateProjectRequest)
	assert.Equal(t, &types.Limits{MemoryBytes: 2 << 30, Pids: 512, CPUs: 1.5, CPUWeight: 200, IOWeight: 300, DiskBytes: 10 << 30}, req.Limits)

	r = envctl(t, env, nil, "project", "create", "plain", "--base", "busybox")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("CreateProject")
	assert.Nil(t, call.Args[0].(types.CreateProjectRequest).Limits, "no flag: the node's defaults")

	r = envctl(t, env, nil, "project", "limits", "web", "--memory", "1G", "--allow-privilege-escalation")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok = core.LastCall("SetProjectLimits")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.Limits{MemoryBytes: 1 << 30, AllowPrivilegeEscalation: true}}, call.Args)
	assert.Contains(t, r.stdout, "memory 1.0 GiB")

	r = envctl(t, env, nil, "project", "limits", "web", "--memory", "lots")
	assert.Equal(t, 2, r.code, "a bad size is a usage error")
	r = envctl(t, env, nil, "project", "limits", "web", "--cpus", "many")
	assert.Equal(t, 2, r.code, "a bad CPU count is a usage error")

	r = envctl(t, env, nil, "admin", "quota", "t3", "--max-memory", "8G", "--max-pids", "1024", "--max-cpus", "2", "--max-disk", "50G")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok = core.LastCall("SetQuota")
	require.True(t, ok)
	assert.Equal(t, []any{"t3", types.Quota{MaxMemoryBytes: 8 << 30, MaxPids: 1024, MaxCPUs: 2, MaxDiskBytes: 50 << 30}}, call.Args)
	assert.Contains(t, r.stdout, "MAX MEMORY:")
}
