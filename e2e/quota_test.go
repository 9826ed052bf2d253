package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
)

// A tenant's quota refuses, before anything is made, what would exceed it:
// a second live instance, a TTL past its maximum, a save whose layer does
// not fit (the instance and its changes untouched, no version); the
// numbers come with the 507.
func TestRootQuotas(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	tenant := fmt.Sprintf("quota-%d", projectSeq.Add(1))
	tok, err := env.c.CreateToken(c, tenant, types.CreateTokenRequest{})
	require.NoError(t, err)
	tc, err := client.New(env.node.URL, tok.Token)
	require.NoError(t, err)
	_, err = env.c.SetQuota(c, tenant, types.Quota{MaxInstances: 1, MaxStoredBytes: 512 << 10, MaxTTL: "1h"})
	require.NoError(t, err)

	const p = "quota"
	_, err = tc.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	in, err := tc.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = tc.DeleteInstance(context.Background(), in.ID) })
	require.NotNil(t, in.ExpiresAt, "the default TTL is cut to the tenant's maximum")

	_, err = tc.CreateInstance(c, p, types.CreateInstanceRequest{})
	quotaRefusal(t, err, "instances", 1, 1)
	_, err = tc.Restore(c, p, types.CreateInstanceRequest{TTL: "none"})
	assert.ErrorIs(t, err, errdefs.ErrQuotaExceeded, "no TTL is refused under a maximum TTL")
	_, err = tc.RenewInstance(c, in.ID, "2h")
	assert.ErrorIs(t, err, errdefs.ErrQuotaExceeded)
	list, err := tc.ListInstances(c, p)
	require.NoError(t, err)
	assert.Len(t, list, 1, "refusals made nothing")

	sh := func(script string) types.ExecResult {
		t.Helper()
		res, err := tc.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", script}})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, res.Stderr)
		return res
	}
	sh("head -c 1048576 /dev/urandom > /big")
	op, err := tc.Save(c, in.ID, types.SaveRequest{Message: "too big"}, "")
	require.NoError(t, err)
	done, err := tc.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, types.OpFailed, done.State)
	require.NotNil(t, done.Error)
	assert.Equal(t, "quota_exceeded", done.Error.Code, done.Error.Message)
	vs, err := tc.ListVersions(c, p)
	require.NoError(t, err)
	assert.Len(t, vs, 1, "no version")
	assert.Equal(t, "1048576\n", sh("wc -c < /big").Stdout, "the instance and its changes are untouched")

	sh("rm /big && echo small > /small")
	_, err = tc.Save(c, in.ID, types.SaveRequest{Message: "fits"}, "")
	require.NoError(t, err)
	u, err := tc.Usage(c, "")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		u, err = tc.Usage(c, "")
		return err == nil && u.Versions[p] == 2
	}, time.Minute, 200*time.Millisecond, "the small save lands")
	assert.Equal(t, 1, u.Instances)
	assert.Positive(t, u.VersionBytes)
	assert.Less(t, u.StoredBytes, int64(512<<10))
	assert.Equal(t, types.Quota{MaxInstances: 1, MaxStoredBytes: 512 << 10, MaxTTL: "1h0m0s"}, u.Quota)

	_, err = tc.Usage(c, "someone-else")
	assert.ErrorIs(t, err, errdefs.ErrPermissionDenied)
	_, err = tc.SetQuota(c, tenant, types.Quota{})
	assert.ErrorIs(t, err, errdefs.ErrPermissionDenied, "a tenant cannot lift its own quota")

	// Another tenant's version is no base for this one, even by digest.
	other := newProject(t, "xtenant")
	oi := up(t, other, 0)
	mustSh(t, oi.ID, "echo private > /secret")
	_, saved := save(t, oi.ID, "private")
	_, err = tc.CreateProject(c, types.CreateProjectRequest{Name: "steal", Base: saved.Image})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

func quotaRefusal(t *testing.T, err error, what string, limit, used float64) {
	t.Helper()
	var ce *types.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 507, ce.Status)
	assert.Equal(t, "quota_exceeded", ce.Code)
	assert.Equal(t, what, ce.Details["quota"])
	assert.Equal(t, limit, ce.Details["limit"])
	assert.Equal(t, used, ce.Details["used"])
}

// The node's defaults are dense and bounded: every instance gets the
// default memory limit (shown with the instance, applied to its cgroup),
// and writable layers are thinly provisioned, so twelve instances whose
// disk limits add up to half again the node's real free disk all start.
func TestRootDenseDefaults(t *testing.T) {
	c := ctx(t)
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(env.dataDir, &st))
	free := int64(st.Bavail) * st.Bsize
	perInstance := max(free/8, 1<<30) &^ (1<<20 - 1)
	defaults := node.DefaultConfig().DefaultLimits
	defaults.DiskBytes = perInstance
	n, cl := startJoiningNode(t, "dense", &node.Config{DefaultTTL: time.Hour, PrefetchWindow: -1, DefaultLimits: defaults})
	require.NoError(t, n.Runtime().DiskLimitErr())

	p := fmt.Sprintf("dense-%d", projectSeq.Add(1))
	_, err := cl.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	const count = 12
	t.Logf("%d instances of %d bytes of disk each on %d bytes free", count, perInstance, free)
	var ids []string
	for i := range count {
		in, err := cl.CreateInstance(c, p, types.CreateInstanceRequest{})
		require.NoError(t, err, "instance %d of %d", i+1, count)
		ids = append(ids, in.ID)
		t.Cleanup(func() { _, _ = cl.DeleteInstance(context.Background(), in.ID) })
		require.Equal(t, types.StateRunning, in.State)
	}
	in, err := cl.GetInstance(c, ids[0])
	require.NoError(t, err)
	require.NotNil(t, in.Limits, "envctl show prints the instance's limits")
	assert.Equal(t, int64(2<<30), in.Limits.MemoryBytes, "the default memory limit")
	assert.Equal(t, perInstance, in.Limits.DiskBytes)
	res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c",
		"cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"}})
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%d\n", int64(2<<30)), res.Stdout, res.Stderr)
}

// A node whose disk has no room: placement sends a new instance to a node
// that has room; held to that node (node_selector), it answers the node's
// code, 503 insufficient_capacity, not the tenant's quota_exceeded, and
// nothing runs.
func TestRootFullNodeAnswersInsufficientCapacity(t *testing.T) {
	c := ctx(t)
	label := fmt.Sprintf("full-%d", projectSeq.Add(1))
	_, cl := startJoiningNode(t, "full", &node.Config{DefaultTTL: time.Hour, PrefetchWindow: -1, Labels: map[string]string{"disk": label},
		DefaultLimits: types.Limits{DiskBytes: 64 << 20}, DiskReserveBytes: 1 << 60})
	p := fmt.Sprintf("full-%d", projectSeq.Add(1))
	_, err := cl.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)

	elsewhere, err := cl.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err, "placed on a node with room")
	t.Cleanup(func() { _, _ = cl.DeleteInstance(context.Background(), elsewhere.ID) })
	assert.NotEqual(t, "full", elsewhere.Node)
	assert.Equal(t, types.StateRunning, elsewhere.State)
	assert.Contains(t, elsewhere.Placement, "its real free disk", "the placement says why the full node was passed over")

	_, err = cl.CreateInstance(c, p, types.CreateInstanceRequest{NodeSelector: map[string]string{"disk": label}})
	require.ErrorIs(t, err, errdefs.ErrInsufficientCapacity)
	assert.NotErrorIs(t, err, errdefs.ErrQuotaExceeded)
	assert.ErrorContains(t, err, "node disk")
	var apiErr *types.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 503, apiErr.Status)
	list, err := cl.ListInstances(c, p)
	require.NoError(t, err)
	for _, in := range list {
		if in.ID != elsewhere.ID {
			assert.NotEqual(t, types.StateRunning, in.State, "nothing runs on the full node")
		}
	}
}
