package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/api/types"
)

func TestJoinTokenCommand(t *testing.T) {
	t.Parallel()
	core, env := server(t)

	r := envctl(t, env, nil, "nodes", "join-token", "--ttl", "30m")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ := core.LastCall("CreateJoinToken")
	assert.Equal(t, []any{types.JoinTokenRequest{TTL: "30m"}}, call.Args)
	assert.Contains(t, r.stdout, "envd serve --join http://127.0.0.1:1 --token "+apitest.JoinToken)
	assert.Contains(t, r.stdout, "# secret:")

	r = envctl(t, env, nil, "nodes", "join-token", "-o", "json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"token": "`+apitest.JoinToken+`"`)
}
