package envd_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Retention selection: which versions a GC collects under each policy.
// The base, the current, pinned versions and those an instance uses are
// kept whatever the policy; a real GC deletes the rows and the manifests
// of the others and sweeps their blobs.
func TestCoreRetention(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	e.project("web")
	saver := e.instance("web", types.CreateInstanceRequest{})
	for i := range 5 { // versions 2..6; 6 is current
		e.write(saver.ID, "home/dev/n", itoa(i))
		require.Equal(t, 2+i, e.saved(saver.ID, types.SaveRequest{}).Version)
	}
	_, err := e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, saver.ID) // a Terminated instance keeps nothing
	require.NoError(t, err)
	_, err = e.svc.PinVersion(e.ctx, e.user, "web", 3, true)
	require.NoError(t, err)
	user := e.instance("web", types.CreateInstanceRequest{Version: 2}) // runs version 2
	require.Equal(t, 6, e.current("web"))

	gc := func(t *testing.T, dryRun bool) types.GCResult {
		t.Helper()
		op, err := e.svc.GC(e.ctx, e.admin, types.GCRequest{DryRun: dryRun}, "")
		require.NoError(t, err)
		op = e.with(t).wait(e.admin, op.ID)
		require.Equal(t, types.OpSucceeded, op.State, "%+v", op.Error)
		var res types.GCResult
		require.NoError(t, json.Unmarshal(op.Result, &res))
		return res
	}
	collected := func(t *testing.T, res types.GCResult) []int {
		var out []int
		for _, v := range res.Versions {
			require.Equal(t, "web", v.Project)
			out = append(out, v.Version)
		}
		slices.Sort(out)
		return out
	}

	for _, c := range []struct {
		name   string
		policy types.Retention
		want   []int
	}{
		{"no policy keeps everything", types.Retention{}, nil},
		{"keep last 1", types.Retention{KeepLast: 1}, []int{4, 5}},
		{"keep last 2", types.Retention{KeepLast: 2}, []int{4}},
		{"keep last 5", types.Retention{KeepLast: 5}, nil},
		{"keep newer than an hour", types.Retention{KeepNewerThan: "1h"}, nil},
		{"keep last 1 or newer than an hour", types.Retention{KeepLast: 1, KeepNewerThan: "1h"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := e.with(t)
			_, err := e.svc.SetRetention(e.ctx, e.user, "web", c.policy)
			require.NoError(t, err)
			res := gc(t, true)
			assert.True(t, res.DryRun)
			assert.Equal(t, c.want, collected(t, res))
			assert.Equal(t, []string{"1:ready", "2:ready", "3:ready", "4:ready", "5:ready", "6:ready:current"}, e.versionsOf("web"),
				"a dry run deletes nothing")
		})
	}

	t.Run("gc deletes what the policy does not keep, and sweeps its blobs", func(t *testing.T) {
		e := e.with(t)
		_, err := e.svc.SetRetention(e.ctx, e.user, "web", types.Retention{KeepLast: 1})
		require.NoError(t, err)
		images := map[int]string{}
		for n := 1; n <= 6; n++ {
			v, err := e.svc.GetVersion(e.ctx, e.user, "web", n)
			require.NoError(t, err)
			images[n] = v.Image
		}
		res := gc(t, false)
		assert.Equal(t, []int{4, 5}, collected(t, res))
		assert.True(t, res.Swept)
		assert.Less(t, res.BlobsAfter, res.BlobsBefore)
		assert.Equal(t, []string{"1:ready", "2:ready", "3:ready", "6:ready:current"}, e.versionsOf("web"))
		for n, ref := range images {
			_, err := e.reg.Get(e.ctx, ref)
			if n == 4 || n == 5 {
				assert.ErrorIs(t, err, errdefs.ErrNotFound, "version %d's manifest", n)
			} else {
				assert.NoError(t, err, "version %d's manifest", n)
			}
		}
		_, err = e.svc.SetCurrent(e.ctx, e.user, "web", types.SetCurrentRequest{Version: 4, ExpectedCurrent: intp(6)})
		assert.ErrorIs(t, err, errdefs.ErrNotFound, "a collected version is gone")

		// Once nothing uses version 2, the policy collects it too.
		_, err = e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, user.ID)
		require.NoError(t, err)
		assert.Equal(t, []int{2}, collected(t, gc(t, true)))
	})

	t.Run("gc is the admin's", func(t *testing.T) {
		e := e.with(t)
		_, err := e.svc.GC(e.ctx, e.user, types.GCRequest{}, "")
		assert.ErrorIs(t, err, errdefs.ErrPermissionDenied)
	})

	t.Run("deleting a project drops its manifests, not the base image", func(t *testing.T) {
		e := e.with(t)
		vs, err := e.svc.ListVersions(e.ctx, e.user, "web")
		require.NoError(t, err)
		live := e.instance("web", types.CreateInstanceRequest{})
		assert.ErrorIs(t, e.svc.DeleteProject(e.ctx, e.user, "web"), errdefs.ErrFailedPrecondition, "it has a live instance")
		_, err = e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, live.ID)
		require.NoError(t, err)
		require.NoError(t, e.svc.DeleteProject(e.ctx, e.user, "web"))
		_, err = e.svc.GetProject(e.ctx, e.user, "web")
		assert.ErrorIs(t, err, errdefs.ErrNotFound)
		for _, v := range vs {
			_, err := e.reg.Get(e.ctx, v.Image)
			if v.Kind == "base" {
				assert.NoError(t, err, "the imported base image stays")
			} else {
				assert.ErrorIs(t, err, errdefs.ErrNotFound, "version %d's manifest", v.Number)
			}
		}
	})
}
