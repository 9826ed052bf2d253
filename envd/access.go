package envd

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// TouchInstance records activity on instance id now: it resets the
// instance's idle clock. It is cheap and never blocks.
//
// The activity is kept in memory on this node and flushed to the store
// every Config.ActivityFlush (10s by default), so the idle reaper of the
// node that owns the instance sees a touch made here at most that late.
// Callers authorize the instance before touching it.
func (s *Service) TouchInstance(id string) { s.life.Touch(id) }

// HoldInstance records a session open on instance id (an SSH shell, a
// port-forward, a terminal) until release is called: the instance is not
// idle meanwhile, input or not. Both ends count as activity. Callers
// authorize the instance first.
func (s *Service) HoldInstance(id string) (release func()) { return s.life.Hold(id) }

// WakeInstance returns instance id once it is Running: a stopped or
// hibernated instance (idle-stopped ones included) is started first and
// waited for until ctx ends.
//
// It waits at most the node's Config.WakeWait (60s by default), or less
// when ctx carries a shorter types.WithWakeWait; the start goes on after. An
// instance not Running by then is an errdefs.ErrWaking (503, code waking,
// with a Retry-After). Concurrent wakes of one instance start it once.
func (s *Service) WakeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	wait := s.cfg.WakeWait
	if d, ok := types.WakeWait(ctx); ok && d < wait {
		wait = d
	}
	return s.life.Wake(ctx, p, id, wait)
}
