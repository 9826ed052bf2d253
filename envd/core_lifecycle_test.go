package envd_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/fakeruntime"
	"github.com/envd-dev/envd/runtime"
)

// Instance lifecycle as the user sees it, with the TTL reaper and the
// reconciler that move instances on their own.
func TestCoreLifecycle(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, func(c *envd.Config) { c.ReapInterval = 50 * time.Millisecond })
	t.Run("verbs", func(t *testing.T) { testLifecycleVerbs(t, e) })
	t.Run("ttl expiry", func(t *testing.T) { testTTLExpiry(t, e) })
	t.Run("reconcile", func(t *testing.T) { testReconcile(t, e) })
}

// Each verb moves the instance's state and does the matching runtime
// work; a verb from the wrong state is refused with the state in the
// details.
func testLifecycleVerbs(t *testing.T, e *coreEnv) {
	e = e.with(t)
	e.project("web")

	t.Run("create runs the current version on this node", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("web", types.CreateInstanceRequest{})
		assert.Equal(t, types.ReasonStarted, in.Reason)
		assert.Equal(t, testNode, in.Node)
		assert.Equal(t, 1, in.Version)
		assert.Equal(t, int64(1), in.Generation)
		require.NotNil(t, in.ExpiresAt, "the default TTL applies")
		assert.WithinDuration(t, time.Now().Add(8*time.Hour), *in.ExpiresAt, time.Minute)
		v1, err := e.svc.GetVersion(e.ctx, e.user, "web", 1)
		require.NoError(t, err)
		spec, ok := e.rt.Spec(in.ID)
		require.True(t, ok)
		assert.Equal(t, e.reg.Addr()+"/"+v1.Image, spec.Image)
		assert.Equal(t, map[string]string{envd.LabelGeneration: "1", envd.LabelProject: "web", envd.LabelTenant: testTenant,
			envd.LabelNode: testNode, envd.LabelBuild: "false"}, spec.Labels)
		assert.Equal(t, "running", e.task(in.ID))
	})

	t.Run("pause and resume", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("web", types.CreateInstanceRequest{})
		got, err := e.svc.Parts().Instances.PauseInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)
		assert.Equal(t, types.StatePaused, got.State)
		assert.Equal(t, types.ReasonUserPause, got.Reason)
		assert.Equal(t, "paused", e.task(in.ID))

		_, err = e.svc.Parts().Instances.PauseInstance(e.ctx, e.user, in.ID)
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		assert.Equal(t, types.StatePaused, errdefs.Details(err)["state"])
		_, err = e.svc.Parts().Instances.Exec(e.ctx, e.user, in.ID, types.ExecRequest{Args: []string{"true"}})
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "exec needs Running")

		got, err = e.svc.Parts().Instances.ResumeInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)
		assert.Equal(t, types.StateRunning, got.State)
		assert.Equal(t, "running", e.task(in.ID))
		_, err = e.svc.Parts().Instances.ResumeInstance(e.ctx, e.user, in.ID)
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	})

	t.Run("a pause the runtime fails goes back to Running", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("web", types.CreateInstanceRequest{})
		e.rt.FailNext(fakeruntime.Pause, errors.New("cgroup freezer: device or resource busy"))
		_, err := e.svc.Parts().Instances.PauseInstance(e.ctx, e.user, in.ID)
		require.Error(t, err)
		got := e.getInstance(in.ID)
		assert.Equal(t, types.StateRunning, got.State)
		assert.Equal(t, types.ReasonUserPause+"_failed", got.Reason)
		assert.Equal(t, "running", e.task(in.ID))
	})

	t.Run("stop needs a retained instance", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("web", types.CreateInstanceRequest{})
		_, err := e.svc.Parts().Instances.StopInstance(e.ctx, e.user, in.ID)
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		assert.Equal(t, types.StateRunning, e.getInstance(in.ID).State)
		assert.Equal(t, "running", e.task(in.ID))
	})

	t.Run("stop keeps the writable layer; start brings it back with a new generation", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("web", types.CreateInstanceRequest{Retain: true})
		e.write(in.ID, "home/dev/kept", "kept")
		stopped, err := e.svc.Parts().Instances.StopInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)
		assert.Equal(t, types.StateStopped, stopped.State)
		assert.Equal(t, types.ReasonUserStop, stopped.Reason)
		assert.Empty(t, e.task(in.ID), "no task")
		_, err = e.svc.Parts().Instances.PauseInstance(e.ctx, e.user, in.ID)
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)

		started, err := e.svc.Parts().Instances.StartInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)
		assert.Equal(t, types.StateRunning, started.State)
		assert.Equal(t, in.Generation+1, started.Generation)
		assert.Equal(t, "running", e.task(in.ID))
		st, err := e.rt.Status(e.ctx, in.ID)
		require.NoError(t, err)
		assert.Equal(t, strconv.FormatInt(started.Generation, 10), st.Labels[envd.LabelGeneration], "the container carries the new generation")
		b, err := os.ReadFile(filepath.Join(e.rt.UpperDir(in.ID), "home/dev/kept"))
		require.NoError(t, err)
		assert.Equal(t, "kept", string(b))
		_, err = e.svc.Parts().Instances.StartInstance(e.ctx, e.user, in.ID)
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "a running instance does not start again")
	})

	t.Run("a stop the runtime fails leaves the instance Failed", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("web", types.CreateInstanceRequest{Retain: true})
		e.rt.FailNext(fakeruntime.Stop, errors.New("task did not exit"))
		_, err := e.svc.Parts().Instances.StopInstance(e.ctx, e.user, in.ID)
		require.Error(t, err)
		got := e.getInstance(in.ID)
		assert.Equal(t, types.StateFailed, got.State)
		assert.Equal(t, types.ReasonUserStop+"_failed", got.Reason)
	})

	t.Run("delete terminates and removes the container; versions stay", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("web", types.CreateInstanceRequest{})
		e.write(in.ID, "home/dev/x", "x")
		require.Equal(t, types.OpSucceeded, e.save(in.ID, types.SaveRequest{}).State)
		got, err := e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)
		assert.Equal(t, types.StateTerminated, got.State)
		assert.Equal(t, types.ReasonUserDelete, got.Reason)
		_, ok := e.rt.Spec(in.ID)
		assert.False(t, ok)
		again, err := e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err, "deleting a deleted instance is not an error")
		assert.Equal(t, types.StateTerminated, again.State)
		for name, verb := range map[string]func(context.Context, types.Principal, string) (types.Instance, error){
			"start": e.svc.Parts().Instances.StartInstance, "stop": e.svc.Parts().Instances.StopInstance, "pause": e.svc.Parts().Instances.PauseInstance, "resume": e.svc.Parts().Instances.ResumeInstance,
		} {
			_, err := verb(e.ctx, e.user, in.ID)
			assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, name)
		}
		_, err = e.svc.GetVersion(e.ctx, e.user, "web", 2)
		assert.NoError(t, err)
	})

	t.Run("a create the runtime fails leaves a Failed instance", func(t *testing.T) {
		e := e.with(t)
		e.project("broken")
		e.rt.FailNext(fakeruntime.Create, errors.New("runc: exec format error"))
		_, err := e.svc.Parts().Instances.CreateInstance(e.ctx, e.user, "broken", types.CreateInstanceRequest{}, "")
		require.Error(t, err)
		ins, err := e.svc.Parts().Instances.ListInstances(e.ctx, e.user, "broken")
		require.NoError(t, err)
		require.Len(t, ins, 1)
		assert.Equal(t, types.StateFailed, ins[0].State)
		assert.Equal(t, types.ReasonProvisionFailed, ins[0].Reason)
	})

	t.Run("renew sets the expiry from now, none removes it", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("web", types.CreateInstanceRequest{TTL: "10m"})
		got, err := e.svc.Parts().Instances.RenewInstance(e.ctx, e.user, in.ID, "3h")
		require.NoError(t, err)
		require.NotNil(t, got.ExpiresAt)
		assert.WithinDuration(t, time.Now().Add(3*time.Hour), *got.ExpiresAt, time.Minute)
		got, err = e.svc.Parts().Instances.RenewInstance(e.ctx, e.user, in.ID, "none")
		require.NoError(t, err)
		assert.Nil(t, got.ExpiresAt)
		_, err = e.svc.Parts().Instances.RenewInstance(e.ctx, e.user, in.ID, "-1h")
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	})
}

// The TTL reaper: an expired instance is terminated; a retained one is
// stopped, its layer kept.
func testTTLExpiry(t *testing.T, e *coreEnv) {
	e = e.with(t)
	e.project("ttl")
	plain := e.instance("ttl", types.CreateInstanceRequest{TTL: "300ms"})
	retained := e.instance("ttl", types.CreateInstanceRequest{TTL: "300ms", Retain: true})
	e.write(retained.ID, "home/dev/kept", "kept")
	lasting := e.instance("ttl", types.CreateInstanceRequest{TTL: "1h"})

	require.Eventually(t, func() bool {
		return e.instanceNow(plain.ID).State == types.StateTerminated && e.instanceNow(retained.ID).State == types.StateStopped
	}, 20*time.Second, 50*time.Millisecond)
	assert.Equal(t, types.ReasonTTLExpiry, e.getInstance(plain.ID).Reason)
	assert.Equal(t, types.ReasonTTLExpiry, e.getInstance(retained.ID).Reason)
	_, ok := e.rt.Spec(plain.ID)
	assert.False(t, ok, "the expired instance's container is removed")
	assert.Empty(t, e.task(retained.ID))
	assert.FileExists(t, filepath.Join(e.rt.UpperDir(retained.ID), "home/dev/kept"))
	assert.Equal(t, types.StateRunning, e.getInstance(lasting.ID).State)
}

// Reconcile makes the runtime and the rows agree: a vanished container
// fails its instance, an orphan container is removed, a task of an older
// generation is killed.
func testReconcile(t *testing.T, e *coreEnv) {
	e = e.with(t)
	e.project("rec")
	vanished := e.instance("rec", types.CreateInstanceRequest{})
	require.NoError(t, e.rt.Remove(e.ctx, vanished.ID))
	fenced := e.instance("rec", types.CreateInstanceRequest{})
	_, err := e.store.Instances.BumpGeneration(e.ctx, fenced.ID) // another start took it over
	require.NoError(t, err)
	healthy := e.instance("rec", types.CreateInstanceRequest{})
	orphan := runtime.InstanceSpec{ID: "rec-0rphan00", Image: "x", Labels: map[string]string{envd.LabelNode: testNode}}
	require.NoError(t, e.rt.Create(e.ctx, orphan))
	foreign := runtime.InstanceSpec{ID: "rec-f0re1gn0", Image: "x", Labels: map[string]string{envd.LabelNode: "node-b"}}
	require.NoError(t, e.rt.Create(e.ctx, foreign))

	require.NoError(t, e.svc.Reconcile(e.ctx))

	got := e.getInstance(vanished.ID)
	assert.Equal(t, types.StateFailed, got.State)
	assert.Equal(t, types.ReasonNodeLost, got.Reason)
	assert.Empty(t, e.task(fenced.ID), "the task of a stale generation is killed")
	assert.Equal(t, "running", e.task(healthy.ID))
	_, ok := e.rt.Spec(orphan.ID)
	assert.False(t, ok, "a container of this node that no row owns is removed")
	_, ok = e.rt.Spec(foreign.ID)
	assert.True(t, ok, "another node's container is left alone")
}
