package lifecycle

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/runtime"
)

// exitGrace is how long after an init's exit the instance is looked at: a
// verb that killed it (stop, rm) has marked itself by then.
const exitGrace = 100 * time.Millisecond

// watchExits marks a Running instance whose init exited Failed at once
// (reason task_exited, or oom_killed), so that what `show` answers and
// what an exec finds agree: before, the periodic reconciliation found it
// up to ReconcileInterval later, and meanwhile an exec answered that the
// instance is stopped while its state said Running. An exit caused by a
// verb of this process (stop, rm, a save's hibernation) is left to it.
func (m *Manager) watchExits() {
	w, ok := m.Runtime.(interface {
		OnInitExit(ctx context.Context, fn func(id string))
	})
	if !ok {
		return
	}
	w.OnInitExit(m.ctx, func(id string) {
		select {
		case <-m.ctx.Done():
			return
		case <-time.After(exitGrace):
		}
		m.SettleExit(m.ctx, id)
	})
}

// taskEnded reports whether a task state (runtime.Status.Task) says the
// init is gone: stopped, or no task at all. A state the shim could not
// tell ("unknown", as `runc state` may answer on a loaded node while the
// cgroup is frozen for a save) is not an end: the next look decides.
func taskEnded(task string) bool {
	return task == "stopped" || task == ""
}

// SettleExit marks instance id Failed if its row says Running on this
// node, no verb acts on it, and its task has indeed ended.
func (m *Manager) SettleExit(ctx context.Context, id string) {
	if m.inFlight(id) {
		return
	}
	in, err := m.Store.GetInstance(ctx, "", id)
	if err != nil || in.State != types.StateRunning || in.Node != m.Node {
		return
	}
	st, err := m.Runtime.Status(ctx, id)
	if err == nil && st.Exists && st.Task == "" {
		// No task at all: a removal under way deletes the container
		// next; if it stays, the task went with its shim.
		st, err = m.taskLost(ctx, id)
	}
	if err != nil || !st.Exists || m.inFlight(id) {
		return
	}
	switch {
	case st.Task == "":
		m.fail(ctx, id, in.State, types.ReasonShimLost, shimLostMessage)
	case st.Task != "stopped":
	case st.OOMKilled:
		m.failOOM(ctx, id)
	default:
		m.fail(ctx, id, in.State, types.ReasonTaskExited, exitMessage(st))
	}
}

// shimLostGrace is how long a container without a task is watched for
// the removal that would explain it.
const shimLostGrace = 2 * time.Second

// taskLost is id's status once its container has been without a task for
// shimLostGrace, or as soon as the container is gone or has a task again.
func (m *Manager) taskLost(ctx context.Context, id string) (runtime.Status, error) {
	deadline := time.Now().Add(shimLostGrace)
	for {
		st, err := m.Runtime.Status(ctx, id)
		if err != nil || !st.Exists || st.Task != "" || time.Now().After(deadline) {
			return st, err
		}
		select {
		case <-ctx.Done():
			return runtime.Status{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// shimLostMessage says why an instance whose task vanished without an
// exit status failed: its shim process is gone, and with a shared shim
// (runtime.ShimGroupAnnotation) so are the tasks of its group.
const shimLostMessage = "its runtime shim is gone (killed, crashed, or the node restarted) and its processes with it, " +
	"as for every instance of the tenant sharing that shim; the writable layer is kept until removal"

// exitMessage says how an instance's init ended, for the Failed state's
// message and the node's log: its exit status, and the signal when the
// status is 128+N as a shell reports it (the init is `sh`; a SIGTERM it
// traps exits 0, a SIGKILL shows as the wait status of signal 9, 137).
func exitMessage(st runtime.Status) string {
	const kept = "; the writable layer is kept until removal"
	if st.Task != "stopped" {
		return "its processes exited" + kept
	}
	msg := fmt.Sprintf("its init exited with status %d", st.ExitCode)
	if st.ExitCode > 128 && st.ExitCode <= 128+64 {
		sig := syscall.Signal(st.ExitCode - 128)
		name := unix.SignalName(sig)
		if name == "" { // a real-time signal
			name = fmt.Sprint(int(sig))
		}
		msg += fmt.Sprintf(" (signal %s)", name)
	}
	return msg + kept
}
