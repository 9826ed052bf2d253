package main

import (
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProjectNetwork(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "project", "create", "web", "--base", "busybox", "--egress", "none", "--isolate-instances")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok := core.LastCall("CreateProject")
	require.True(t, ok)
	req := call.Args[0].(types.CreateProjectRequest)
	assert.Equal(t, "none", req.Egress)
	assert.True(t, req.IsolateInstances)

	r = envctl(t, env, nil, "project", "network", "web", "--egress", "allow:10.0.0.0/8,example.org")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "allow:10.0.0.0/8,example.org")
	call, ok = core.LastCall("SetProjectNetwork")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.ProjectNetwork{Egress: "allow:10.0.0.0/8,example.org"}}, call.Args)
}
