package apitest

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Exec is the fake ExecCore.
type Exec struct {
	*Recorder
	*Wake
	ExecFunc func(ctx context.Context, id string, req types.ExecRequest) (types.ExecResult, error)
	// ExecStreamFunc scripts a streaming exec. Without it the fake echoes
	// stdin to stdout until stdin ends, records the sizes received (Sizes)
	// and returns exit code 0.
	ExecStreamFunc func(ctx context.Context, id string, req types.ExecRequest, stdio types.Stdio) (int, error)

	mu    sync.Mutex
	sizes []types.TermSize
}

// Exec answers the arguments as stdout.
func (c *Exec) Exec(ctx context.Context, p types.Principal, id string, req types.ExecRequest) (types.ExecResult, error) {
	c.record("Exec", p, id, req)
	if c.ExecFunc != nil {
		return c.ExecFunc(ctx, id, req)
	}
	return types.ExecResult{Stdout: fmt.Sprintln(req.Args)}, nil
}

// ExecStream records the id, the request and whether a TTY was asked for.
func (c *Exec) ExecStream(ctx context.Context, p types.Principal, id string, req types.ExecRequest, stdio types.Stdio) (int, error) {
	c.record("ExecStream", p, id, req, stdio.TTY)
	if c.ExecStreamFunc != nil {
		return c.ExecStreamFunc(ctx, id, req, stdio)
	}
	done := make(chan struct{})
	defer close(done)
	if stdio.Resize != nil {
		go func() {
			for {
				select {
				case sz, ok := <-stdio.Resize:
					if !ok {
						return
					}
					c.mu.Lock()
					c.sizes = append(c.sizes, sz)
					c.mu.Unlock()
				case <-done:
					return
				}
			}
		}()
	}
	if stdio.Stdin == nil {
		return 0, nil
	}
	out := stdio.Stdout
	if out == nil {
		out = io.Discard
	}
	if _, err := io.Copy(out, stdio.Stdin); err != nil {
		if ctx.Err() != nil {
			return -1, ctx.Err()
		}
		return -1, err
	}
	return 0, nil
}

// SizeAtStart makes ExecStream answer exit code 0 at once, after looking
// for a terminal size already waiting on stdio.Resize when it was called:
// the channel returned delivers that size, or is closed when there was none.
func (c *Exec) SizeAtStart() <-chan types.TermSize {
	atStart := make(chan types.TermSize, 1)
	c.ExecStreamFunc = func(_ context.Context, _ string, _ types.ExecRequest, stdio types.Stdio) (int, error) {
		select {
		case sz := <-stdio.Resize:
			atStart <- sz
		default:
			close(atStart)
		}
		return 0, nil
	}
	return atStart
}

// Sizes returns the terminal sizes the default ExecStream received.
func (c *Exec) Sizes() []types.TermSize {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]types.TermSize(nil), c.sizes...)
}

// Wake wakes instances, for the groups that wake on access (Exec, Ports).
type Wake struct {
	*Recorder
	WakeInstanceFunc func(ctx context.Context, id string) (types.Instance, error)
}

// WakeInstance answers the instance Running; instance "gone" is not found.
func (c *Wake) WakeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	if c.WakeInstanceFunc != nil {
		c.record("WakeInstance", p, id)
		return c.WakeInstanceFunc(ctx, id)
	}
	if id == "gone" {
		c.record("WakeInstance", p, id)
		return types.Instance{}, fmt.Errorf("instance %q: %w", id, errdefs.ErrNotFound)
	}
	return echo(c, "WakeInstance", p, instanceIn(id, types.StateRunning, types.ReasonStarted), id)
}
