package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/builder/devcontainer/devcontainertest"
)

// runEnvctl runs the envctl binary against the test node; it answers
// stdout, stderr and the exit code.
func runEnvctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := commandContext(ctx(t), buildEnvctl(t), args...)
	cmd.Env = append(os.Environ(), "ENVD_URL="+env.node.URL, "ENVD_TOKEN="+env.node.Token)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), stderr.String(), code
}

// writeTree writes files (relative paths) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
}

// A devcontainer.json written by hand, with a Dockerfile build, a feature
// served by a registry the test runs on loopback (envctl fetches it),
// containerEnv, postCreateCommand, postStartCommand, forwardPorts and a
// volume mount: an instance of the version shows each.
func TestRootDevcontainerBuild(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := newProject(t, "devcontainer")
	reg := devcontainertest.Registry(t)
	devcontainertest.PushFeature(t, reg+"/features/hello:1", devcontainertest.Tar(t, map[string]string{
		"devcontainer-feature.json": `{"id": "hello", "version": "1.0.0",
			"options": {"greeting": {"type": "string", "default": "hi"}},
			"containerEnv": {"HELLO_HOME": "/opt/hello"}}`,
		"install.sh": "#!/bin/sh\nset -e\nmkdir -p /opt/hello\nprintf '%s\\n' \"$GREETING\" > /opt/hello/greeting\necho \"$_REMOTE_USER\" > /opt/hello/user\n",
	}))
	greeting := `hello; $(touch /pwned) 'quoted'`
	ws := t.TempDir()
	dc := map[string]any{
		"build":             map[string]any{"dockerfile": "Dockerfile", "context": ".."},
		"features":          map[string]any{reg + "/features/hello:1": map[string]any{"greeting": greeting}},
		"containerEnv":      map[string]string{"DEV_MODE": "on"},
		"postCreateCommand": "echo created > /created",
		"postStartCommand":  []string{"/bin/sh", "-c", "echo started >> /tmp/started"},
		"forwardPorts":      []int{7070},
		"portsAttributes":   map[string]any{"7070": map[string]string{"label": "web app"}},
		"mounts":            []string{"source=cache,target=/cache,type=volume"},
	}
	js, err := json.MarshalIndent(dc, "", "  ")
	require.NoError(t, err)
	writeTree(t, ws, map[string]string{
		".devcontainer/devcontainer.json": "// written by hand\n" + strings.Replace(string(js), "{", "{ /* comments are allowed */", 1),
		".devcontainer/Dockerfile":        "FROM fixture\nCOPY app.txt /app/app.txt\n",
		"app.txt":                         "from the context\n",
	})

	out, errOut, code := runEnvctl(t, "build", p, "--devcontainer", ws, "--switch")
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", out, errOut)
	assert.Contains(t, errOut, "devcontainer: feature "+reg+"/features/hello:1 (hello 1.0.0)")
	assert.Contains(t, errOut, "devcontainer: volume cache at /cache added")
	proj, err := env.c.GetProject(c, p)
	require.NoError(t, err)
	require.Equal(t, 2, proj.Current)

	in := up(t, p, 0)
	assert.Equal(t, "from the context", mustSh(t, in.ID, "cat /app/app.txt"))
	assert.Equal(t, greeting, mustSh(t, in.ID, "cat /opt/hello/greeting"), "the feature's option, byte for byte")
	assert.Equal(t, "root", mustSh(t, in.ID, "cat /opt/hello/user"))
	assert.Equal(t, "1", mustSh(t, in.ID, "test -e /pwned; echo $?"), "an option's text ran as a command")
	assert.Equal(t, "/opt/hello on", mustSh(t, in.ID, `echo "$HELLO_HOME $DEV_MODE"`), "the feature's containerEnv and containerEnv")
	assert.Equal(t, "created", mustSh(t, in.ID, "cat /created"), "postCreateCommand ran in the build")
	require.Eventually(t, func() bool { return sh(t, in.ID, "cat /tmp/started").Stdout == "started\n" },
		30*time.Second, 200*time.Millisecond, "postStartCommand ran at the start")
	assert.Equal(t, "/cache", mustSh(t, in.ID, "awk '$2 == \"/cache\" {print $2}' /proc/mounts"), "the mount is a project volume")

	ports, err := env.c.ProjectPorts(c, p)
	require.NoError(t, err)
	require.Len(t, ports.Forwarded, 1)
	assert.Equal(t, 7070, ports.Forwarded[0].Port)
	assert.Equal(t, "web app", ports.Forwarded[0].Label)
	mustSh(t, in.ID, `(setsid nc -l -p 7070 >/dev/null 2>&1 </dev/null &)`)
	require.Eventually(t, func() bool {
		ls, _ := env.c.ListPorts(c, in.ID)
		for _, l := range ls {
			if l.Port == 7070 {
				return l.Forwarded && l.Label == "web app" && !l.Public
			}
		}
		return false
	}, 20*time.Second, 200*time.Millisecond, "the instance lists port 7070 as forwarded, labelled")

	// A new instance runs postStartCommand at its start too.
	_, err = env.c.DeleteInstance(c, in.ID)
	require.NoError(t, err)
	again := up(t, p, 0)
	require.Eventually(t, func() bool { return sh(t, again.ID, "cat /tmp/started").Stdout == "started\n" },
		30*time.Second, 200*time.Millisecond, "postStartCommand ran at the new instance's start")

	// What envd does not do is refused by name before anything is built.
	writeTree(t, ws, map[string]string{".devcontainer/devcontainer.json": `{"image": "fixture", "runArgs": ["--cap-add=SYS_PTRACE"]}`})
	_, errOut, code = runEnvctl(t, "build", p, "-f", filepath.Join(ws, ".devcontainer/devcontainer.json"))
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, "runArgs")
	// --privileged asks for Docker inside, which this runc project cannot
	// have: the project's refusal, before anything is uploaded or built.
	writeTree(t, ws, map[string]string{".devcontainer/devcontainer.json": `{"image": "fixture", "runArgs": ["--privileged"]}`})
	_, errOut, code = runEnvctl(t, "build", p, "-f", filepath.Join(ws, ".devcontainer/devcontainer.json"))
	assert.NotEqual(t, 0, code)
	assert.Contains(t, errOut, "docker inside an instance needs runtime class gvisor")
	vs, err := env.c.ListVersions(c, p)
	require.NoError(t, err)
	assert.Len(t, vs, 2, "a refused devcontainer.json builds nothing")
}

// A version with a package installed by hand exports as a devcontainer.json
// whose build makes a version with the same packages.
func TestRootDevcontainerExportRebuild(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	base := importDebian(t)
	p := fmt.Sprintf("devcontainer-export-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: base})
	require.NoError(t, err)
	in := up(t, p, 0)
	mustSh(t, in.ID, "apt-get -o Acquire::Retries=3 update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q tree >/dev/null")
	_, saved := save(t, in.ID, "tree by hand")
	require.Equal(t, 2, saved.Version)

	dir := filepath.Join(t.TempDir(), ".devcontainer")
	out, errOut, code := runEnvctl(t, "spec", "export", p, "2", "--format", "devcontainer", "-f", dir)
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", out, errOut)
	js, err := os.ReadFile(filepath.Join(dir, "devcontainer.json"))
	require.NoError(t, err)
	assert.Contains(t, string(js), `"dockerfile": "Dockerfile"`)
	// The packages are a RUN line of a Dockerfile, which other tools
	// rebuild too, not envd's spec.
	df, err := os.ReadFile(filepath.Join(dir, "Dockerfile"))
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(df), "FROM "+base+"\nRUN apt-get "), "Dockerfile:\n%s", df)
	assert.Regexp(t, regexp.MustCompile(`(?m)^\s+tree=\S+`), string(df))
	assert.NotContains(t, string(js), `"packages"`)

	out, errOut, code = runEnvctl(t, "build", p, "--devcontainer", dir)
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", out, errOut)
	m := regexp.MustCompile(`(?m)^VERSION:\s+(\d+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "build output: %s", out)
	rebuilt := m[1]

	out, errOut, code = runEnvctl(t, "diff", p, rebuilt, "2")
	require.Equal(t, 0, code, "stdout: %s\nstderr: %s", out, errOut)
	pk := regexp.MustCompile(`Packages \((\w+)\): (\d+) added, (\d+) removed, (\d+) upgraded`).FindStringSubmatch(out)
	require.NotNil(t, pk, "envctl diff compares package sets: %s", out)
	assert.Equal(t, []string{"0", "0", "0"}, pk[2:], "no package difference: %s", out)
	against, err := env.c.VersionChanges(c, p, 2, 1, 0)
	require.NoError(t, err)
	require.NotNil(t, against.Packages, "the diff compares real package sets")
	assert.NotEmpty(t, against.Packages.Added, "version 2 added tree")
}
