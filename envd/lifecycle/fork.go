package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/errdefs"
)

// Copies asks for new instances of a project from one fork point.
type Copies struct {
	Project string
	Version int // the fork point's version
	// MemoryDir, for a fork with memory, is the fork checkpoint's memory
	// image in a local directory (written on this node by the capture);
	// every copy continues its processes. It must stay until StartCopies
	// returns. "": the copies start the version's init.
	MemoryDir string
	TTL       string
	Retain    bool
	Count     int // 1 to types.MaxForkCount
}

// StartCopies starts c.Count instances of c.Project concurrently from one
// fork point and returns them in no particular order. Each is a new
// instance: its own id, generation 1, network attachment (address) and
// instance files; a memory fork's copies are also named after their ids
// (hostname), not after the project as other instances. A memory fork's copies
// do not claim the checkpoint as a resume does (envctl up --checkpoint):
// they are copies, and the checkpoint stays free to be resumed once later.
//
// The tenant's instance quota is checked for all of them before any is
// recorded. All start or none stays: when one fails, the ones that started
// are removed (reason fork_failed) and the first error is returned.
func (m *Manager) StartCopies(ctx context.Context, p types.Principal, c Copies) ([]types.Instance, error) {
	if c.Count < 1 || c.Count > types.MaxForkCount {
		return nil, errdefs.WithDetails(fmt.Errorf("count %d: a fork starts 1 to %d instances: %w", c.Count, types.MaxForkCount, errdefs.ErrInvalidArgument),
			map[string]any{"count": c.Count, "max": types.MaxForkCount})
	}
	if c.Version <= 0 {
		return nil, fmt.Errorf("fork of %q: version %d: %w", c.Project, c.Version, errdefs.ErrInvalidArgument)
	}
	if err := m.Quota.Starts(ctx, p.Tenant, c.Count); err != nil {
		return nil, err
	}
	plan, err := m.planInstance(ctx, p, c.Project, types.CreateInstanceRequest{Version: c.Version, TTL: c.TTL, Retain: c.Retain})
	if err != nil {
		return nil, err
	}
	plan.forkMemory = c.MemoryDir
	out := make([]types.Instance, c.Count)
	errs := make([]error, c.Count)
	var wg sync.WaitGroup
	for i := range c.Count {
		wg.Go(func() {
			out[i], errs[i] = m.startPlanned(ctx, p, names.NewID(c.Project), plan)
		})
	}
	wg.Wait()
	var failed error
	for _, err := range errs {
		if err != nil {
			failed = err
			break
		}
	}
	if failed == nil {
		return out, nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	var cleanup []error
	for i, in := range out {
		if errs[i] != nil || in.ID == "" {
			continue
		}
		rec, err := m.Store.GetInstance(cctx, p.Tenant, in.ID)
		if err == nil {
			_, err = m.terminate(cctx, rec, types.ReasonForkFailed, "another copy of the same fork did not start; the fork keeps none")
		}
		if err != nil {
			cleanup = append(cleanup, fmt.Errorf("remove copy %s: %w", in.ID, err))
		}
	}
	return nil, errors.Join(append([]error{fmt.Errorf("fork into %d instances: %w", c.Count, failed)}, cleanup...)...)
}
