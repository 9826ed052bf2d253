package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

// A fork saves the instance as a version that is not current and starts a
// second instance from it: both carry on from the same point, apart, and
// the first one's own saves go on as before.
func TestRootFork(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := newProject(t, "fork")
	a := up(t, p, 0)
	mustSh(t, a.ID, "echo shared > /point")

	op, err := env.c.Fork(c, a.ID, types.ForkRequest{Message: "try path b", TTL: "30m"}, "")
	require.NoError(t, err)
	assert.Equal(t, types.OpKindFork, op.Kind)
	res := succeeded[types.ForkResult](t, op, err)
	b := res.Instance
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(c, b.ID) })
	require.Len(t, res.Instances, 1, "one new instance by default")
	assert.Equal(t, b.ID, res.Instances[0].ID)
	assert.Zero(t, res.Checkpoint, "a fork without memory makes no checkpoint")
	assert.Equal(t, types.StateRunning, b.State)
	assert.Equal(t, res.Version, b.Version)
	assert.NotEqual(t, a.ID, b.ID)

	v, err := env.c.GetVersion(c, p, res.Version)
	require.NoError(t, err)
	assert.False(t, v.Current, "a fork does not move current")
	assert.Equal(t, "try path b", v.Message)
	proj, err := env.c.GetProject(c, p)
	require.NoError(t, err)
	assert.Equal(t, 1, proj.Current)

	assert.Equal(t, "shared", mustSh(t, b.ID, "cat /point"))
	mustSh(t, a.ID, "echo a > /path")
	mustSh(t, b.ID, "echo b > /path")
	assert.Equal(t, "a", mustSh(t, a.ID, "cat /path"), "the two instances are apart")
	assert.Equal(t, "b", mustSh(t, b.ID, "cat /path"))

	// The first instance's own save still expects version 1 and becomes
	// current: the fork did not count as its save.
	_, saved := save(t, a.ID, "path a")
	assert.True(t, saved.Current)
	assert.False(t, saved.Conflict)

	events, err := env.c.OperationEvents(c, op.ID, 0)
	require.NoError(t, err)
	var types_ []string
	for _, e := range events {
		types_ = append(types_, e.Type)
	}
	assert.Contains(t, types_, "committed")
	assert.Contains(t, types_, "started")
}
