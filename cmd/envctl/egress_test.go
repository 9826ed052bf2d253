package main

import (
	"strings"
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEgressLogAndSecrets(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "egress", "log", "web", "--limit", "5")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "other.example")
	assert.Contains(t, r.stdout, "name not allowed")
	call, ok := core.LastCall("EgressLog")
	require.True(t, ok)
	assert.Equal(t, []any{"web", 5, int64(0)}, call.Args)

	r = envctl(t, env, strings.NewReader("s3cr3t\n"), "secret", "set", "api-key", "--stdin")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok = core.LastCall("SetSecret")
	require.True(t, ok)
	assert.Equal(t, []any{"api-key", types.SetSecretRequest{Value: "s3cr3t"}}, call.Args, "the value without its newline")
	assert.NotContains(t, r.stdout, "s3cr3t")

	r = envctl(t, env, nil, "secret", "set", "api-key")
	assert.NotEqual(t, 0, r.code, "a value is required")

	r = envctl(t, env, nil, "secret", "bind", "api-key", "--host", "api.example.org", "--header", "X-Api-Key", "--format", "{{value}}")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok = core.LastCall("BindSecret")
	require.True(t, ok)
	assert.Equal(t, []any{"api-key", types.SecretBinding{Host: "api.example.org", Header: "X-Api-Key", Format: "{{value}}"}}, call.Args)
	r = envctl(t, env, nil, "secret", "bind", "api-key", "--host", "api.example.org", "--scheme", "https")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok = core.LastCall("BindSecret")
	require.True(t, ok)
	assert.Equal(t, []any{"api-key", types.SecretBinding{Host: "api.example.org", Scheme: "https"}}, call.Args)

	r = envctl(t, env, nil, "secret", "ls")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "api.example.org")
	r = envctl(t, env, nil, "secret", "rm", "api-key")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok = core.LastCall("DeleteSecret")
	require.True(t, ok)
	assert.Equal(t, []any{"api-key"}, call.Args)
}
