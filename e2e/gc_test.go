package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// A GC deletes what the retention policy does not keep: an abandoned
// branch (version 2, after a rollback to another line) goes, with its
// manifest and the layer only it used; current and the version a running
// instance uses stay and still restore.
func TestRootGCCollectsAnAbandonedBranch(t *testing.T) {
	c := ctx(t)
	p := newProject(t, "gc")
	a := up(t, p, 0)
	mustSh(t, a.ID, "head -c 1048576 /dev/urandom > /a")
	_, v2 := save(t, a.ID, "branch a")
	require.True(t, v2.Current)

	b := up(t, p, 1)
	mustSh(t, b.ID, "head -c 1048576 /dev/urandom > /b")
	_, v3 := save(t, b.ID, "branch b")
	require.True(t, v3.Conflict, "version 2 is current: the other branch's save does not switch")
	_, err := env.c.SetCurrent(c, p, types.SetCurrentRequest{Version: v3.Version, ExpectedCurrent: &v2.Version})
	require.NoError(t, err)
	_, err = env.c.DeleteInstance(c, a.ID) // nothing uses version 2 any more
	require.NoError(t, err)

	proj, err := env.c.SetRetention(c, p, types.Retention{KeepLast: 1})
	require.NoError(t, err)
	require.NotNil(t, proj.Retention)

	res := runGC(t, true)
	assert.Equal(t, []int{v2.Version}, collected(res, p), "dry run: version 2 only")
	_, err = env.c.GetVersion(c, p, v2.Version)
	require.NoError(t, err, "a dry run deletes nothing")

	gone, err := env.c.GetVersion(c, p, v2.Version)
	require.NoError(t, err)
	res = runGC(t, false)
	assert.Equal(t, []int{v2.Version}, collected(res, p))
	require.True(t, res.Swept, res.Note)
	assert.Less(t, res.BlobsAfter, res.BlobsBefore)
	assert.GreaterOrEqual(t, res.BytesBefore-res.BytesAfter, int64(1<<20), "the layer only version 2 used is freed")

	_, err = env.c.GetVersion(c, p, v2.Version)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = env.node.RegistryClient().Get(c, gone.Image)
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "its manifest is deleted")

	vs, err := env.c.ListVersions(c, p)
	require.NoError(t, err)
	var left []int
	for _, v := range vs {
		left = append(left, v.Number)
	}
	assert.Equal(t, []int{1, v3.Version}, left)
	d := up(t, p, 0)
	assert.Equal(t, "1048576", mustSh(t, d.ID, "wc -c < /b"), "current restores after the GC")
	assert.Equal(t, "gone", mustSh(t, d.ID, "test -e /a || echo gone"))

	// Nothing left to collect.
	res = runGC(t, false)
	assert.Empty(t, collected(res, p))
}

func runGC(t *testing.T, dryRun bool) types.GCResult {
	t.Helper()
	op, err := env.c.GC(ctx(t), types.GCRequest{DryRun: dryRun})
	return succeeded[types.GCResult](t, op, err)
}

// collected lists the versions of project p a GC result names.
func collected(res types.GCResult, p string) []int {
	var out []int
	for _, v := range res.Versions {
		if v.Project == p {
			out = append(out, v.Version)
		}
	}
	return out
}

// A deleted project's volumes stay on the node until a gc there removes
// them (a dry run only lists them).
func TestRootGCRemovesVolumesOfDeletedProjects(t *testing.T) {
	c := ctx(t)
	p := fmt.Sprintf("gcvol-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase, Volumes: []string{"work:/workspace:0:0:16M"}})
	require.NoError(t, err)
	in, err := env.c.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	mustSh(t, in.ID, "echo kept > /workspace/f")
	_, err = env.c.DeleteInstance(c, in.ID)
	require.NoError(t, err)
	require.NoError(t, env.c.DeleteProject(c, p))
	left, _ := filepath.Glob(filepath.Join(env.dataDir, "volumes", "*", p, "work", "disk.img"))
	require.Len(t, left, 1, "the volume outlives its project until a gc")

	res := runGC(t, true)
	assert.Equal(t, []string{"/" + p + "/work"}, orphansOf(res, p), "listed by a dry run")
	left, _ = filepath.Glob(filepath.Join(env.dataDir, "volumes", "*", p, "work", "disk.img"))
	assert.Len(t, left, 1, "kept by a dry run")

	res = runGC(t, false)
	assert.Equal(t, []string{"/" + p + "/work"}, orphansOf(res, p))
	left, _ = filepath.Glob(filepath.Join(env.dataDir, "volumes", "*", p))
	assert.Empty(t, left, "removed")
}

// orphansOf returns the orphan volumes of project p in res, without their
// tenant.
func orphansOf(res types.GCResult, p string) []string {
	var out []string
	for _, v := range res.OrphanVolumes {
		if i := strings.Index(v, "/"+p+"/"); i >= 0 {
			out = append(out, v[i:])
		}
	}
	return out
}
