package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/client"
)

// envdProcess is `envd up` running as a separate process, so a test can
// kill it the hard way.
type envdProcess struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// builtBinary is a command of this module built once per test process,
// for the tests that run it as a process of its own.
type builtBinary struct {
	sync.Once
	path string
	err  error
}

var envdBinary, envctlBinary builtBinary

// build builds ../cmd/NAME once and returns its path (under the package's
// temporary dir, removed at its end).
func (b *builtBinary) build(t testing.TB, name string) string {
	t.Helper()
	b.Do(func() {
		bin := filepath.Join(env.tmpDir, name)
		out, err := exec.Command("go", "build", "-o", bin, "../cmd/"+name).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build ../cmd/%s: %v: %s", name, err, out)
			return
		}
		b.path = bin
	})
	require.NoError(t, b.err)
	return b.path
}

// buildEnvd is cmd/envd, built once.
func buildEnvd(t testing.TB) string { return envdBinary.build(t, "envd") }

// buildEnvctl is cmd/envctl, built once.
func buildEnvctl(t testing.TB) string { return envctlBinary.build(t, "envctl") }

func startEnvd(t *testing.T, bin, dataDir string) (*envdProcess, *client.Client) {
	t.Helper()
	return startEnvdEnv(t, bin, dataDir, nil)
}

// startEnvdEnv is startEnvd with extraEnv (KEY=VALUE) added to envd's
// environment, e.g. ENVD_RUNTIME_CLASS=gvisor.
func startEnvdEnv(t *testing.T, bin, dataDir string, extraEnv []string) (*envdProcess, *client.Client) {
	t.Helper()
	_ = os.Remove(filepath.Join(dataDir, "envd.url"))
	log, err := os.OpenFile(filepath.Join(dataDir, "envd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer log.Close()
	cmd := exec.Command(bin, "up", "--data-dir", dataDir)
	cmd.Stdout, cmd.Stderr = log, log
	if extraEnv != nil {
		cmd.Env = append(os.Environ(), extraEnv...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	require.NoError(t, cmd.Start())
	p := &envdProcess{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	var url []byte
	require.Eventually(t, func() bool {
		url, err = os.ReadFile(filepath.Join(dataDir, "envd.url"))
		return err == nil && len(url) > 0
	}, 90*time.Second, 100*time.Millisecond, "envd up did not start; see %s/envd.log", dataDir)
	token, err := os.ReadFile(filepath.Join(dataDir, "admin.token"))
	require.NoError(t, err)
	c, err := client.New(strings.TrimSpace(string(url)), strings.TrimSpace(string(token)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return c.Healthz(context.Background()) == nil }, 30*time.Second, 100*time.Millisecond)
	return p, c
}

func (p *envdProcess) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.done
}

// envd killed with SIGKILL in the middle of a save: nothing half-made is
// visible, the instance is not left frozen, and the next envd finishes the
// save.
func TestRootKillDuringSave(t *testing.T) {
	t.Parallel()
	bin := buildEnvd(t)
	dataDir := killDataDir(t, bin)

	c := context.Background()
	p, cl := startEnvd(t, bin, dataDir)
	_, err := cl.ImportImage(c, "fixture", bytes.NewReader(env.fixtureTar))
	require.NoError(t, err)
	_, err = cl.CreateProject(c, types.CreateProjectRequest{Name: "killed", Base: "fixture"})
	require.NoError(t, err)
	in, err := cl.CreateInstance(c, "killed", types.CreateInstanceRequest{})
	require.NoError(t, err)
	res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "dd if=/dev/urandom of=/blob bs=1M count=150 2>/dev/null && echo kept > /marker"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Stderr)

	op, err := cl.Save(c, in.ID, types.SaveRequest{Message: "killed"}, "")
	require.NoError(t, err)
	// Kill it once the instance is frozen or the layer is being made.
	require.Eventually(t, func() bool {
		evs, err := cl.OperationEvents(c, op.ID, 0)
		if err != nil {
			return false
		}
		for _, e := range evs {
			if e.Type == "spooled" {
				return true
			}
		}
		return false
	}, 60*time.Second, 20*time.Millisecond)
	p.kill(t)

	p, cl = startEnvd(t, bin, dataDir)
	defer p.kill(t)
	got, err := cl.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, got.State)
	res, err = cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/marker"}, Timeout: "10s"})
	require.NoError(t, err, "the instance answers: not left frozen")
	assert.Equal(t, "kept\n", res.Stdout)

	done, err := cl.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	require.Equalf(t, types.OpSucceeded, done.State, "%+v", done.Error)
	var sr types.SaveResult
	require.NoError(t, json.Unmarshal(done.Result, &sr))
	assert.True(t, sr.Current)
	vs, err := cl.ListVersions(c, "killed")
	require.NoError(t, err)
	assert.Len(t, vs, 2, "one save, one version")
	for _, v := range vs {
		assert.Equal(t, "ready", v.State)
	}
	b, err := cl.CreateInstance(c, "killed", types.CreateInstanceRequest{})
	require.NoError(t, err)
	res, err = cl.Exec(c, b.ID, types.ExecRequest{Args: []string{"cat", "/marker"}})
	require.NoError(t, err)
	assert.Equal(t, "kept\n", res.Stdout)
}

// killDataDir is a data dir of its own for an envd the test kills; at the
// end `envd down` stops what is left and the dir is removed.
func killDataDir(t *testing.T, bin string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "envd-e2e-kill-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	dataDir := filepath.Join(dir, "data")
	require.NoError(t, os.MkdirAll(dataDir, 0o755))
	t.Cleanup(func() {
		if t.Failed() { // the nodes' side of the story, which is gone with dir
			logTail(t, filepath.Join(dataDir, "envd.log"), 80)
		}
		out, err := exec.Command(bin, "down", "--data-dir", dataDir).CombinedOutput()
		assert.NoError(t, err, "envd down: %s", out)
		_ = os.RemoveAll(dir)
	})
	return dataDir
}
