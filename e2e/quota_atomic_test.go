package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// sweepLockWaiters counts the connections waiting for the sweep lock in
// mode (ShareLock: uploads; ExclusiveLock: sweeps).
func sweepLockWaiters(t *testing.T, store *versions.Store, mode string) int {
	t.Helper()
	var n int
	require.NoError(t, store.Pool().QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND classid = x'656e7664'::bigint AND objid = x'67630001'::bigint AND objsubid = 1
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND mode = $1 AND NOT granted`, mode).Scan(&n))
	return n
}

// newTenant makes a tenant with quota q and returns its client.
func newTenantWithQuota(t *testing.T, prefix string, q types.Quota) *client.Client {
	t.Helper()
	tenant, c := newTenant(t, prefix)
	_, err := env.c.SetQuota(ctx(t), tenant, q)
	require.NoError(t, err)
	return c
}

// Two saves that both pass the early quota check (they are held at their
// upload until both have) cannot both commit past max_versions: one
// succeeds, the other fails with quota_exceeded, and the manifest it had
// pushed is deleted.
func TestRootConcurrentSavesQuotaIsAtomic(t *testing.T) {
	c := ctx(t)
	tc := newTenantWithQuota(t, "qatomic", types.Quota{MaxVersions: 2})
	const p = "atomic"
	_, err := tc.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	var ids []string
	for i := range 2 {
		in, err := tc.CreateInstance(c, p, types.CreateInstanceRequest{})
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = tc.DeleteInstance(context.Background(), in.ID) })
		_, err = tc.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", fmt.Sprintf("echo %d > /which", i)}})
		require.NoError(t, err)
		ids = append(ids, in.ID)
	}

	// Hold the sweep lock, as a long sweep would: both saves pass their
	// early check and wait at their upload.
	store, err := versions.Open(c, env.node.DSN())
	require.NoError(t, err)
	defer store.Close()
	release, sweeping, swept := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		swept <- store.Content.Sweep(c, func(context.Context) error { close(sweeping); <-release; return nil })
	}()
	<-sweeping
	var ops []types.Operation
	for _, id := range ids {
		op, err := tc.Save(c, id, types.SaveRequest{}, "")
		require.NoError(t, err)
		ops = append(ops, op)
	}
	require.Eventually(t, func() bool { return sweepLockWaiters(t, store, "ShareLock") == 2 }, 2*time.Minute, 50*time.Millisecond,
		"both saves wait at their upload")
	close(release)
	require.NoError(t, <-swept)

	var ok, refused int
	for _, op := range ops {
		done, err := tc.WaitOperation(c, op.ID, nil)
		require.NoError(t, err)
		if done.State == types.OpSucceeded {
			ok++
			continue
		}
		refused++
		require.NotNil(t, done.Error)
		assert.Equal(t, "quota_exceeded", done.Error.Code, done.Error.Message)
		evs, err := tc.OperationEvents(c, op.ID, 0)
		require.NoError(t, err)
		var pushed string
		for _, e := range evs {
			if e.Type == "pushed" {
				var d struct{ Image string }
				require.NoError(t, json.Unmarshal(e.Data, &d))
				pushed = d.Image
			}
		}
		require.NotEmpty(t, pushed, "the refused save had uploaded its image: the refusal was the commit's")
		_, err = env.node.RegistryClient().Get(c, pushed)
		assert.ErrorIs(t, err, errdefs.ErrNotFound, "the refused commit's manifest is deleted")
	}
	assert.Equal(t, 1, ok)
	assert.Equal(t, 1, refused)
	u, err := tc.Usage(c, "")
	require.NoError(t, err)
	assert.Equal(t, 2, u.Versions[p])
}

// A hibernation the user asks for is checked against the quota like a
// save: refused past it, the instance stays stopped on its layer.
func TestRootUserHibernationChecksQuota(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	tc := newTenantWithQuota(t, "qhib", types.Quota{MaxVersions: 1})
	const p = "hib"
	_, err := tc.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	in, err := tc.CreateInstance(c, p, types.CreateInstanceRequest{Retain: true})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = tc.DeleteInstance(context.Background(), in.ID) })
	_, err = tc.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "echo kept > /kept"}})
	require.NoError(t, err)
	_, err = tc.StopInstance(c, in.ID)
	require.NoError(t, err)

	_, err = tc.HibernateInstance(c, in.ID)
	quotaRefusal(t, err, "versions", 1, 1)
	got, err := tc.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateStopped, got.State)
	assert.Zero(t, got.HibernatedVersion, "not hibernated")
	vs, err := tc.ListVersions(c, p)
	require.NoError(t, err)
	assert.Len(t, vs, 1, "no version")

	_, err = tc.StartInstance(c, in.ID)
	require.NoError(t, err)
	res, err := tc.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/kept"}})
	require.NoError(t, err)
	assert.Equal(t, "kept\n", res.Stdout, "the layer is untouched")
}

// Deleting a project deletes its manifests at once and its blobs at the
// next sweep.
func TestRootProjectDeleteFreesBlobs(t *testing.T) {
	c := ctx(t)
	p := newProject(t, "delblobs")
	in := up(t, p, 0)
	mustSh(t, in.ID, "head -c 1048576 /dev/urandom > /big")
	_, s := save(t, in.ID, "big")
	reg := env.node.RegistryClient()
	img, err := reg.Get(c, s.Image)
	require.NoError(t, err)
	layer := img.Layers[len(img.Layers)-1]
	require.Equal(t, http.StatusOK, blobStatus(t, img.Repo, layer.Digest))

	_, err = env.c.DeleteInstance(c, in.ID)
	require.NoError(t, err)
	require.NoError(t, env.c.DeleteProject(c, p))
	_, err = reg.Get(c, s.Image)
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "the project's manifest is deleted with it")
	base, err := reg.Get(c, "envd/images/"+fixtureBase+":latest")
	require.NoError(t, err, "the imported base stays")

	res := runGC(t, false)
	require.True(t, res.Swept, res.Note)
	assert.Equal(t, http.StatusNotFound, blobStatus(t, img.Repo, layer.Digest), "its layer is swept")
	assert.NoError(t, reg.Verify(c, base))
}

// A failed version counts against the quota until a GC collects it, with
// or without a retention policy; its manifest goes with it.
func TestRootFailedVersionCollected(t *testing.T) {
	c := ctx(t)
	p := newProject(t, "failedv")
	in := up(t, p, 0)
	mustSh(t, in.ID, "echo two > /two")
	_, s := save(t, in.ID, "to fail")
	cur := s.Version
	_, err := env.c.SetCurrent(c, p, types.SetCurrentRequest{Version: 1, ExpectedCurrent: &cur})
	require.NoError(t, err)
	_, err = env.c.DeleteInstance(c, in.ID) // nothing uses it any more
	require.NoError(t, err)
	store, err := versions.Open(c, env.node.DSN())
	require.NoError(t, err)
	defer store.Close()
	proj, err := store.Projects.GetProject(c, adminTenant(t), p)
	require.NoError(t, err)
	require.NoError(t, store.Versions.FailVersion(c, proj.Tenant, p, s.Version))
	u, err := env.c.Usage(c, "")
	require.NoError(t, err)
	assert.Equal(t, 2, u.Versions[p], "the failed version counts")

	res := runGC(t, false)
	assert.Equal(t, []int{s.Version}, collected(res, p))
	u, err = env.c.Usage(c, "")
	require.NoError(t, err)
	assert.Equal(t, 1, u.Versions[p], "and no longer once collected")
	_, err = env.c.GetVersion(c, p, s.Version)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = env.node.RegistryClient().Get(c, s.Image)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

// POST .../current without expected_current is refused: a switch is a
// compare-and-swap, never a blind write.
func TestRootBlindSwitchRefused(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := newProject(t, "blind")
	in := up(t, p, 0)
	_, s := save(t, in.ID, "two")
	_, err := env.c.SetCurrent(c, p, types.SetCurrentRequest{Version: 1})
	var ce *types.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, http.StatusBadRequest, ce.Status)
	assert.Equal(t, "invalid_argument", ce.Code)
	proj, err := env.c.GetProject(c, p)
	require.NoError(t, err)
	assert.Equal(t, s.Version, proj.Current, "nothing changed")

	exp := s.Version
	proj, err = env.c.SetCurrent(c, p, types.SetCurrentRequest{Version: 1, ExpectedCurrent: &exp})
	require.NoError(t, err)
	assert.Equal(t, 1, proj.Current)
}

// blobStatus is the registry's answer to a GET of a blob in repo.
func blobStatus(t *testing.T, repo, digest string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/v2/%s/blobs/%s", env.node.RegistryAddr(), repo, digest), nil)
	require.NoError(t, err)
	setNodeAuth(t, req, env.node)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode
}

// adminTenant is the tenant of the test node's admin token.
func adminTenant(t *testing.T) string {
	t.Helper()
	u, err := env.c.Usage(ctx(t), "")
	require.NoError(t, err)
	return u.Tenant
}
