package envd_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
)

// Hibernation saves a stopped retained instance's layer as a version that
// does not become current, then frees the layer; a start brings it back.
func TestCoreHibernate(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	e.project("web")

	t.Run("saves the layer as a version that is not current, then frees it", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("web", types.CreateInstanceRequest{Retain: true})
		e.write(in.ID, "home/dev/work.txt", "unsaved work")
		_, err := e.svc.Parts().Instances.StopInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)

		hib, err := e.svc.Parts().Instances.HibernateInstance(e.ctx, e.user, in.ID, types.HibernateRequest{})
		require.NoError(t, err)
		assert.Equal(t, types.StateStopped, hib.State)
		assert.Equal(t, envd.ReasonHibernated, hib.Reason)
		assert.Equal(t, 2, hib.HibernatedVersion)
		assert.Equal(t, []string{"1:ready:current", "2:ready"}, e.versionsOf("web"), "a hibernation version does not become current")
		assert.Equal(t, map[string]string{"home/": "", "home/dev/": "", "home/dev/work.txt": "unsaved work"}, e.layerFiles("web", 2))
		assert.Empty(t, e.rt.UpperDir(in.ID), "the layer on the node is freed")
		assert.Empty(t, e.workDirEntries())

		_, err = e.svc.Parts().Instances.HibernateInstance(e.ctx, e.user, in.ID, types.HibernateRequest{})
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "a hibernated instance cannot hibernate again")

		woken, err := e.svc.Parts().Instances.StartInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)
		assert.Equal(t, types.StateRunning, woken.State)
		assert.Zero(t, woken.HibernatedVersion)
		assert.Equal(t, in.Generation+1, woken.Generation, "waking is a start: a new generation")
		v2, err := e.svc.GetVersion(e.ctx, e.user, "web", 2)
		require.NoError(t, err)
		spec, ok := e.rt.Spec(in.ID)
		require.True(t, ok, "a new container was made")
		assert.Equal(t, e.reg.Addr()+"/"+v2.Image, spec.Image, "from the hibernation version")
	})

	t.Run("a woken instance's first save expects the current it started from", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("web", types.CreateInstanceRequest{Retain: true})
		e.write(in.ID, "home/dev/work.txt", "unsaved work")
		_, err := e.svc.Parts().Instances.StopInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)
		hib, err := e.svc.Parts().Instances.HibernateInstance(e.ctx, e.user, in.ID, types.HibernateRequest{})
		require.NoError(t, err)
		_, err = e.svc.Parts().Instances.StartInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)

		res := e.saved(in.ID, types.SaveRequest{Message: "after the wake"})
		assert.Equal(t, 1, res.Expected, "the hibernation is not the user's save")
		assert.True(t, res.Current, "nobody moved current: the save wins")
		assert.False(t, res.Conflict)
		assert.Equal(t, hib.HibernatedVersion+1, res.Version)
	})

	t.Run("only a stopped retained instance hibernates", func(t *testing.T) {
		e := e.with(t)
		running := e.instance("web", types.CreateInstanceRequest{Retain: true})
		_, err := e.svc.Parts().Instances.HibernateInstance(e.ctx, e.user, running.ID, types.HibernateRequest{})
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		assert.Equal(t, "running", e.task(running.ID))
	})
}

// The node's own idle hibernation is exempt from the tenant's quota; a
// user's is checked like a save, before the upload.
func TestCoreHibernateQuota(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, func(c *envd.Config) {
		c.HibernateAfter = 200 * time.Millisecond
		c.ReconcileInterval = 100 * time.Millisecond
	})
	e.project("web")
	_, err := e.svc.SetQuota(e.ctx, e.admin, testTenant, types.Quota{MaxVersions: 1})
	require.NoError(t, err)

	// Two retained instances, stopped; the node would hibernate both, so
	// the first is asked by the user at once.
	asked := e.instance("web", types.CreateInstanceRequest{Retain: true})
	e.write(asked.ID, "home/dev/a", "a")
	idle := e.instance("web", types.CreateInstanceRequest{Retain: true})
	e.write(idle.ID, "home/dev/b", "b")
	_, err = e.svc.Parts().Instances.StopInstance(e.ctx, e.user, asked.ID)
	require.NoError(t, err)
	blobs := e.registryBlobs()
	_, err = e.svc.Parts().Instances.HibernateInstance(e.ctx, e.user, asked.ID, types.HibernateRequest{})
	require.ErrorIs(t, err, errdefs.ErrQuotaExceeded)
	assert.Equal(t, map[string]any{"quota": "versions", "limit": int64(1), "used": int64(1), "requested": int64(1)}, errdefs.Details(err))
	got := e.getInstance(asked.ID)
	assert.Equal(t, types.StateStopped, got.State)
	assert.Zero(t, got.HibernatedVersion)
	assert.Equal(t, blobs, e.registryBlobs(), "refused before the upload")
	b, err := os.ReadFile(filepath.Join(e.rt.UpperDir(asked.ID), "home/dev/a"))
	require.NoError(t, err, "the layer is kept")
	assert.Equal(t, "a", string(b))

	_, err = e.svc.Parts().Instances.StopInstance(e.ctx, e.user, idle.ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return e.instanceNow(idle.ID).HibernatedVersion > 0 && e.instanceNow(asked.ID).HibernatedVersion > 0
	}, 20*time.Second, 50*time.Millisecond, "the node hibernates idle instances whatever the quota")
	assert.Equal(t, []string{"1:ready:current", "2:ready", "3:ready"}, e.versionsOf("web"))
	assert.Empty(t, e.rt.UpperDir(idle.ID))
	assert.Empty(t, e.rt.UpperDir(asked.ID))
}

// Hibernation with memory where memory cannot be kept (the fake runtime
// has no memory engine, as a runc node): the user's verb is refused with
// memory_checkpoint_unsupported before anything changes; the idle action
// hibernate-memory hibernates the disk alone and says why on the instance.
func TestCoreHibernateMemoryRefusedAndFallsBack(t *testing.T) {
	t.Parallel()
	e := newIdleEnv(t)

	t.Run("hibernate --memory is refused before anything changes", func(t *testing.T) {
		t.Parallel()
		e := e.with(t)
		e.project("memverb")
		in := e.instance("memverb", types.CreateInstanceRequest{Retain: true})
		e.write(in.ID, "home/dev/work.txt", "unsaved work")
		blobs := e.registryBlobs()
		_, err := e.svc.Parts().Instances.HibernateInstance(e.ctx, e.user, in.ID, types.HibernateRequest{Memory: true})
		require.ErrorIs(t, err, errdefs.ErrMemoryUnsupported)
		assert.Equal(t, "class", errdefs.Details(err)["reason"])
		got := e.getInstance(in.ID)
		assert.Equal(t, types.StateRunning, got.State)
		assert.Equal(t, in.Generation, got.Generation)
		assert.Zero(t, got.HibernatedVersion)
		assert.Equal(t, "running", e.task(in.ID), "the task runs on")
		assert.Equal(t, []string{"1:ready:current"}, e.versionsOf("memverb"), "no version made")
		cs, err := e.svc.Parts().Checkpoints.ListCheckpoints(e.ctx, e.user, "memverb")
		require.NoError(t, err)
		assert.Empty(t, cs, "no checkpoint made")
		assert.Equal(t, blobs, e.registryBlobs(), "nothing uploaded")

		_, err = e.svc.Parts().Instances.StopInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)
		_, err = e.svc.Parts().Instances.HibernateInstance(e.ctx, e.user, in.ID, types.HibernateRequest{Memory: true})
		require.ErrorIs(t, err, errdefs.ErrMemoryUnsupported, "a stopped instance has no processes to keep")
		assert.Equal(t, "state", errdefs.Details(err)["reason"])
		assert.Zero(t, e.getInstance(in.ID).HibernatedVersion)
	})

	t.Run("the idle action hibernate-memory falls back to the disk and says why", func(t *testing.T) {
		t.Parallel()
		e := e.with(t)
		e.idleProject("memidle", types.IdleActionHibernateMemory)
		in := e.instance("memidle", types.CreateInstanceRequest{})
		assert.Equal(t, types.IdleActionHibernateMemory, e.getInstance(in.ID).IdleAction, "kept for an instance that is not retained")
		e.write(in.ID, "home/dev/work.txt", "unsaved work")
		got := e.stoppedByIdle(in.ID)
		assert.Equal(t, 2, got.HibernatedVersion, "hibernated on a version")
		assert.Zero(t, got.HibernatedCheckpoint, "without its processes")
		assert.Equal(t, "class", got.MemoryNotKept)
		assert.Contains(t, got.Message, "memory not kept (class")
		assert.Equal(t, map[string]string{"home/": "", "home/dev/": "", "home/dev/work.txt": "unsaved work"}, e.layerFiles("memidle", 2))
		cs, err := e.svc.Parts().Checkpoints.ListCheckpoints(e.ctx, e.user, "memidle")
		require.NoError(t, err)
		assert.Empty(t, cs)

		woken, err := e.svc.Parts().Instances.WakeInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)
		assert.Equal(t, types.StateRunning, woken.State)
		assert.Empty(t, woken.MemoryNotKept, "cleared once it runs")
		assert.Equal(t, in.Generation+1, woken.Generation)
	})

	t.Run("hibernate-memory is an idle action and a node default", func(t *testing.T) {
		t.Parallel()
		e := e.with(t)
		e.project("memset")
		_, err := e.svc.SetProjectIdle(e.ctx, e.user, "memset", types.IdleSetting{After: "1m", Action: "hibernate-mem"})
		require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "hibernate-memory")
	})
}
