package main

import (
	"os"
	"path/filepath"
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

// build -f Dockerfile sends the Dockerfile, its arguments and target, and
// the uploaded CONTEXT_DIR; the spec's own flags do not mix with it.
func TestBuildDockerfile(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	dir := t.TempDir()
	df := filepath.Join(dir, "Dockerfile")
	require.NoError(t, os.WriteFile(df, []byte("FROM fixture AS build\nRUN echo hi\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "greet.sh"), []byte("echo hi\n"), 0o755))
	r := envctl(t, env, nil, "build", "web", "-f", df, "--build-arg", "A=1", "--build-arg", "B=x=y", "--target", "build", dir, "--no-wait")
	require.Equal(t, 0, r.code, r.stderr)
	_, uploaded := core.LastCall("UploadBuildContext")
	assert.True(t, uploaded, "CONTEXT_DIR is uploaded")
	call, _ := core.LastCall("Build")
	req := call.Args[1].(types.BuildRequest)
	require.NotNil(t, req.Dockerfile)
	assert.Equal(t, types.DockerfileBuild{Content: "FROM fixture AS build\nRUN echo hi\n", Args: map[string]string{"A": "1", "B": "x=y"}, Target: "build"}, *req.Dockerfile)
	assert.Equal(t, "sha256:1111111111111111111111111111111111111111111111111111111111111111", req.Context)
	assert.Empty(t, req.Packages)

	for _, bad := range [][]string{
		{"build", "web", "-f", df, "--apt", "tree"},
		{"build", "web", "--apt", "tree", "--target", "build"},
		{"build", "web", "--apt", "tree", dir},
	} {
		r := envctl(t, env, nil, bad...)
		assert.NotEqual(t, 0, r.code, "%q", bad)
	}
}

// build --devcontainer translates the file on the client's side: the
// project's volume and forwarded ports are set, the context (with the
// generated directory) uploaded, and a Dockerfile build asked for; a
// property envd does not do is refused by name before any request.
func TestBuildDevcontainer(t *testing.T) {
	t.Parallel()
	core, env := server(t)
	ws := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(ws, ".devcontainer"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(ws, ".devcontainer", "devcontainer.json"), []byte(`{
		// comments and trailing commas
		"build": {"dockerfile": "Dockerfile", "context": "..",},
		"forwardPorts": [3000], "portsAttributes": {"3000": {"label": "web"}},
		"mounts": ["source=cache,target=/cache,type=volume"],
		"postStartCommand": "echo started",
	}`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(ws, ".devcontainer", "Dockerfile"), []byte("FROM fixture\n"), 0o644))
	r := envctl(t, env, nil, "build", "web", "--devcontainer", ws, "--no-wait")
	require.Equal(t, 0, r.code, r.stderr)
	call, ok := core.LastCall("AddVolume")
	require.True(t, ok, "the mount is added as a project volume")
	assert.Equal(t, "cache:/cache", call.Args[1].(types.AddVolumeRequest).Spec)
	call, ok = core.LastCall("SetProjectPorts")
	require.True(t, ok, "forwardPorts set the project's forwarded ports")
	assert.Equal(t, []types.ForwardedPort{{Port: 3000, Label: "web"}}, call.Args[1].(types.ProjectPorts).Forwarded)
	_, uploaded := core.LastCall("UploadBuildContext")
	assert.True(t, uploaded)
	call, _ = core.LastCall("Build")
	req := call.Args[1].(types.BuildRequest)
	require.NotNil(t, req.Dockerfile)
	assert.Contains(t, req.Dockerfile.Content, "FROM fixture AS envd_devcontainer_build\n")
	assert.Contains(t, req.Dockerfile.Content, `COPY --chmod=0755 [".envd-devcontainer/post-start.sh", "/etc/envd/post-start"]`)

	bad := filepath.Join(t.TempDir(), "devcontainer.json")
	require.NoError(t, os.WriteFile(bad, []byte(`{"image": "fixture", "runArgs": ["--cap-add=SYS_ADMIN"]}`), 0o644))
	r = envctl(t, env, nil, "build", "other", "-f", bad, "--no-wait")
	assert.NotEqual(t, 0, r.code)
	assert.Contains(t, r.stderr, "runArgs")
	call, _ = core.LastCall("Build")
	assert.Equal(t, "web", call.Args[0], "the refused file asked for no build")

	// Docker inside: the project's docker setting is turned on before the
	// build (the node refuses it unless the class is gvisor: e2e).
	priv := filepath.Join(t.TempDir(), "devcontainer.json")
	require.NoError(t, os.WriteFile(priv, []byte(`{"image": "fixture", "privileged": true}`), 0o644))
	r = envctl(t, env, nil, "build", "dind", "-f", priv, "--no-wait")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "docker turned on for project dind")
	call, ok = core.LastCall("SetProjectDocker")
	require.True(t, ok)
	assert.Equal(t, "dind", call.Args[0])
	assert.Equal(t, types.ProjectDocker{Docker: true}, call.Args[1])
}
