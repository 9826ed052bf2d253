package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/spec"
)

// effectiveLimits are the limits a new instance of a project with limits
// proj gets (see envd.Config.DefaultLimits and spec.Effective).
func (m *Manager) effectiveLimits(ctx context.Context, tenant string, proj *types.Limits) (types.Limits, error) {
	max, err := m.Store.LimitMaxima(ctx, tenant)
	if err != nil {
		return types.Limits{}, err
	}
	return spec.Effective(m.DefaultLimits, proj, max), nil
}

// watchOOM turns an OOM kill reported by the runtime into an instance
// failure (reason oom_killed) when it took the instance's init; a kill of
// an exec'd process shows in that exec's result (ExecResult.OOMKilled).
func (m *Manager) watchOOM() {
	w, ok := m.Runtime.(interface{ OnOOM(func(id string)) })
	if !ok {
		return
	}
	w.OnOOM(func(id string) {
		// The init's exit follows the OOM event: give the task a moment.
		for range 20 {
			select {
			case <-m.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			st, err := m.Runtime.Status(m.ctx, id)
			if err != nil || !st.Exists || st.Task == "running" || st.Task == "paused" {
				continue
			}
			if st.OOMKilled {
				m.failOOM(m.ctx, id)
			}
			return
		}
	})
}

// failOOM marks a Running instance whose init the OOM killer took as Failed.
func (m *Manager) failOOM(ctx context.Context, id string) {
	in, err := m.Store.GetInstance(ctx, "", id)
	if err != nil || in.State != types.StateRunning || in.Node != m.Node {
		return
	}
	msg := "killed by the OOM killer: the instance's memory limit was reached; the writable layer is kept until removal"
	if l := spec.InstanceLimits(in.Spec); l != nil && l.MemoryBytes > 0 {
		msg = fmt.Sprintf("killed by the OOM killer at its memory limit of %d bytes; the writable layer is kept until removal", l.MemoryBytes)
	}
	m.fail(ctx, id, in.State, types.ReasonOOMKilled, msg)
}
