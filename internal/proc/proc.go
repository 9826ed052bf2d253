// Package proc stops the helper daemons envd starts in their own sessions
// (containerd, the lazy snapshotter): they outlive envd on purpose, so they
// are stopped by pid, not through an exec.Cmd. It also reads who runs
// under a pid (Args).
package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// Terminate sends SIGTERM to pid and waits up to grace (or until ctx is
// done) for it to exit, then sends SIGKILL and waits a little more. done,
// when not nil, is closed by whoever reaps the process (its parent, when
// this process started it). A process that is already gone is not an error.
//
// The signals go through a pidfd opened first, so they reach that process
// or none: a pid recorded earlier may by now name another process (pid_max
// is 32768 on many machines), and a stray SIGTERM to an instance's init
// ends the whole instance.
func Terminate(ctx context.Context, name string, pid int, done <-chan struct{}, grace time.Duration) error {
	if pid <= 0 || closed(done) {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("pidfd of %s %d: %w", name, pid, err)
	}
	defer unix.Close(fd)
	if closed(done) { // reaped, and pid maybe reused, before the pidfd
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0); err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil
		}
		return fmt.Errorf("signal %s %d: %w", name, pid, err)
	}
	if waitPidfd(ctx, fd, done, grace) {
		return nil
	}
	_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	if waitPidfd(context.WithoutCancel(ctx), fd, done, 5*time.Second) {
		return nil
	}
	return fmt.Errorf("%s %d did not exit: %w", name, pid, errdefs.ErrUnavailable)
}

func closed(done <-chan struct{}) bool {
	if done == nil {
		return false
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// waitPidfd reports whether the process of fd exited within timeout (false
// when ctx ends first): when done is given, once it is closed (reaped);
// otherwise once the pidfd polls readable, which it does at the exit.
func waitPidfd(ctx context.Context, fd int, done <-chan struct{}, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		if done != nil {
			select {
			case <-done:
				return true
			case <-time.After(20 * time.Millisecond):
			}
		} else if n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 20); err == nil && n > 0 {
			return true
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return false
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

// Args returns process pid's argument vector as /proc shows it (nil for a
// process that is gone, or a zombie's or kernel thread's empty one). Who
// runs under a recorded pid is told by it: the pid may have been reused.
func Args(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// Parent is process pid's parent and the parent's command name (comm), as
// /proc shows them. A container's init is left to its shim (a
// subreaper), so the parent of an init is the shim serving its task.
func Parent(pid int) (ppid int, comm string, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, "", err
	}
	// pid (comm) state ppid ...: comm may hold spaces, so from its ")".
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 2 {
		return 0, "", fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	if ppid, err = strconv.Atoi(f[1]); err != nil {
		return 0, "", fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	c, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	if err != nil {
		return 0, "", err
	}
	return ppid, strings.TrimSpace(string(c)), nil
}
