package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/pgserver/pgtest"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// slowStopRuntime is a runtime with one instance whose Stop is held until
// the test lets it finish: the moment when a verb's runtime work is under
// way, which a real containerd shows only by chance. Methods the tests do
// not reach are the nil embedded interface's (they panic).
type slowStopRuntime struct {
	Runtime
	node     string
	stopping chan struct{} // closed when Stop has begun
	finish   chan struct{} // Stop returns when it is closed

	mu   sync.Mutex
	task string
}

func (r *slowStopRuntime) Stop(ctx context.Context, id string) error {
	close(r.stopping)
	<-r.finish
	r.mu.Lock()
	defer r.mu.Unlock()
	r.task = "stopped"
	return nil
}

func (r *slowStopRuntime) List(ctx context.Context) ([]string, error) {
	return []string{"p-00000001"}, nil
}

func (r *slowStopRuntime) Status(ctx context.Context, id string) (runtime.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return runtime.Status{Exists: true, Task: r.task, Labels: map[string]string{LabelNode: r.node, LabelGeneration: "1"}}, nil
}

// newInstance records a retained instance of a new project in state, on
// node n1, in a fresh database.
func newInstance(t *testing.T, state types.InstanceState) (*versions.Store, versions.Instance) {
	t.Helper()
	ctx := context.Background()
	store, err := versions.Open(ctx, pgtest.DSN(t))
	require.NoError(t, err)
	t.Cleanup(store.Close)
	_, _, err = store.Projects.CreateProject(ctx, versions.Project{Tenant: "acme", Name: "p", BaseImage: "reg/base@sha256:aaa"},
		versions.Version{Message: "base"})
	require.NoError(t, err)
	in, err := store.Instances.CreateInstance(ctx, versions.Instance{ID: "p-00000001", Tenant: "acme", Project: "p", Node: "n1",
		Version: 1, State: state, Retain: true})
	require.NoError(t, err)
	return store, in
}

// testStore is the aggregates the manager uses.
type testStore struct {
	versions.Instances
	versions.Projects
	versions.Versions
	versions.Tenants
	versions.Nodes
}

func newManager(store *versions.Store, rt Runtime) *Manager {
	return New(context.Background(), Deps{Node: "n1", Store: testStore{store.Instances, store.Projects, store.Versions, store.Tenants, store.Nodes}, Runtime: rt,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), ProvisionTimeout: time.Hour})
}

// A reconcile during a stop leaves the Stopping row to the stop: the
// runtime still shows the task running while Stop works, and taking that
// for the state would undo the stop and fail it with a 409.
func TestReconcileLeavesAVerbInFlightAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, in := newInstance(t, types.StateRunning)
	rt := &slowStopRuntime{node: "n1", task: "running", stopping: make(chan struct{}), finish: make(chan struct{})}
	m := newManager(store, rt)

	type result struct {
		in  types.Instance
		err error
	}
	done := make(chan result, 1)
	go func() {
		got, err := m.StopInstance(ctx, types.Principal{Tenant: "acme"}, in.ID)
		done <- result{got, err}
	}()
	<-rt.stopping
	require.NoError(t, m.Reconcile(ctx))
	row, err := store.Instances.GetInstance(ctx, "", in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateStopping, row.State, "the reconciler does not touch a row a verb is moving")
	close(rt.finish)

	res := <-done
	require.NoError(t, res.err)
	assert.Equal(t, types.StateStopped, res.in.State)
	assert.Equal(t, types.ReasonUserStop, res.in.Reason)
}

// A transitional row no verb of this process moves was left by a crash:
// it takes the runtime's state.
func TestReconcileRecoversATransitionalRowLeftByACrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, in := newInstance(t, types.StateRunning)
	_, err := store.Instances.Transition(ctx, in.ID, []types.InstanceState{types.StateRunning}, types.StateStopping, types.ReasonUserStop, "")
	require.NoError(t, err)
	rt := &slowStopRuntime{node: "n1", task: "running"}
	m := newManager(store, rt)

	require.NoError(t, m.Reconcile(ctx))
	row, err := store.Instances.GetInstance(ctx, "", in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, row.State)
	assert.Equal(t, "recovered", row.Reason)
}

// A wake waits for this process's removal of the instance's old container
// (freeing), and only for it.
func TestWaitFreed(t *testing.T) {
	m := &Manager{}
	ctx := context.Background()
	require.NoError(t, m.waitFreed(ctx, "a"), "nothing being removed")

	freed := m.freeing("a")
	waited := make(chan error, 1)
	go func() { waited <- m.waitFreed(ctx, "a") }()
	require.NoError(t, m.waitFreed(ctx, "b"), "another instance's removal is not waited for")
	select {
	case <-waited:
		t.Fatal("the wait ended before the removal")
	case <-time.After(50 * time.Millisecond):
	}
	freed()
	require.NoError(t, <-waited)
	freed() // a second call (the deferred one) changes nothing
	require.NoError(t, m.waitFreed(ctx, "a"))

	m.freeing("c")
	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, m.waitFreed(cctx, "c"), context.DeadlineExceeded, "bounded by the caller")
}
