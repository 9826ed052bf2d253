package lifecycle

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/runtime"
)

// taskGoneRuntime is a runtime whose one container has no task, as
// containerd leaves an instance whose shim died; with removeAfter > 0 the
// container is gone from that many looks on (a removal under way). Methods
// the tests do not reach are the nil embedded interface's.
type taskGoneRuntime struct {
	Runtime
	removeAfter int
	mu          sync.Mutex
	looks       int
}

func (r *taskGoneRuntime) List(ctx context.Context) ([]string, error) {
	return []string{"p-00000001"}, nil
}

func (r *taskGoneRuntime) Status(ctx context.Context, id string) (runtime.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.looks++; r.removeAfter > 0 && r.looks > r.removeAfter {
		return runtime.Status{}, nil
	}
	return runtime.Status{Exists: true, Labels: map[string]string{LabelNode: "n1", LabelGeneration: "1"}}, nil
}

// failures records the reasons of InstanceFailed.
type failures struct {
	mu      sync.Mutex
	reasons []string
}

func (f *failures) Restored(string, time.Duration) {}
func (f *failures) Idled(string, string)           {}
func (f *failures) InstanceFailed(reason string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reasons = append(f.reasons, reason)
}

// A Running instance whose container stays without a task (its shim died
// and took the task) is Failed with shim_lost, both from the exit event
// and from the reconciler (what it finds after a restart); one whose
// container goes away meanwhile (a removal) is not called shim_lost.
func TestShimLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		settle func(m *Manager)
	}{
		{"exit event", func(m *Manager) { m.SettleExit(ctx, "p-00000001") }},
		{"reconciler", func(m *Manager) { require.NoError(t, m.Reconcile(ctx)) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			store, in := newInstance(t, types.StateRunning)
			m := newManager(store, &taskGoneRuntime{})
			obs := &failures{}
			m.Observer = obs
			c.settle(m)
			assert.Equal(t, []string{types.ReasonShimLost}, obs.reasons, "the failure counted by reason")
			row, err := store.Instances.GetInstance(ctx, "", in.ID)
			require.NoError(t, err)
			assert.Equal(t, types.StateFailed, row.State)
			assert.Equal(t, types.ReasonShimLost, row.Reason)
			assert.Contains(t, row.Message, "runtime shim is gone")
		})
	}
	t.Run("removal under way", func(t *testing.T) {
		store, in := newInstance(t, types.StateRunning)
		m := newManager(store, &taskGoneRuntime{removeAfter: 2})
		m.Observer = &failures{}
		m.SettleExit(ctx, in.ID)
		row, err := store.Instances.GetInstance(ctx, "", in.ID)
		require.NoError(t, err)
		assert.Equal(t, types.StateRunning, row.State, "left to the reconciler, which sees the container gone")
	})
}
