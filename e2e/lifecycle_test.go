package e2e

import (
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime"
)

// requireState asserts err is a 409 naming the instance's current state.
func requireState(t *testing.T, err error, state types.InstanceState) {
	t.Helper()
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	var ce *types.Error
	require.True(t, errors.As(err, &ce), "error %v", err)
	assert.Equal(t, 409, ce.Status)
	assert.Equal(t, string(state), ce.Details["state"], "details carry the current state")
}

// Each legal transition, with its reason, and the illegal ones refused with
// the current state.
func TestRootLifecycleTransitions(t *testing.T) {
	t.Parallel()
	p := newProject(t, "life")
	in, err := env.c.CreateInstance(ctx(t), p, types.CreateInstanceRequest{Retain: true})
	require.NoError(t, err)
	assert.Equal(t, types.ReasonStarted, in.Reason)
	assert.EqualValues(t, 1, in.Generation)
	mustSh(t, in.ID, "echo before-stop > /kept")

	c := ctx(t)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(c, in.ID) })
	paused, err := env.c.PauseInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StatePaused, paused.State)
	assert.Equal(t, types.ReasonUserPause, paused.Reason)
	_, err = env.c.PauseInstance(c, in.ID)
	requireState(t, err, types.StatePaused)
	_, err = env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"true"}})
	requireState(t, err, types.StatePaused)

	resumed, err := env.c.ResumeInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, resumed.State)
	assert.Equal(t, types.ReasonUserResume, resumed.Reason)
	assert.NotEmpty(t, resumed.Address, "resume returns the instance's current address")
	_, err = env.c.ResumeInstance(c, in.ID)
	requireState(t, err, types.StateRunning)

	stopped, err := env.c.StopInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateStopped, stopped.State)
	assert.Equal(t, types.ReasonUserStop, stopped.Reason)
	assert.Empty(t, stopped.Address)
	_, err = env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"true"}})
	requireState(t, err, types.StateStopped)
	_, err = env.c.Save(c, in.ID, types.SaveRequest{}, "")
	requireState(t, err, types.StateStopped)
	_, err = env.c.PauseInstance(c, in.ID)
	requireState(t, err, types.StateStopped)

	started, err := env.c.StartInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, started.State)
	assert.EqualValues(t, 2, started.Generation, "every start is a new generation")
	assert.Equal(t, "before-stop", mustSh(t, in.ID, "cat /kept"), "the writable layer survived stop and start")
	assert.False(t, started.LastTransitionAt.Before(stopped.LastTransitionAt))

	gone, err := env.c.DeleteInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateTerminated, gone.State)
	assert.Equal(t, types.ReasonUserDelete, gone.Reason)
	_, err = env.c.StartInstance(c, in.ID)
	requireState(t, err, types.StateTerminated)
	_, err = env.c.RenewInstance(c, in.ID, "1h")
	requireState(t, err, types.StateTerminated)
}

// waitState polls until the instance reaches state or the timeout passes.
func waitState(t *testing.T, id string, state types.InstanceState, timeout time.Duration) types.Instance {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		in, err := env.c.GetInstance(ctx(t), id)
		require.NoError(t, err)
		if in.State == state || time.Now().After(deadline) {
			require.Equalf(t, state, in.State, "instance %s: reason %s, message %s", id, in.Reason, in.Message)
			return in
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TTLs are absolute; renew sets now + d and may shorten; "none" is explicit.
func TestRootTTLExpiryAndRenew(t *testing.T) {
	t.Parallel()
	p := newProject(t, "ttl")
	c := ctx(t)

	// TTLs of seconds are set by a renew once the instance runs: one that
	// ended while a loaded machine was still starting the instance would
	// fail the create itself.
	short, err := env.c.CreateInstance(c, p, types.CreateInstanceRequest{TTL: "1h"})
	require.NoError(t, err)
	require.NotNil(t, short.ExpiresAt)
	assert.WithinDuration(t, time.Now().Add(time.Hour), *short.ExpiresAt, time.Minute)
	short, err = env.c.RenewInstance(c, short.ID, "2s")
	require.NoError(t, err)
	require.NotNil(t, short.ExpiresAt)
	assert.WithinDuration(t, time.Now().Add(2*time.Second), *short.ExpiresAt, 2*time.Second)

	long, err := env.c.CreateInstance(c, p, types.CreateInstanceRequest{TTL: "1h"})
	require.NoError(t, err)
	shortened, err := env.c.RenewInstance(c, long.ID, "3s")
	require.NoError(t, err)
	require.NotNil(t, shortened.ExpiresAt)
	assert.True(t, shortened.ExpiresAt.Before(*long.ExpiresAt), "renew may shorten")

	extended, err := env.c.CreateInstance(c, p, types.CreateInstanceRequest{TTL: "1h"})
	require.NoError(t, err)
	_, err = env.c.RenewInstance(c, extended.ID, "2s")
	require.NoError(t, err)
	_, err = env.c.RenewInstance(c, extended.ID, "1h")
	require.NoError(t, err)

	forever, err := env.c.CreateInstance(c, p, types.CreateInstanceRequest{TTL: "none"})
	require.NoError(t, err)
	assert.Nil(t, forever.ExpiresAt, "no expiry only when asked for")
	assert.Regexp(t, `envd_instances_without_expiry\{node="[^"]+"\} [1-9]`, metrics(t), "instances without expiry are counted")
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(c, forever.ID) })
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(c, extended.ID) })

	for _, id := range []string{short.ID, long.ID} {
		in := waitState(t, id, types.StateTerminated, 20*time.Second)
		assert.Equal(t, types.ReasonTTLExpiry, in.Reason)
		st, err := env.node.Runtime().Status(c, id)
		require.NoError(t, err)
		assert.False(t, st.Exists, "an expired instance's container is removed")
	}
	in, err := env.c.GetInstance(c, extended.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, in.State, "a renewed instance outlives its first expiry")
}

// Expiry timers are rebuilt from the database: an instance expiring while
// envd is down is reaped after it comes back.
func TestRootTTLSurvivesRestart(t *testing.T) {
	p := newProject(t, "ttlrestart")
	in, err := env.c.CreateInstance(ctx(t), p, types.CreateInstanceRequest{TTL: "1h"})
	require.NoError(t, err)
	in, err = env.c.RenewInstance(ctx(t), in.ID, "3s") // not while it starts (TestRootTTLExpiryAndRenew)
	require.NoError(t, err)
	env.node.Close(ctx(t))
	require.NotNil(t, in.ExpiresAt)
	time.Sleep(time.Until(*in.ExpiresAt)) // expires while no envd runs
	restartNode(t)
	got := waitState(t, in.ID, types.StateTerminated, 20*time.Second)
	assert.Equal(t, types.ReasonTTLExpiry, got.Reason)
}

// The reconciler removes containers no row owns (a crash between creating
// the container and recording it) and fails instances whose container
// vanished.
func TestRootReconcileOrphansAndLostContainers(t *testing.T) {
	p := newProject(t, "reconcile")
	c := ctx(t)
	rt := env.node.Runtime()

	// An instance whose container disappears behind envd's back.
	lost := up(t, p, 0)
	require.NoError(t, rt.Remove(c, lost.ID))

	// A container of this node with no row: what a crash right after the
	// runtime call would leave. It needs an image: take the project's.
	v, err := env.c.GetVersion(c, p, 1)
	require.NoError(t, err)
	ref := env.node.RegistryAddr() + "/" + v.Image
	require.NoError(t, rt.Pull(c, ref))
	orphan := p + "-0rphan00"
	require.NoError(t, rt.Create(c, runtime.InstanceSpec{ID: orphan, Image: ref,
		Labels: map[string]string{envd.LabelNode: env.node.Name(), envd.LabelProject: p}}))
	// Not ours: another node's container in a shared namespace is left alone.
	foreign := p + "-f0reign0"
	require.NoError(t, rt.Create(c, runtime.InstanceSpec{ID: foreign, Image: ref,
		Labels: map[string]string{envd.LabelNode: "some-other-node"}}))
	t.Cleanup(func() { _ = rt.Remove(c, foreign) })

	require.NoError(t, env.node.Service.Reconcile(c))

	st, err := rt.Status(c, orphan)
	require.NoError(t, err)
	assert.False(t, st.Exists, "orphan container removed")
	st, err = rt.Status(c, foreign)
	require.NoError(t, err)
	assert.True(t, st.Exists, "another node's container is not touched")
	got, err := env.c.GetInstance(c, lost.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateFailed, got.State)
	// The removal kills the task first: the exit may be seen (task_exited)
	// before the reconciliation finds the container gone (node_lost).
	assert.Contains(t, []string{types.ReasonNodeLost, types.ReasonTaskExited}, got.Reason)
}

// A creating POST retried with the same Idempotency-Key returns the same
// object; the same key with a different body is refused.
func TestRootIdempotentCreates(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	name := newProject(t, "idem") // a project to start instances in
	a, err := env.c.CreateInstance(c, name, types.CreateInstanceRequest{TTL: "10m"}, client.WithIdempotencyKey("inst-key-1"))
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(c, a.ID) })
	b, err := env.c.CreateInstance(c, name, types.CreateInstanceRequest{TTL: "10m"}, client.WithIdempotencyKey("inst-key-1"))
	require.NoError(t, err)
	assert.Equal(t, a.ID, b.ID)
	_, err = env.c.CreateInstance(c, name, types.CreateInstanceRequest{TTL: "20m"}, client.WithIdempotencyKey("inst-key-1"))
	require.ErrorIs(t, err, errdefs.ErrIdempotencyReuse)
	ins, err := env.c.ListInstances(c, name)
	require.NoError(t, err)
	assert.Len(t, ins, 1)

	req := types.CreateProjectRequest{Name: "idem-project-x", Base: fixtureBase}
	p1, err := env.c.CreateProject(c, req, client.WithIdempotencyKey("proj-key-1"))
	require.NoError(t, err)
	p2, err := env.c.CreateProject(c, req, client.WithIdempotencyKey("proj-key-1"))
	require.NoError(t, err, "a retry is not a duplicate")
	assert.Equal(t, p1, p2)
	_, err = env.c.CreateProject(c, req)
	require.ErrorIs(t, err, errdefs.ErrAlreadyExists, "without the key it is a duplicate")
}

// metrics fetches the node's /metrics with the admin token.
func metrics(t *testing.T) string {
	t.Helper()
	req, err := http.NewRequest("GET", env.node.URL+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+env.node.Token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode, string(body))
	return string(body)
}
