package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

// An exported spec, YAML or JSON, is what build -f takes back: the same
// request reaches the server.
func TestSpecExportRoundTripsThroughBuild(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	for _, format := range []string{"yaml", "json"} {
		r := envctl(t, env, nil, "spec", "export", "web", "3", "--format", format)
		require.Equal(t, 0, r.code, r.stderr)
		call, _ := core.LastCall("VersionSpec")
		assert.Equal(t, []any{"web", 3}, call.Args)
		if format == "yaml" {
			assert.Contains(t, r.stdout, "# not in the spec: /etc/ld.so.cache: written by ldconfig")
		} else {
			assert.Contains(t, r.stderr, "not in the spec: /etc/ld.so.cache")
		}

		b := envctl(t, env, strings.NewReader(r.stdout), "build", "web", "-f", "-", "--no-wait")
		require.Equal(t, 0, b.code, b.stderr)
		call, _ = core.LastCall("Build")
		req := call.Args[1].(types.BuildRequest)
		assert.Equal(t, []string{"tree=2.1.0-1"}, req.Packages, format)
		assert.Equal(t, []types.BuildFile{{Path: "/etc/app.conf", Content: "a: 1\n# two lines\n", Mode: "0644"}}, req.Files, format)
		assert.Equal(t, map[string]string{"YES": "no"}, req.Env, format)
		assert.Equal(t, []types.BuildStep{{Args: []string{"echo", `a;b $(x) 'q' "d"`}}}, req.Run, format)
	}

	// Without N the current version is exported.
	r := envctl(t, env, nil, "spec", "export", "web")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ := core.LastCall("VersionSpec")
	assert.Equal(t, []any{"web", 1}, call.Args)

	// -o json prints the whole answer.
	r = envctl(t, env, nil, "-o", "json", "spec", "export", "web", "2")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"declared": true`)
}

func TestBuildSpecFileInYAML(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	spec := `
manager: apk
packages: [jq]
files:
  - path: /etc/motd
    content: |
      hello
    mode: "0600"
run:
  - args: [sh, -c, "echo $HOME"]
  - args: ["echo hi > /x"]
    shell: true
    dir: /srv
validate: [[jq, --version]]
`
	r := envctl(t, env, strings.NewReader(spec), "build", "web", "-f", "-", "--no-wait")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ := core.LastCall("Build")
	req := call.Args[1].(types.BuildRequest)
	assert.Equal(t, "apk", req.Manager)
	assert.Equal(t, "hello\n", req.Files[0].Content)
	assert.Equal(t, types.BuildStep{Args: []string{"echo hi > /x"}, Shell: true, Dir: "/srv"}, req.Run[1])
	assert.Equal(t, [][]string{{"jq", "--version"}}, req.Validate)

	for name, bad := range map[string]string{
		"unknown field":  "manager: apt\npkgs: [tree]\n",
		"unquoted mode":  "files: [{path: /a, mode: 0644}]\n",
		"not a document": "- [\n",
	} {
		r := envctl(t, env, strings.NewReader(bad), "build", "web", "-f", "-")
		assert.Equal(t, 2, r.code, "%s: %s", name, r.stderr)
	}
}

func TestOpLogsAndMigrateMode(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	r := envctl(t, env, nil, "op", "logs", "op-1")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "log of op-1\n", r.stdout)

	r = envctl(t, env, nil, "migrate", "web", "--base", "b2", "--mode", "rebuild", "--no-wait")
	require.Equal(t, 0, r.code, r.stderr)
	call, _ := core.LastCall("Migrate")
	assert.Equal(t, "rebuild", call.Args[1].(types.MigrateRequest).Mode)
}
