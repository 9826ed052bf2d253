package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/registry"
)

var projectSeq atomic.Int64

// newProject creates a project on the fixture base with a name unique to
// this run.
func newProject(t *testing.T, prefix string, excludes ...string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, projectSeq.Add(1))
	_, err := env.c.CreateProject(ctx(t), types.CreateProjectRequest{Name: name, Base: fixtureBase, Excludes: excludes,
		RuntimeClass: projectClass(t)})
	require.NoError(t, err)
	return name
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	return c
}

// up starts an instance of project (version 0 = current) and removes it
// when the test ends.
func up(t *testing.T, project string, version int) types.Instance {
	t.Helper()
	in, err := env.c.CreateInstance(ctx(t), project, types.CreateInstanceRequest{Version: version})
	require.NoError(t, err)
	require.Equal(t, types.StateRunning, in.State)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(context.Background(), in.ID) })
	return in
}

// sh runs a shell script in the instance and returns its result.
func sh(t *testing.T, id, script string) types.ExecResult {
	t.Helper()
	res, err := env.c.Exec(ctx(t), id, types.ExecRequest{Args: []string{"/bin/sh", "-c", script}})
	require.NoError(t, err)
	return res
}

// mustSh runs a script that must succeed.
func mustSh(t *testing.T, id, script string) string {
	t.Helper()
	res := sh(t, id, script)
	require.Equalf(t, 0, res.ExitCode, "script %q\nstdout: %s\nstderr: %s", script, res.Stdout, res.Stderr)
	return strings.TrimSpace(res.Stdout)
}

// save saves the instance and waits for the operation's result.
func save(t *testing.T, id, msg string) (types.Operation, types.SaveResult) {
	t.Helper()
	op, err := env.c.Save(ctx(t), id, types.SaveRequest{Message: msg}, "")
	require.NoError(t, err)
	return waitSave(t, op.ID)
}

func waitSave(t *testing.T, opID string) (types.Operation, types.SaveResult) {
	t.Helper()
	op, err := env.c.WaitOperation(ctx(t), opID, nil)
	require.NoError(t, err)
	require.Equalf(t, types.OpSucceeded, op.State, "save operation %s failed: %+v", op.ID, op.Error)
	var res types.SaveResult
	require.NoError(t, json.Unmarshal(op.Result, &res))
	return op, res
}

// commandContext is exec.CommandContext for a program that may start
// children of its own (npm runs node, node's test runner its workers, ssh
// its proxy): it gets its own process group, all of which is killed when
// ctx ends, and Wait returns at most 10 s after that even if a descendant
// still holds its output pipe. Without these, a hung grandchild outlived
// the kill and Wait blocked until the package's -timeout.
func commandContext(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// logTail logs the last n lines of a daemon's log, to say why a test failed.
func logTail(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s: %v", path, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	t.Logf("the last %d lines of %s:\n%s", min(n, len(lines)), path, strings.Join(lines[max(0, len(lines)-n):], "\n"))
}

// succeeded waits for an operation that was started without error (op,
// err as its start returned them), requires that it succeeded, and
// returns its result.
func succeeded[T any](t *testing.T, op types.Operation, err error) T {
	t.Helper()
	require.NoError(t, err)
	done, err := env.c.WaitOperation(ctx(t), op.ID, nil)
	require.NoError(t, err)
	require.Equalf(t, types.OpSucceeded, done.State, "%s operation %s: %+v", done.Kind, done.ID, done.Error)
	var res T
	require.NoError(t, json.Unmarshal(done.Result, &res))
	return res
}

// nodeCredential is n's registry credential for pulls and pushes.
func nodeCredential(t *testing.T, n *node.Node) registry.Credential {
	t.Helper()
	f, _ := n.RegistryCredentialFiles()
	c, err := registry.ReadCredentialFile(f)
	require.NoError(t, err)
	return c
}

// setNodeAuth has req sent with n's registry credential.
func setNodeAuth(t *testing.T, req *http.Request, n *node.Node) {
	t.Helper()
	c := nodeCredential(t, n)
	req.SetBasicAuth(c.User, c.Password)
}
