// Package command runs commands in running instances: a buffered exec
// with a timeout and capped output (Exec), and a streamed one with an
// optional terminal (Stream). Both wait out a save's freeze window instead
// of failing on a frozen task. It needs the store's instance read (Store),
// the runtime's Exec and Status (Runtime) and the node's freeze gate.
package command

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/freeze"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/save"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// Store is what commands read of the store.
type Store interface {
	GetInstance(ctx context.Context, tenant, id string) (versions.Instance, error)
}

// Runtime is what commands need of the container runtime.
type Runtime interface {
	Exec(ctx context.Context, id string, spec runtime.ExecSpec) (int, error)
	Status(ctx context.Context, id string) (runtime.Status, error)
}

// Runner runs commands in this node's instances.
type Runner struct {
	node  string
	store Store
	rt    Runtime
	gate  *freeze.Gate

	activity Activity
	exits    Exits
}

// New makes a Runner; gate is the node's freeze gate, shared with saves.
func New(node string, store Store, rt Runtime, gate *freeze.Gate) *Runner {
	return &Runner{node: node, store: store, rt: rt, gate: gate, activity: noActivity{}, exits: noExits{}}
}

func (r *Runner) instance(ctx context.Context, p types.Principal, id string) (versions.Instance, error) {
	if err := names.ValidateInstanceID(id); err != nil {
		return versions.Instance{}, err
	}
	return r.store.GetInstance(ctx, p.Tenant, id)
}

// Exec runs a command in a running instance and returns its output, each
// stream cut at MaxExecOutput.
func (r *Runner) Exec(ctx context.Context, p types.Principal, id string, req types.ExecRequest) (types.ExecResult, error) {
	if len(req.Args) == 0 || req.Args[0] == "" {
		return types.ExecResult{}, fmt.Errorf("exec: args: at least the command is required: %w", errdefs.ErrInvalidArgument)
	}
	if err := types.CheckExecRequest(req); err != nil {
		return types.ExecResult{}, err
	}
	timeout := 10 * time.Minute
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d <= 0 {
			return types.ExecResult{}, fmt.Errorf("exec: timeout %q: %w", req.Timeout, errdefs.ErrInvalidArgument)
		}
		timeout = d
	}
	in, err := r.instance(ctx, p, id)
	if err != nil {
		return types.ExecResult{}, err
	}
	if err := save.CheckGeneration(in, req.Generation); err != nil {
		return types.ExecResult{}, err
	}
	if in.Node != r.node && in.State == types.StateRunning {
		return types.ExecResult{}, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, r.node, errdefs.ErrFailedPrecondition)
	}
	if in.State != types.StateRunning {
		return types.ExecResult{}, errdefs.WithDetails(fmt.Errorf("instance %q is %s, exec needs Running: %w", id, in.State, errdefs.ErrFailedPrecondition),
			map[string]any{"state": in.State})
	}
	defer r.activity.Hold(id)() // a command running is use, however long
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stdout := &limitedBuffer{max: types.MaxExecOutput}
	stderr := &limitedBuffer{max: types.MaxExecOutput}
	var code int
	started := time.Now()
	// A save may freeze the task between our check and the exec: containerd
	// then refuses to exec in a paused task before starting anything, and
	// the exec waits for the thaw and tries again.
	for attempt := 0; ; attempt++ {
		if err := r.gate.Wait(ctx, id); err != nil {
			return types.ExecResult{}, fmt.Errorf("exec in %q: waiting for a save's freeze to end: %w", id, err)
		}
		stdout.Reset()
		stderr.Reset()
		code, err = r.rt.Exec(ctx, id, runtime.ExecSpec{
			Args: req.Args, Env: req.Env, Cwd: req.Cwd,
			Stdin: strings.NewReader(req.Stdin), Stdout: stdout, Stderr: stderr,
		})
		if err == nil {
			break
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
		return types.ExecResult{}, r.execError(ctx, p, id, err)
	}
	return types.ExecResult{ExitCode: code, Stdout: stdout.String(), Stderr: stderr.String(),
		Truncated: stdout.truncated || stderr.truncated, OOMKilled: code == 137 && r.oomKilledSince(id, started)}, nil
}

// limitedBuffer keeps the first max bytes written and drops the rest, so a
// chatty command cannot exhaust the server's memory.
type limitedBuffer struct {
	bytes.Buffer
	max       int
	truncated bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room < len(p) {
		b.truncated = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// Reset empties the buffer for a retried exec.
func (b *limitedBuffer) Reset() {
	b.Buffer.Reset()
	b.truncated = false
}

// oomKilledSince reports whether the runtime saw an OOM kill in instance id
// at or after t.
func (r *Runner) oomKilledSince(id string, t time.Time) bool {
	w, ok := r.rt.(interface {
		OOMKilledSince(id string, t time.Time) bool
	})
	return ok && w.OOMKilledSince(id, t)
}
