package proc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// start runs a shell script as a child and returns its pid and a channel
// closed when it is reaped.
func start(t *testing.T, script string) (int, chan struct{}) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return cmd.Process.Pid, done
}

func TestTerminate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, script string
		within       time.Duration
	}{
		{"exits on SIGTERM", "sleep 30", 2 * time.Second},
		{"killed when it ignores SIGTERM", "trap '' TERM; sleep 30 & wait", 4 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pid, done := start(t, tc.script)
			time.Sleep(100 * time.Millisecond) // let the trap be set
			began := time.Now()
			require.NoError(t, Terminate(context.Background(), "test", pid, done, time.Second))
			assert.Less(t, time.Since(began), tc.within)
			select {
			case <-done:
			default:
				t.Fatal("the process is still running")
			}
		})
	}
}

func TestTerminateGoneProcess(t *testing.T) {
	t.Parallel()
	pid, done := start(t, "exit 0")
	<-done
	assert.NoError(t, Terminate(context.Background(), "test", pid, nil, time.Second))
	assert.NoError(t, Terminate(context.Background(), "test", 0, nil, time.Second))
}

// A process known to be reaped is not signaled: its pid may name another
// process by now (here: one that is alive, standing for a reused pid).
func TestTerminateReapedSendsNothing(t *testing.T) {
	t.Parallel()
	other, otherDone := start(t, "sleep 30")
	t.Cleanup(func() { _ = Terminate(context.Background(), "other", other, otherDone, time.Second) })
	reaped := make(chan struct{})
	close(reaped)
	require.NoError(t, Terminate(context.Background(), "test", other, reaped, time.Second))
	select {
	case <-otherDone:
		t.Fatal("the process behind the reused pid was signaled")
	case <-time.After(300 * time.Millisecond):
	}
}

// Without done, exit is seen through the pidfd, also for a process that is
// not our child (reparented to init).
func TestTerminateNotAChild(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!").Output()
	require.NoError(t, err)
	var pid int
	_, err = fmt.Sscan(string(out), &pid)
	require.NoError(t, err)
	began := time.Now()
	require.NoError(t, Terminate(context.Background(), "orphan", pid, nil, 5*time.Second))
	assert.Less(t, time.Since(began), 4*time.Second, "seen to exit on SIGTERM, not after the grace")
	// Exited: gone, or a zombie until init reaps it.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err == nil {
		_, after, _ := strings.Cut(string(b), ") ")
		assert.True(t, strings.HasPrefix(after, "Z"), "state: %s", after)
	}
}

func TestLogTail(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "log")
	long := make([]byte, 2000)
	for i := range long {
		long[i] = 'a'
	}
	require.NoError(t, os.WriteFile(p, append(long, []byte("\nlast line\n")...), 0o644))
	tail := LogTail(p)
	assert.LessOrEqual(t, len(tail), 600)
	assert.Contains(t, tail, "last line")
	assert.Empty(t, LogTail(filepath.Join(t.TempDir(), "missing")))
}

func TestArgs(t *testing.T) {
	// sh waits in its builtin read on a pipe this test holds, so the child
	// stays alive with exactly this argv and starts no process of its own
	// (sleep given these arguments would exit at once on the empty one,
	// leaving a zombie whose cmdline reads empty: seen in CI).
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command("sh")
	cmd.Args = []string{"sleeper", "-c", "read line", "", "last"} // an empty argument stays
	cmd.Stdin = r
	require.NoError(t, cmd.Start())
	r.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); w.Close() })
	// The child's argv shows in /proc once it has exec'd, a moment after
	// Start returns (the same wait as TestWaitExec's).
	want := []string{"sleeper", "-c", "read line", "", "last"}
	assert.Eventually(t, func() bool { return slices.Equal(want, Args(cmd.Process.Pid)) }, 5*time.Second, 5*time.Millisecond,
		"argv of the child: %q", Args(cmd.Process.Pid))
	assert.Nil(t, Args(1<<30), "no such process")
}

func TestThreads(t *testing.T) {
	first, err := Threads()
	require.NoError(t, err)
	require.Positive(t, first)
	// Goroutines that lock their thread and block keep one thread each.
	const n = 20
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(n)
	for range n {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			started.Done()
			<-release
		}()
	}
	started.Wait()
	during, err := Threads()
	close(release)
	require.NoError(t, err)
	// Each locked goroutine has a thread of its own, and this one runs on another.
	assert.GreaterOrEqual(t, during, n+1, "%d locked threads were not counted", n)
}

func TestParent(t *testing.T) {
	ppid, comm, err := Parent(os.Getpid())
	require.NoError(t, err)
	assert.Equal(t, os.Getppid(), ppid)
	want, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", os.Getppid()))
	require.NoError(t, err)
	assert.Equal(t, strings.TrimSpace(string(want)), comm)
	_, _, err = Parent(1 << 30)
	assert.Error(t, err, "no such process")
}
