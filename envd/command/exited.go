package command

import (
	"context"
	"errors"
	"fmt"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Exits settles an instance whose task is found ended (lifecycle.Manager):
// a Running row whose init exited becomes Failed before SettleExit returns.
type Exits interface {
	SettleExit(ctx context.Context, id string)
}

type noExits struct{}

func (noExits) SettleExit(context.Context, string) {}

// WithExits makes r settle an instance whose task it finds ended (the exec
// answered the task is gone while the row said Running) before answering,
// so the exec's error and the instance's state agree; without it the
// periodic reconciliation settles it later.
func (r *Runner) WithExits(e Exits) *Runner {
	r.exits = e
	return r
}

// execError is the error of an exec the runtime refused. When the
// instance's task has ended, the instance is settled first and the answer
// is the one an exec of a non-Running instance gets, with its new state:
// what `show` answers from then on.
func (r *Runner) execError(ctx context.Context, p types.Principal, id string, err error) error {
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		return fmt.Errorf("exec in %q: %w", id, err)
	}
	if st, serr := r.rt.Status(ctx, id); serr != nil || st.Task == "running" || st.Task == "paused" {
		return fmt.Errorf("exec in %q: %w", id, err)
	}
	r.exits.SettleExit(context.WithoutCancel(ctx), id)
	in, gerr := r.instance(ctx, p, id)
	if gerr != nil || in.State == types.StateRunning {
		return fmt.Errorf("exec in %q: %w", id, err)
	}
	return errdefs.WithDetails(fmt.Errorf("instance %q is %s (%s: %s), exec needs Running: %w", id, in.State, in.Reason, in.Message, errdefs.ErrFailedPrecondition),
		map[string]any{"state": in.State})
}
