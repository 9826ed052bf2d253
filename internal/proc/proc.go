// Package proc stops the helper daemons envd starts in their own sessions
// (containerd, the lazy snapshotter): they outlive envd on purpose, so they
// are stopped by pid, not through an exec.Cmd.
package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/envd-dev/envd/internal/errdefs"
)

// Terminate sends SIGTERM to pid and waits up to grace (or until ctx is
// done) for it to exit, then sends SIGKILL and waits a little more. done,
// when not nil, is closed by whoever reaps the process (its parent, when
// this process started it); otherwise liveness is probed with signal 0. A
// process that is already gone is not an error.
func Terminate(ctx context.Context, name string, pid int, done <-chan struct{}, grace time.Duration) error {
	if pid <= 0 {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return nil
		}
		return fmt.Errorf("signal %s %d: %w", name, pid, err)
	}
	if WaitExit(ctx, pid, done, grace) {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	if WaitExit(context.WithoutCancel(ctx), pid, done, 5*time.Second) {
		return nil
	}
	return fmt.Errorf("%s %d did not exit: %w", name, pid, errdefs.ErrUnavailable)
}

// WaitExit reports whether pid exited within timeout (false when ctx ends
// first). See Terminate for done.
func WaitExit(ctx context.Context, pid int, done <-chan struct{}, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		if done != nil {
			select {
			case <-done:
				return true
			default:
			}
		} else if syscall.Kill(pid, 0) != nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return false
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// LogTail returns the last few hundred bytes of a daemon's log file, for an
// error message that says why it did not start.
func LogTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return strings.TrimSpace(string(b))
}
