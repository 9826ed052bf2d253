package runtime

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime/agent"
)

// agentBuild is cmd/envd-agent built once for the test process: every
// runtime copies the binary under its own StateDir (installAgent), so the
// tests can share the source.
var agentBuild struct {
	once sync.Once
	bin  string
	err  error
}

// buildAgent builds cmd/envd-agent, static, once per test process, into
// the package's temporary dir (removed by TestMain).
func buildAgent(t testing.TB) string {
	t.Helper()
	agentBuild.once.Do(func() {
		bin := filepath.Join(testTmpDir, "envd-agent")
		cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "../cmd/envd-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentBuild.err = fmt.Errorf("build envd-agent: %w: %s", err, out)
			return
		}
		agentBuild.bin = bin
	})
	require.NoError(t, agentBuild.err)
	return agentBuild.bin
}

// newAgentEnv is newTestEnv with exec agents on.
func newAgentEnv(t *testing.T) *testEnv {
	bin := buildAgent(t)
	return newTestEnvWith(t, NetworkConfig{Subnet: freeSubnet(t)}, func(c *Config) {
		c.NoAgents, c.AgentBinary = false, bin
	})
}

// parentOf is the command line of the parent of a command run in id:
// the agent's through it; empty through runc exec, whose command's parent
// (the shim) is outside the instance's PID namespace.
func parentOf(t *testing.T, env *testEnv, id string) string {
	t.Helper()
	out, _, code := env.run(t, id, "sh", "-c", `cat /proc/$PPID/cmdline 2>/dev/null | tr '\0' ' '; echo " ppid=$PPID"`)
	require.Equal(t, 0, code)
	return strings.TrimSpace(out)
}

func TestRootAgentExec(t *testing.T) {
	t.Parallel()
	env := newAgentEnv(t)
	require.NoError(t, env.rt.AgentsOff())
	ctx := context.Background()
	rt := env.rt
	const id = "agent"
	env.create(t, InstanceSpec{ID: id, Env: []string{"FOO=bar"}})

	// The init started the agent: the first command already runs
	// under it, and no runc exec was made.
	parent := parentOf(t, env, id)
	assert.Contains(t, parent, agentBinDest, "the first command runs under the agent")
	require.NoError(t, rt.StartAgent(ctx, id), "a start finds it connected")
	assert.Equal(t, parent, parentOf(t, env, id), "and starts no second one")
	agentPPid, _, code := env.run(t, id, "sh", "-c", `cut -d' ' -f4 /proc/$PPID/stat`)
	require.Equal(t, 0, code)
	assert.Equal(t, "1", strings.TrimSpace(agentPPid), "the agent is the init's child")
	assert.Zero(t, execProcesses(t, rt, id), "no runc exec ran in the instance")

	// Everything a runc exec does, a command through the agent does.
	checkExec(t, env, id)
	assert.Equal(t, parent, parentOf(t, env, id), "the same agent served them all")

	t.Run("nothing lands in the writable layer; the mounts are read-only", func(t *testing.T) {
		_, errOut, code := env.run(t, id, "sh", "-c", "echo x > /dev/.envd-agent")
		assert.NotEqual(t, 0, code)
		assert.Contains(t, errOut, "Read-only file system")
		_, _, code = env.run(t, id, "sh", "-c", "echo x > /dev/.envd/agent.sock.x")
		assert.NotEqual(t, 0, code)
		_, err := os.Stat(filepath.Join(upperDir(t, rt, id), "dev"))
		assert.ErrorIs(t, err, os.ErrNotExist, "runc made the mount points in the /dev tmpfs")
	})

	t.Run("hostile peers on the socket change nothing", func(t *testing.T) {
		// What a program in the instance can send the node: it reaches
		// the same socket at /dev/.envd/agent.sock.
		sock := filepath.Join(rt.instanceDir(id), "agent", agentSockName)
		for i, payload := range [][]byte{
			[]byte("GET / HTTP/1.1\r\n\r\n"),
			{1, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, // a hello claiming 4 GiB
			append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 12}, `{"version":9}`...),
			{},
		} {
			c, err := net.Dial("unix", sock)
			require.NoError(t, err, "peer %d", i)
			_, _ = c.Write(payload)
			defer c.Close() // the silent ones stay open through the checks
		}
		out, _, code := env.run(t, id, "echo", "served")
		assert.Equal(t, 0, code)
		assert.Equal(t, "served\n", out)
		assert.Equal(t, parent, parentOf(t, env, id), "the real agent still serves")
	})

	t.Run("an agent of the runtime before reconnects to the next", func(t *testing.T) {
		require.NoError(t, rt.Close())
		rt2, err := New(ctx, rt.cfg)
		require.NoError(t, err)
		env.rt = rt2
		assert.Empty(t, strings.TrimSpace(strings.Split(parentOf(t, env, id), "ppid=")[0]), "no listener yet: runc exec")
		start := time.Now()
		require.NoError(t, rt2.StartAgent(ctx, id))
		t.Logf("reconnect: %v", time.Since(start))
		assert.Equal(t, parent, parentOf(t, env, id), "the same agent process, reconnected, not a second one")
	})
	rt = env.rt

	t.Run("a runtime that listens at its start takes the agent back without a runc exec", func(t *testing.T) {
		require.NoError(t, rt.Close())
		rt3, err := New(ctx, rt.cfg)
		require.NoError(t, err)
		env.rt = rt3
		require.NoError(t, rt3.ListenAgents(ctx))
		rt3.agents.mu.Lock()
		s := rt3.agents.slots[id]
		rt3.agents.mu.Unlock()
		require.NotNil(t, s, "listening for the running instance")
		require.True(t, s.wait(ctx, agentConnectWait), "the agent redialed")
		assert.Equal(t, parent, parentOf(t, env, id), "the same agent, no second one")
		assert.Zero(t, execProcesses(t, rt3, id))
	})
	rt = env.rt

	t.Run("a tenant that kills the agent gets runc exec", func(t *testing.T) {
		var stdout, stderr strings.Builder
		_, err := rt.Exec(ctx, id, ExecSpec{Args: []string{"sh", "-c", "kill -9 $PPID; sleep 1"}, Stdout: &stdout, Stderr: &stderr})
		require.Error(t, err, "the command's agent died under it")
		assert.ErrorIs(t, err, errdefs.ErrUnavailable)
		assert.ErrorContains(t, err, "went away")
		var lost *AgentLostError
		require.ErrorAs(t, err, &lost)
		assert.Equal(t, time.Second, lost.RetryAfter(), "a 503 carries Retry-After")
		// The next command: runc exec (a background restart waits
		// agentRestartGap after the last start), and it works.
		out, _, code := env.run(t, id, "echo", "still here")
		assert.Equal(t, 0, code)
		assert.Equal(t, "still here\n", out)
		assert.NotContains(t, parentOf(t, env, id), agentBinDest)
		// Started again on request: a new agent.
		require.NoError(t, rt.StartAgent(ctx, id))
		p := parentOf(t, env, id)
		assert.Contains(t, p, agentBinDest)
		assert.NotEqual(t, parent, p)
	})

	t.Run("stop and start: the new task gets a new agent", func(t *testing.T) {
		// A command running when the instance stops dies with it: 137,
		// as a runc exec's does, not a lost agent.
		type result struct {
			code int
			err  error
		}
		done := make(chan result, 1)
		go func() {
			code, err := rt.Exec(ctx, id, ExecSpec{Args: []string{"sleep", "30"}})
			done <- result{code, err}
		}()
		time.Sleep(300 * time.Millisecond)
		require.NoError(t, rt.Stop(ctx, id))
		res := <-done
		require.NoError(t, res.err)
		assert.Equal(t, 137, res.code)

		_, err := rt.Exec(ctx, id, ExecSpec{Args: []string{"true"}})
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "stopped: no agent answers, runc exec says stopped")
		require.NoError(t, rt.Start(ctx, id))
		require.NoError(t, rt.StartAgent(ctx, id))
		assert.Contains(t, parentOf(t, env, id), agentBinDest)
	})

	t.Run("a new instance's first command waits for the agent its init starts", func(t *testing.T) {
		const id2 = "agent-cold"
		env.create(t, InstanceSpec{ID: id2, Env: []string{"FOO=bar"}})
		first := parentOf(t, env, id2)
		assert.Contains(t, first, agentBinDest, "not a runc exec beside the agent's start")
		assert.Equal(t, first, parentOf(t, env, id2))
		assert.Zero(t, execProcesses(t, rt, id2))
		require.NoError(t, rt.Remove(ctx, id2))
	})

	t.Run("paused: refused at once as runc exec does", func(t *testing.T) {
		require.NoError(t, rt.Pause(ctx, id))
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := rt.Exec(cctx, id, ExecSpec{Args: []string{"true"}})
		assert.ErrorIs(t, err, ErrTaskPaused)
		require.NoError(t, rt.Resume(ctx, id))
		out, _, code := env.run(t, id, "echo", "thawed")
		assert.Equal(t, 0, code)
		assert.Equal(t, "thawed\n", out)
	})
}

// execProcesses counts the runc execs alive in instance id's task (the
// shim knows them by their exec ids).
func execProcesses(t *testing.T, rt *Runtime, id string) int {
	t.Helper()
	ctx := rt.ctx(context.Background())
	c, err := rt.client.LoadContainer(ctx, id)
	require.NoError(t, err)
	task, err := c.Task(ctx, nil)
	require.NoError(t, err)
	ps, err := task.Pids(ctx)
	require.NoError(t, err)
	n := 0
	for _, p := range ps {
		if p.Info != nil {
			n++
		}
	}
	return n
}

// An instance made by a runtime without agents gets none later.
func TestRootAgentNotOnOldInstances(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, freeSubnet(t))
	ctx := context.Background()
	const id = "old"
	env.create(t, InstanceSpec{ID: id})
	assert.Error(t, env.rt.AgentsOff())
	assert.ErrorIs(t, env.rt.StartAgent(ctx, id), errdefs.ErrFailedPrecondition)

	cfg := env.rt.cfg
	require.NoError(t, env.rt.Close())
	cfg.NoAgents, cfg.AgentBinary = false, buildAgent(t)
	rt2, err := New(ctx, cfg)
	require.NoError(t, err)
	env.rt = rt2
	err = rt2.StartAgent(ctx, id)
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	assert.ErrorContains(t, err, "created without an exec agent")
	out, _, code := env.run(t, id, "echo", "runc")
	assert.Equal(t, 0, code)
	assert.Equal(t, "runc\n", out)
}

func TestAgentBinaryMustBeStatic(t *testing.T) {
	// The test binary itself is dynamically linked when cgo is on; a
	// file that is no ELF at all is refused the same way.
	junk := filepath.Join(t.TempDir(), "envd-agent")
	require.NoError(t, os.WriteFile(junk, []byte("#!/bin/sh\n"), 0o755))
	assert.Error(t, checkStatic(junk))
	_, err := findAgentBinary(filepath.Join(t.TempDir(), "missing"))
	assert.Error(t, err)
}

// A node's data dir can make the socket's path longer than a unix socket
// address holds (108 bytes): found by the capacity bench, whose agents
// never started under /var/tmp/envd-latency/work-cap/capacity/nodes/...
func TestAgentListenLongPath(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60), "instances", "x", "agent")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	path := filepath.Join(dir, agentSockName)
	require.Greater(t, len(path), 108)
	a := &agents{slots: map[string]*agentSlot{}, starting: map[string]chan struct{}{}, without: map[string]bool{}}
	s, err := a.listen("x", dir, &specs.Process{Cwd: "/"})
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err, "the socket is at its long path")
	assert.Equal(t, os.ModeSocket, fi.Mode().Type())

	// An agent dials it (through a short name, as the instance's mount
	// gives it one) and is served.
	link := filepath.Join(t.TempDir(), "a")
	require.NoError(t, os.Symlink(dir, link))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = agent.Run(ctx, filepath.Join(link, agentSockName), agent.ServeOptions{}) }()
	require.True(t, s.wait(ctx, 5*time.Second), "the agent connected")
	var out strings.Builder
	code, err := s.live().Exec(ctx, agent.Request{Args: []string{"echo", "long"}, Env: []string{"PATH=/usr/bin:/bin"}, Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "long\n", out.String())

	s.close()
	_, err = os.Stat(path)
	assert.ErrorIs(t, err, os.ErrNotExist, "closing removes the socket")
}

// In a user namespace the init's agent starts and serves too: the socket
// is reachable by the instance's root (a host uid of the range), and the
// commands run as that root.
func TestRootAgentUserNamespace(t *testing.T) {
	t.Parallel()
	const base = 1<<30 + 9<<16 // the test's own range
	bin := buildAgent(t)
	env := newTestEnvWith(t, NetworkConfig{Subnet: freeSubnet(t)}, func(c *Config) {
		c.UserNS, c.UserNSBase = true, base
		c.NoAgents, c.AgentBinary = false, bin
	})
	searchable(t, env.dir)
	const id = "agent-userns"
	env.create(t, InstanceSpec{ID: id})
	assert.Contains(t, parentOf(t, env, id), agentBinDest, "the first command runs under the init's agent")
	assert.Zero(t, execProcesses(t, env.rt, id), "no runc exec")
	out, _, code := env.run(t, id, "sh", "-c", "id -u; cat /proc/self/uid_map")
	require.Equal(t, 0, code)
	f := strings.Fields(out)
	require.Len(t, f, 4)
	assert.Equal(t, []string{"0", "0", strconv.Itoa(base), "65536"}, f)
}
