package ops

import (
	"context"
	"slices"
	"sort"
	"time"
)

// idlePoll is how often Idle looks at the running operations.
const idlePoll = 50 * time.Millisecond

// Idle waits until no operation runs in this process, or ctx ends, and
// returns the ids of those still running then (none: nil). It stops
// nothing: the service's end cancels what remains, which the next start
// resumes or settles.
func (r *Runner) Idle(ctx context.Context) []string {
	t := time.NewTicker(idlePoll)
	defer t.Stop()
	for {
		ids := r.runningIDs()
		if len(ids) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ids
		case <-t.C:
		}
	}
}

func (r *Runner) runningIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.running))
	for id := range r.running {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return slices.Clip(ids)
}
