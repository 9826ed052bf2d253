package e2e

import (
	"fmt"
	"sync"
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// N instances started on the same version save at once: exactly one
// becomes current, the others are ready versions that report a conflict.
func TestRootConcurrentSavesOneWins(t *testing.T) {
	t.Parallel()
	const n = 4
	p := newProject(t, "cas")
	ids := make([]string, n)
	for i := range ids {
		ids[i] = up(t, p, 0).ID
		mustSh(t, ids[i], fmt.Sprintf("echo %d > /who", i))
	}
	ops := make([]string, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range ids {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			op, err := env.c.Save(ctx(t), ids[i], types.SaveRequest{Message: fmt.Sprint(i)}, "")
			ops[i], errs[i] = op.ID, err
		}(i)
	}
	wg.Wait()
	var winners []types.SaveResult
	seen := map[int]bool{}
	for i := range ops {
		require.NoError(t, errs[i])
		_, res := waitSave(t, ops[i])
		assert.False(t, seen[res.Version], "version numbers are unique")
		seen[res.Version] = true
		assert.Equal(t, 1, res.Expected)
		assert.NotEqual(t, res.Current, res.Conflict)
		if res.Current {
			winners = append(winners, res)
		}
	}
	require.Len(t, winners, 1, "exactly one save becomes current")
	proj, err := env.c.GetProject(ctx(t), p)
	require.NoError(t, err)
	assert.Equal(t, winners[0].Version, proj.Current)
	vs, err := env.c.ListVersions(ctx(t), p)
	require.NoError(t, err)
	require.Len(t, vs, n+1)
	for _, v := range vs {
		assert.Equal(t, "ready", v.State, "version %d", v.Number)
		assert.Equal(t, v.Number == proj.Current, v.Current)
	}
	// A loser's version can still be started and has its change.
	for v := range seen {
		if v == proj.Current {
			continue
		}
		in := up(t, p, v)
		mustSh(t, in.ID, "test -s /who")
		break
	}
}

// Saving twice from one instance replaces the top layer, and switching
// current back rolls new instances back; a stale expectation is refused.
func TestRootRepeatedSaveAndRollback(t *testing.T) {
	t.Parallel()
	p := newProject(t, "rollback")
	a := up(t, p, 0)
	mustSh(t, a.ID, "echo one > /first")
	_, r1 := save(t, a.ID, "first")
	mustSh(t, a.ID, "echo two > /second")
	_, r2 := save(t, a.ID, "second")
	assert.True(t, r1.Current)
	assert.True(t, r2.Current, "a second save from the same instance expects its own last save")
	assert.Equal(t, r1.Version, r2.Expected)

	v1, err := env.c.GetVersion(ctx(t), p, 1)
	require.NoError(t, err)
	v2, err := env.c.GetVersion(ctx(t), p, r1.Version)
	require.NoError(t, err)
	v3, err := env.c.GetVersion(ctx(t), p, r2.Version)
	require.NoError(t, err)
	assert.Equal(t, v1.Layers+1, v2.Layers)
	assert.Equal(t, v2.Layers, v3.Layers, "repeated saves replace the instance's layer instead of stacking")

	b := up(t, p, 0)
	mustSh(t, b.ID, `[ "$(cat /first /second)" = "$(printf 'one\ntwo')" ]`)

	// Roll back with the right expectation.
	exp := r2.Version
	proj, err := env.c.SetCurrent(ctx(t), p, types.SetCurrentRequest{Version: 1, ExpectedCurrent: &exp})
	require.NoError(t, err)
	assert.Equal(t, 1, proj.Current)
	c := up(t, p, 0)
	assert.Equal(t, 1, c.Version)
	mustSh(t, c.ID, "[ ! -e /first ] && [ ! -e /second ]")

	// A stale expectation loses, and nothing changes.
	_, err = env.c.SetCurrent(ctx(t), p, types.SetCurrentRequest{Version: r1.Version, ExpectedCurrent: &exp})
	require.ErrorIs(t, err, errdefs.ErrConflict)
	proj, err = env.c.GetProject(ctx(t), p)
	require.NoError(t, err)
	assert.Equal(t, 1, proj.Current)

	// The instance started from version 1 saves with expectation 1: wins.
	mustSh(t, c.ID, "echo three > /third")
	_, r3 := save(t, c.ID, "third")
	assert.True(t, r3.Current)
}
