package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/internal/proc"
)

// On a node with shim groups (--shim-group-size 16; opt-in) a tenant's
// instances share containerd shims. A shim killed takes only its own
// tenant's instances: they are Failed at once with reason shim_lost and a
// message that says what happened; another tenant's instance runs on and
// answers; a new instance of the dead shim's tenant starts (in a new shim).
func TestRootShimDeathFailsOnlyItsTenant(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	n, _ := startJoiningNode(t, "shimgroups", &node.Config{ShimGroupSize: 16, PrefetchWindow: -1})
	_, ca := newTenantAt(t, n.URL, "shim-a")
	_, cb := newTenantAt(t, n.URL, "shim-b")
	upIn := func(tc *client.Client) types.Instance {
		t.Helper()
		in, err := tc.CreateInstance(c, "shims", types.CreateInstanceRequest{})
		require.NoError(t, err)
		require.Equal(t, types.StateRunning, in.State)
		t.Cleanup(func() { _, _ = tc.DeleteInstance(ctx(t), in.ID) })
		return in
	}
	for _, tc := range []*client.Client{ca, cb} {
		_, err := tc.CreateProject(c, types.CreateProjectRequest{Name: "shims", Base: fixtureBase})
		require.NoError(t, err)
	}
	a1, a2, b1 := upIn(ca), upIn(ca), upIn(cb)
	shim := shimPid(t, n, a1.ID)
	require.Equal(t, shim, shimPid(t, n, a2.ID), "one tenant's instances share a shim")
	bShim := shimPid(t, n, b1.ID)
	require.NotEqual(t, shim, bShim, "another tenant's instance has a shim of its own")

	require.NoError(t, syscall.Kill(shim, syscall.SIGKILL))
	for _, in := range []types.Instance{a1, a2} {
		var got types.Instance
		require.Eventually(t, func() bool {
			var err error
			got, err = ca.GetInstance(c, in.ID)
			return err == nil && got.State == types.StateFailed
		}, 30*time.Second, 50*time.Millisecond, "instance %s of the dead shim is Failed", in.ID)
		assert.Equal(t, types.ReasonShimLost, got.Reason)
		assert.Contains(t, got.Message, "shim is gone")
	}
	got, err := cb.GetInstance(c, b1.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, got.State, "the other tenant's instance runs on")
	assert.Equal(t, bShim, shimPid(t, n, b1.ID))
	res, err := cb.Exec(c, b1.ID, types.ExecRequest{Args: []string{"echo", "still here"}})
	require.NoError(t, err)
	assert.Equal(t, "still here\n", res.Stdout)

	a3 := upIn(ca)
	assert.NotEqual(t, shim, shimPid(t, n, a3.ID), "a new shim for the tenant")
	res, err = ca.Exec(c, a3.ID, types.ExecRequest{Args: []string{"echo", "new shim"}})
	require.NoError(t, err)
	assert.Equal(t, "new shim\n", res.Stdout)
}

// shimPid is the pid of the containerd shim serving instance id's task:
// the parent of its init (the shim is the subreaper its init is left to).
func shimPid(t *testing.T, n *node.Node, id string) int {
	t.Helper()
	st, err := n.Runtime().Status(ctx(t), id)
	require.NoError(t, err)
	require.NotZero(t, st.Pid, "instance %s has no task", id)
	ppid, comm, err := proc.Parent(int(st.Pid))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(comm, "containerd-shim"), "parent of %s's init is %q", id, comm)
	return ppid
}
