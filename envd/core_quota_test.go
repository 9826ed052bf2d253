package envd_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Quotas are checked before anything is made or uploaded.
func TestCoreQuota(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	t.Run("save", func(t *testing.T) { testSaveQuota(t, e) })
	t.Run("instances", func(t *testing.T) { testInstanceQuota(t, e) })
}

// A save beyond the tenant's quota is refused after its layer is encoded
// and before anything is uploaded: no version, no blob, no spool left.
func testSaveQuota(t *testing.T, e *coreEnv) {
	e = e.with(t)

	for _, c := range []struct {
		name, project string
		saveFirst     bool // one save within the quota first
		quota         func(used types.Usage) types.Quota
	}{
		{"max versions", "q-versions", true, func(types.Usage) types.Quota { return types.Quota{MaxVersions: 2} }},
		{"max stored bytes", "q-bytes", false, func(u types.Usage) types.Quota { return types.Quota{MaxStoredBytes: u.StoredBytes + 1} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := e.with(t)
			_, err := e.svc.SetQuota(e.ctx, e.admin, testTenant, types.Quota{})
			require.NoError(t, err)
			project := c.project
			e.project(project)
			in := e.instance(project, types.CreateInstanceRequest{})
			e.write(in.ID, "home/dev/a", "a")
			if c.saveFirst {
				require.Equal(t, 2, e.saved(in.ID, types.SaveRequest{}).Version, "within the quota")
			}
			u, err := e.svc.Usage(e.ctx, e.user, "")
			require.NoError(t, err)
			_, err = e.svc.SetQuota(e.ctx, e.admin, testTenant, c.quota(u))
			require.NoError(t, err)

			versionsBefore, blobs, pushes := e.versionsOf(project), e.registryBlobs(), e.reg.pushCount()
			e.write(in.ID, "home/dev/b", "more than one byte of changes")
			op := e.save(in.ID, types.SaveRequest{})
			assert.ErrorIs(t, opErr(t, op), errdefs.ErrQuotaExceeded)
			assert.Equal(t, []string{"spooled", "encoded", string(types.OpFailed)}, e.eventTypes(e.user, op.ID), "refused before the push")
			assert.Equal(t, pushes, e.reg.pushCount())
			assert.Equal(t, blobs, e.registryBlobs(), "nothing uploaded")
			assert.Equal(t, versionsBefore, e.versionsOf(project))
			assert.Empty(t, e.workDirEntries())
			assert.Equal(t, types.StateRunning, e.getInstance(in.ID).State)
			assert.Equal(t, "running", e.task(in.ID))
			_, err = e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, in.ID)
			require.NoError(t, err)
		})
	}
}

// Instance and TTL quotas are checked before anything is made.
func testInstanceQuota(t *testing.T, e *coreEnv) {
	e = e.with(t)
	e.project("web")
	_, err := e.svc.SetQuota(e.ctx, e.admin, testTenant, types.Quota{MaxInstances: 1, MaxTTL: "1h"})
	require.NoError(t, err)

	t.Run("ttl", func(t *testing.T) {
		e := e.with(t)
		for _, c := range []struct {
			ttl  string
			want error
		}{
			{"none", errdefs.ErrQuotaExceeded},
			{"2h", errdefs.ErrQuotaExceeded},
			{"soon", errdefs.ErrInvalidArgument},
		} {
			_, err := e.svc.Parts().Instances.CreateInstance(e.ctx, e.user, "web", types.CreateInstanceRequest{TTL: c.ttl}, "")
			assert.ErrorIs(t, err, c.want, c.ttl)
		}
		assert.Empty(t, listIDs(t, e, "web"), "nothing made")
	})

	first := e.instance("web", types.CreateInstanceRequest{Retain: true})
	t.Run("the default ttl is cut to the tenant's maximum", func(t *testing.T) {
		require.NotNil(t, first.ExpiresAt)
		assert.WithinDuration(t, time.Now().Add(time.Hour), *first.ExpiresAt, time.Minute)
	})

	t.Run("instances", func(t *testing.T) {
		e := e.with(t)
		_, err := e.svc.Parts().Instances.CreateInstance(e.ctx, e.user, "web", types.CreateInstanceRequest{}, "")
		require.ErrorIs(t, err, errdefs.ErrQuotaExceeded)
		assert.Equal(t, map[string]any{"quota": "instances", "limit": int64(1), "used": int64(1), "requested": int64(1)}, errdefs.Details(err))
		_, err = e.svc.Parts().Instances.Restore(e.ctx, e.user, "web", types.CreateInstanceRequest{}, "")
		assert.ErrorIs(t, err, errdefs.ErrQuotaExceeded, "refused before an operation exists")
		assert.Equal(t, []string{first.ID}, listIDs(t, e, "web"))

		// A stopped instance holds no compute: another may run, and then the
		// stopped one cannot start.
		_, err = e.svc.Parts().Instances.StopInstance(e.ctx, e.user, first.ID)
		require.NoError(t, err)
		second := e.instance("web", types.CreateInstanceRequest{})
		_, err = e.svc.Parts().Instances.StartInstance(e.ctx, e.user, first.ID)
		assert.ErrorIs(t, err, errdefs.ErrQuotaExceeded)
		assert.Equal(t, types.StateStopped, e.getInstance(first.ID).State)
		_, err = e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, second.ID)
		require.NoError(t, err)
		started, err := e.svc.Parts().Instances.StartInstance(e.ctx, e.user, first.ID)
		require.NoError(t, err)
		assert.Equal(t, types.StateRunning, started.State)

		u, err := e.svc.Usage(e.ctx, e.user, "")
		require.NoError(t, err)
		assert.Equal(t, 1, u.Instances)
		assert.Equal(t, 1, u.Quota.MaxInstances)
		_, err = e.svc.Usage(e.ctx, e.user, "admin")
		assert.ErrorIs(t, err, errdefs.ErrPermissionDenied, "another tenant's usage")
		_, err = e.svc.SetQuota(e.ctx, e.user, testTenant, types.Quota{})
		assert.ErrorIs(t, err, errdefs.ErrPermissionDenied, "quotas are the admin's")
	})
}

func listIDs(t *testing.T, e *coreEnv, project string) []string {
	t.Helper()
	ins, err := e.svc.Parts().Instances.ListInstances(e.ctx, e.user, project)
	require.NoError(t, err)
	var out []string
	for _, in := range ins {
		if in.State != types.StateTerminated && in.State != types.StateFailed {
			out = append(out, in.ID)
		}
	}
	return out
}
