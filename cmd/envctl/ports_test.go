package main

import (
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseForward(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		arg  string
		want forward
		bad  bool
	}{
		{arg: "5432", want: forward{5432, 5432}},
		{arg: "8080:3000", want: forward{8080, 3000}},
		{arg: ":3000", want: forward{0, 3000}},
		{arg: "0:3000", want: forward{0, 3000}},
		{arg: "0", bad: true},
		{arg: "8080:", bad: true},
		{arg: "70000", bad: true},
		{arg: "x:80", bad: true},
		{arg: "80:x", bad: true},
		{arg: "1:2:3", bad: true},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			got, err := parseForward(tc.arg)
			if tc.bad {
				var ue usageError
				assert.ErrorAs(t, err, &ue)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestPortCommands(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "ports", "web-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "8080")
	assert.Contains(t, r.stdout, "127.0.0.1")

	r = envctl(t, env, nil, "preview", "web-1", "3000", "--ttl", "2h")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "preview-web-1-3000")
	call, ok := core.LastCall("PreviewToken")
	require.True(t, ok)
	assert.Equal(t, []any{"web-1", 3000, types.PreviewTokenRequest{TTL: "2h"}}, call.Args)

	r = envctl(t, env, nil, "public-ports", "web", "3000,8080", "9000")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok = core.LastCall("SetProjectPorts")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.ProjectPorts{Public: []int{3000, 8080, 9000}}}, call.Args)
	assert.Contains(t, r.stdout, "3000, 8080, 9000")

	r = envctl(t, env, nil, "public-ports", "web", "--clear")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ = core.LastCall("SetProjectPorts")
	assert.Equal(t, []any{"web", types.ProjectPorts{Public: []int{}}}, call.Args)

	r = envctl(t, env, nil, "port-forward", "web-1")
	assert.Equal(t, exitUsage, r.code)
	r = envctl(t, env, nil, "port-forward", "web-1", "99999")
	assert.Equal(t, exitUsage, r.code)
}
