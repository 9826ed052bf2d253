package command

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime"
)

// Stream runs a command in a running instance with its streams
// connected to stdio and returns its exit code. Output is streamed as it
// comes, without the limit of Exec, and there is no timeout: the session
// lasts until the process exits or ctx is canceled (the process is then
// killed). With stdio.TTY the process gets a terminal: stdout carries both
// output streams, stdin goes through the terminal's line discipline (a 0x03
// byte interrupts the foreground process) and sizes received on
// stdio.Resize are applied to it.
//
// An instance that is not Running is an errdefs.ErrFailedPrecondition with
// its state in the details. req.Stdin and req.Timeout are not used.
func (r *Runner) Stream(ctx context.Context, p types.Principal, id string, req types.ExecRequest, stdio types.Stdio) (int, error) {
	if len(req.Args) == 0 || req.Args[0] == "" {
		return -1, fmt.Errorf("exec: args: at least the command is required: %w", errdefs.ErrInvalidArgument)
	}
	if err := types.CheckExecRequest(req); err != nil {
		return -1, err
	}
	in, err := r.instance(ctx, p, id)
	if err != nil {
		return -1, err
	}
	if in.State != types.StateRunning {
		return -1, errdefs.WithDetails(fmt.Errorf("instance %q is %s, exec needs Running: %w", id, in.State, errdefs.ErrFailedPrecondition),
			map[string]any{"state": in.State})
	}
	// An open session is use for as long as it stays open (a terminal
	// running top), and each input is activity too.
	defer r.activity.Hold(id)()
	if stdio.Stdin != nil {
		stdio.Stdin = touchingReader{r: stdio.Stdin, touch: func() { r.activity.Touch(id) }}
	}

	var resize chan runtime.TermSize
	if stdio.TTY && stdio.Resize != nil {
		// Forward sizes, keeping only the newest when the runtime has not
		// taken the previous one yet.
		resize = make(chan runtime.TermSize, 1)
		// A size the caller already sent is the initial one: the runtime
		// finds it waiting and applies it first.
		select {
		case sz, ok := <-stdio.Resize:
			if ok {
				resize <- runtime.TermSize{Cols: sz.Cols, Rows: sz.Rows}
			}
		default:
		}
		fctx, stop := context.WithCancel(ctx)
		defer stop()
		go forwardSizes(fctx, stdio.Resize, resize)
	}
	spec := runtime.ExecSpec{
		Args: req.Args, Env: req.Env, Cwd: req.Cwd,
		Stdin: stdio.Stdin, Stdout: stdio.Stdout, Stderr: stdio.Stderr,
		TTY: stdio.TTY, Resize: resize,
	}
	// Like Exec: wait out a save's freeze window, and retry when a save froze
	// the task between the state check and the exec (containerd refuses to
	// exec in a paused task before the process starts).
	for attempt := 0; ; attempt++ {
		if err := r.gate.Wait(ctx, id); err != nil {
			return -1, fmt.Errorf("exec in %q: waiting for a save's freeze to end: %w", id, err)
		}
		code, err := r.rt.Exec(ctx, id, spec)
		if err == nil {
			return code, nil
		}
		if attempt < 50 {
			// Refused as paused, or paused now: a save's freeze; the
			// thaw may come before the look at the task, so both count.
			if st, serr := r.rt.Status(ctx, id); errors.Is(err, runtime.ErrTaskPaused) || (serr == nil && st.Task == "paused") {
				select {
				case <-time.After(100 * time.Millisecond):
					continue
				case <-ctx.Done():
				}
			}
		}
		return -1, r.execError(ctx, p, id, err)
	}
}

// forwardSizes converts sizes from in to out until in closes or ctx ends.
// out has a buffer of one; a size not yet taken is replaced by a newer one.
func forwardSizes(ctx context.Context, in <-chan types.TermSize, out chan runtime.TermSize) {
	for {
		select {
		case sz, ok := <-in:
			if !ok {
				return
			}
			rs := runtime.TermSize{Cols: sz.Cols, Rows: sz.Rows}
			for sent := false; !sent; {
				select {
				case out <- rs:
					sent = true
				default:
					select {
					case <-out: // drop the stale size
					default:
					}
				}
			}
		case <-ctx.Done():
			return
		}
	}
}
