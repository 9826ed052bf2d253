package prefetch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A test binary started as `runc init` with fakeRuncInitEnv set plays
// runc's init: it waits a little, then execs sleep, as runc's init execs
// the container's.
const fakeRuncInitEnv = "ENVD_TEST_FAKE_RUNC_INIT"

func init() {
	if os.Getenv(fakeRuncInitEnv) == "1" && len(os.Args) == 2 && os.Args[1] == "init" {
		time.Sleep(300 * time.Millisecond)
		sleep, err := exec.LookPath("sleep")
		if err == nil {
			err = syscall.Exec(sleep, []string{"sleep", "30"}, os.Environ())
		}
		fmt.Fprintln(os.Stderr, "fake runc init:", err)
		os.Exit(1)
	}
}

// TestWaitExec: the init's warm waits while the process is still runc's
// init (`runc init`, runc's own binary) and reads the executable it execs
// next, not runc.
func TestWaitExec(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	sleep, err := exec.LookPath("sleep")
	require.NoError(t, err)
	sleep, err = filepath.EvalSymlinks(sleep)
	require.NoError(t, err)

	cmd := &exec.Cmd{Path: self, Args: []string{"runc", "init"}, Env: append(os.Environ(), fakeRuncInitEnv+"=1"), Stderr: os.Stderr}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid

	// Start returns once the exec has begun; the new image's argv shows in
	// /proc a moment later.
	require.Eventually(t, func() bool { return isRuncInit(pid) }, 200*time.Millisecond, time.Millisecond, "a process run as `runc init` is runc's init")
	started := time.Now()
	waitExec(pid, 200, 10*time.Millisecond)
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	require.NoError(t, err)
	assert.Equal(t, sleep, exe, "waitExec returned before the exec (after %v)", time.Since(started))
	assert.False(t, isRuncInit(pid))

	// Anything else is not waited for.
	other := exec.Command(sleep, "30")
	require.NoError(t, other.Start())
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	assert.False(t, isRuncInit(other.Process.Pid))
	assert.False(t, isRuncInit(1<<30), "no such process")
}
