package e2e

import (
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

// TestRootInitExitAgreesWithShow: when an instance's init dies, `show`
// says Failed (task_exited) at once, not at the next reconciliation (30 s
// here), and an exec answers the same state, never "stopped" while `show`
// says Running.
func TestRootInitExitAgreesWithShow(t *testing.T) {
	t.Parallel()
	p := newProject(t, "initexit")
	kill := func(id string) time.Time {
		t.Helper()
		st, err := env.node.Runtime().Status(ctx(t), id)
		require.NoError(t, err)
		require.NotZero(t, st.Pid)
		require.NoError(t, syscall.Kill(int(st.Pid), syscall.SIGKILL))
		return time.Now()
	}

	t.Run("show", func(t *testing.T) {
		in := up(t, p, 0)
		killed := kill(in.ID)
		var got types.Instance
		require.Eventually(t, func() bool {
			var err error
			got, err = env.c.GetInstance(ctx(t), in.ID)
			return err == nil && got.State != types.StateRunning
		}, 10*time.Second, 20*time.Millisecond, "still Running after its init died")
		t.Logf("Failed %v after the kill", time.Since(killed).Round(time.Millisecond))
		assert.Equal(t, types.StateFailed, got.State)
		assert.Equal(t, types.ReasonTaskExited, got.Reason)
		assert.Contains(t, got.Message, "its init exited with status 137 (signal SIGKILL)", "the message says how the init ended")
	})

	t.Run("exec", func(t *testing.T) {
		in := up(t, p, 0)
		kill(in.ID)
		// Exec at once, before anything else looked: whichever comes
		// first, the answer names the state show reports right after.
		var err error
		for range 50 {
			if _, err = env.c.Exec(ctx(t), in.ID, types.ExecRequest{Args: []string{"true"}}); err != nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		require.Error(t, err, "exec still ran after the init died")
		got, gerr := env.c.GetInstance(ctx(t), in.ID)
		require.NoError(t, gerr)
		var ce *types.Error
		require.True(t, errors.As(err, &ce), "%v is not an API error", err)
		assert.Equal(t, "failed_precondition", ce.Code, ce.Message)
		assert.Equal(t, types.StateFailed, got.State, "exec answered %q while show says %s", ce.Message, got.State)
		assert.Equal(t, string(got.State), ce.Details["state"], ce.Message)
		assert.Contains(t, ce.Message, "Failed")
	})
}

// TestRootFirstReadsStoredAsTheyGrow: the first-reads list is on the
// project while it is still being recorded (a save early in the window
// uses it), and files only written are not in it.
func TestRootFirstReadsStoredAsTheyGrow(t *testing.T) {
	t.Parallel()
	p := newProject(t, "growing")
	in := up(t, p, 0)
	// Reads are repeated until seen: the recording starts just after the
	// instance is reported Running.
	readUntilStored := func(script, f string, within time.Duration) {
		t.Helper()
		require.Eventually(t, func() bool {
			mustSh(t, in.ID, script)
			proj, err := env.c.GetProject(ctx(t), p)
			return err == nil && slices.Contains(proj.Prefetch, f)
		}, within, 100*time.Millisecond, "%s not stored within %v", f, within)
	}
	// The window here is prefetchWindow from the start; the list is stored
	// every second as it grows, so the first read shows before the window
	// ends.
	readUntilStored("cat /fixtures/keep/untouched > /dev/null && echo w > /fixtures/written-only", "/fixtures/keep/untouched", prefetchWindow-time.Second)
	readUntilStored("cat /fixtures/link-target > /dev/null", "/fixtures/link-target", prefetchWindow+5*time.Second)
	proj, err := env.c.GetProject(ctx(t), p)
	require.NoError(t, err)
	assert.Contains(t, proj.Prefetch, "/fixtures/keep/untouched", "the list keeps what it had")
	assert.NotContains(t, proj.Prefetch, "/fixtures/written-only", "a file only written is not a first read")
}

// TestRootFirstReadsHead: when an instance's first command ends, its first
// reads are stored at once with their count as the head (what a lazy start
// of the project reads ahead before it reports Running); what later
// commands read comes after the head.
func TestRootFirstReadsHead(t *testing.T) {
	t.Parallel()
	p := newProject(t, "head")
	in := up(t, p, 0)
	mustSh(t, in.ID, "cat /fixtures/keep/untouched > /dev/null")
	var proj types.Project
	require.Eventually(t, func() bool {
		var err error
		proj, err = env.c.GetProject(ctx(t), p)
		return err == nil && proj.PrefetchHead > 0
	}, 5*time.Second, 50*time.Millisecond, "no head stored after the first command")
	head := proj.PrefetchHead
	first := slices.Index(proj.Prefetch, "/fixtures/keep/untouched")
	require.GreaterOrEqual(t, first, 0, "the first command's read is not in %v", proj.Prefetch)
	assert.Less(t, first, head, "the first command's read is in the head")

	mustSh(t, in.ID, "cat /fixtures/link-target > /dev/null")
	require.Eventually(t, func() bool {
		var err error
		proj, err = env.c.GetProject(ctx(t), p)
		return err == nil && slices.Contains(proj.Prefetch, "/fixtures/link-target")
	}, prefetchWindow+5*time.Second, 100*time.Millisecond, "the second command's read was not stored")
	assert.Equal(t, head, proj.PrefetchHead, "the head stays where the first command ended")
	assert.GreaterOrEqual(t, slices.Index(proj.Prefetch, "/fixtures/link-target"), head, "a later command's read is after the head")
}
