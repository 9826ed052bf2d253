package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

// processesOf lists the node's processes whose command line names id (an
// instance's shim, runsc sandbox, gofer and the sandbox's host stubs are
// started with the container id), as "PID ARGV0".
func processesOf(id string) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !bytes.Contains(b, []byte(id)) {
			continue
		}
		args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		out = append(out, e.Name()+" "+args[0])
	}
	return out
}

// A node killed hard (envd and its containerd, SIGKILL) with a gVisor
// instance running: the instance's shim and runsc sandbox live on, and the
// restarted node adopts them as it does runc's: the instance is Running,
// answers on gVisor with its files, saves; once deleted, no process of it
// (shim, sandbox, gofer) is left on the node.
func TestRootKillNodeAdoptsGVisorInstance(t *testing.T) {
	t.Parallel()
	bin := buildEnvd(t)
	dataDir := killDataDir(t, bin)
	c := context.Background()
	p, cl := startEnvd(t, bin, dataDir)
	_, err := cl.ImportImage(c, "fixture", bytes.NewReader(env.fixtureTar))
	require.NoError(t, err)
	_, err = cl.CreateProject(c, types.CreateProjectRequest{Name: "sandboxed", Base: "fixture", RuntimeClass: "gvisor"})
	require.NoError(t, err)
	in, err := cl.CreateInstance(c, "sandboxed", types.CreateInstanceRequest{})
	require.NoError(t, err)
	res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "echo kept > /marker && uname -r"}})
	require.NoError(t, err)
	require.Equal(t, 0, res.ExitCode, res.Stderr)
	require.Contains(t, res.Stdout, "gvisor")
	before := processesOf(in.ID)
	require.NotEmpty(t, before, "the instance's processes on the node")

	pids, _ := filepath.Glob(filepath.Join(dataDir, "*", "containerd.pid"))
	more, _ := filepath.Glob(filepath.Join(dataDir, "containerd.pid"))
	pids = append(pids, more...)
	require.NotEmpty(t, pids, "containerd's pid file under %s", dataDir)
	p.kill(t)
	for _, f := range pids {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	}
	t.Logf("left running by the kill: %v", processesOf(in.ID))

	p, cl = startEnvd(t, bin, dataDir)
	defer p.kill(t)
	got, err := cl.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, got.State, "%s: %s", got.Reason, got.Message)
	res, err = cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "cat /marker; uname -r"}, Timeout: "30s"})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode, res.Stderr)
	assert.Contains(t, res.Stdout, "kept\n")
	assert.Contains(t, res.Stdout, "gvisor")
	op, err := cl.Save(c, in.ID, types.SaveRequest{Message: "after the kill"}, "")
	require.NoError(t, err)
	done, err := cl.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	assert.Equalf(t, types.OpSucceeded, done.State, "%+v", done.Error)

	_, err = cl.DeleteInstance(c, in.ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(processesOf(in.ID)) == 0 }, time.Minute, 200*time.Millisecond,
		"processes of the deleted gVisor instance left on the node: %v", processesOf(in.ID))
}
