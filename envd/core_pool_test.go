package envd_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// A warm pool: filled in the background with instances nobody sees, a
// plain `up` claims one, the pool refills, a new current version replaces
// the pooled ones, a request that asks more is not served from it, and
// size 0 empties it.
func TestCorePool(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, func(c *envd.Config) { c.PoolInterval = 50 * time.Millisecond })
	e.project("warm")
	pooled := func() versions.PoolState {
		t.Helper()
		sts, err := e.store.Instances.PoolStates(e.ctx, testNode)
		require.NoError(t, err)
		for _, st := range sts {
			if st.Project == "warm" {
				return st
			}
		}
		return versions.PoolState{}
	}
	poolIDs := func() []string {
		t.Helper()
		rows, err := e.store.Pool().Query(e.ctx, `SELECT instance_id FROM pool_instances ORDER BY instance_id`)
		require.NoError(t, err)
		defer rows.Close()
		var ids []string
		for rows.Next() {
			var id string
			require.NoError(t, rows.Scan(&id))
			ids = append(ids, id)
		}
		return ids
	}
	eventually := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			require.True(t, time.Now().Before(deadline), "waited 30s for %s", what)
			time.Sleep(20 * time.Millisecond)
		}
	}

	p, err := e.svc.SetProjectPool(e.ctx, e.user, "warm", types.PoolSetting{Size: 2})
	require.NoError(t, err)
	require.Equal(t, &types.PoolSetting{Size: 2}, p.Pool)
	eventually("two pooled instances", func() bool { return pooled().Ready == 2 })
	ins, err := e.svc.Parts().Instances.ListInstances(e.ctx, e.user, "warm")
	require.NoError(t, err)
	assert.Empty(t, ins, "pooled instances are not the tenant's to see")
	before := poolIDs()
	require.Len(t, before, 2)
	_, err = e.svc.Parts().Instances.GetInstance(e.ctx, e.user, before[0])
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "nor to reach, so nothing runs in them before a claim")

	in := e.instance("warm", types.CreateInstanceRequest{TTL: "1h"})
	assert.Contains(t, before, in.ID, "a plain up claims a pooled instance")
	require.NotNil(t, in.ExpiresAt)
	assert.WithinDuration(t, time.Now().Add(time.Hour), *in.ExpiresAt, time.Minute)
	eventually("the pool refilled", func() bool { return pooled().Ready == 2 && !slices.Contains(poolIDs(), in.ID) })

	// A client's retry with the same idempotency key gets the instance the
	// pool handed out, not a second one.
	inPool := poolIDs()
	keyed, err := e.svc.Parts().Instances.CreateInstance(e.ctx, e.user, "warm", types.CreateInstanceRequest{}, "pool-key-1")
	require.NoError(t, err)
	assert.Contains(t, inPool, keyed.ID, "a keyed create is served from the pool too")
	again, err := e.svc.Parts().Instances.CreateInstance(e.ctx, e.user, "warm", types.CreateInstanceRequest{}, "pool-key-1")
	require.NoError(t, err)
	assert.Equal(t, keyed.ID, again.ID)
	eventually("the pool refilled again", func() bool { return pooled().Ready == 2 })

	kept := e.instance("warm", types.CreateInstanceRequest{Retain: true})
	assert.NotContains(t, poolIDs(), kept.ID)
	assert.True(t, kept.Retain, "a request for more than the pool offers starts its own instance")

	e.write(in.ID, "home/new", "v2\n")
	res := e.saved(in.ID, types.SaveRequest{})
	require.True(t, res.Current)
	eventually("the pool holds the new version", func() bool {
		st := pooled()
		return st.Current == res.Version && st.Ready == 2 && len(st.Stale) == 0
	})
	next := e.instance("warm", types.CreateInstanceRequest{})
	assert.Equal(t, res.Version, next.Version, "never an instance of an old version")

	_, err = e.svc.SetProjectPool(e.ctx, e.user, "warm", types.PoolSetting{Size: 0})
	require.NoError(t, err)
	eventually("the pool emptied", func() bool { return len(poolIDs()) == 0 })
	_, err = e.svc.SetProjectPool(e.ctx, e.user, "warm", types.PoolSetting{Size: 21})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}

// After a claim the pool waits its refill delay before starting a
// replacement, so the start does not compete with the claimed instance's
// first commands; then it refills.
func TestCorePoolRefillWaitsAfterClaim(t *testing.T) {
	t.Parallel()
	const delay = 3 * time.Second
	e := newCoreEnv(t, func(c *envd.Config) {
		c.PoolInterval = 50 * time.Millisecond
		c.PoolRefillDelay = delay
	})
	e.project("warm")
	pooled := func() int {
		t.Helper()
		var n int
		require.NoError(t, e.store.Pool().QueryRow(e.ctx, `SELECT count(*) FROM pool_instances`).Scan(&n))
		return n
	}
	_, err := e.svc.SetProjectPool(e.ctx, e.user, "warm", types.PoolSetting{Size: 2})
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for pooled() != 2 {
		require.True(t, time.Now().Before(deadline), "waited 30s for the pool to fill")
		time.Sleep(20 * time.Millisecond)
	}

	claimed := time.Now()
	in := e.instance("warm", types.CreateInstanceRequest{})
	require.Equal(t, "claimed from the pool", in.Message)
	res, err := e.svc.Parts().Instances.Exec(e.ctx, e.user, in.ID, types.ExecRequest{Args: []string{"true"}})
	require.NoError(t, err)
	assert.Equal(t, 0, res.ExitCode)
	for time.Since(claimed) < delay-time.Second {
		require.Equal(t, 1, pooled(), "no replacement starts within the refill delay after a claim")
		time.Sleep(50 * time.Millisecond)
	}
	deadline = time.Now().Add(30 * time.Second)
	for pooled() != 2 {
		require.True(t, time.Now().Before(deadline), "waited 30s for the pool to refill after the delay")
		time.Sleep(20 * time.Millisecond)
	}
	assert.GreaterOrEqual(t, time.Since(claimed), delay, "the refill started after the delay")
}

// Claims in a row hold the refill back at most a few refill delays: a
// steady stream of `up`s, each within the delay of the last, is served from
// the pool throughout, where the pool alone would run dry.
func TestCorePoolRefillNotStarvedByClaims(t *testing.T) {
	t.Parallel()
	// Claims come every 300 ms, faster than the refill delay (400 ms): a
	// delay that each claim put back would never let a refill start while
	// they go on. The pool holds as many instances as there are claims, so
	// every up is served from it however slow the refills are on a loaded
	// machine; what the test asks is that refills ran during the claims.
	const (
		delay  = 400 * time.Millisecond // refills held back at most 2 s
		claims = 20                     // one every 300 ms, 6 s in all
	)
	e := newCoreEnv(t, func(c *envd.Config) {
		c.PoolInterval = 50 * time.Millisecond
		c.PoolRefillDelay = delay
	})
	e.project("warm")
	_, err := e.svc.SetProjectPool(e.ctx, e.user, "warm", types.PoolSetting{Size: claims})
	require.NoError(t, err)
	pooled := func() (n int) {
		require.NoError(t, e.store.Pool().QueryRow(e.ctx, `SELECT count(*) FROM pool_instances`).Scan(&n))
		return n
	}
	deadline := time.Now().Add(60 * time.Second)
	for pooled() != claims {
		require.True(t, time.Now().Before(deadline), "waited 60s for the pool to fill")
		time.Sleep(20 * time.Millisecond)
	}

	var cold []int
	for i := range claims {
		in := e.instance("warm", types.CreateInstanceRequest{})
		if in.Message != "claimed from the pool" {
			cold = append(cold, i)
		}
		_, err := e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)
		if i == claims-1 {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	// Without refills the pool would be empty now, and the last claim was
	// just made: what it holds was refilled while the claims went on.
	assert.Positive(t, pooled(), "refills ran while claims went on")
	assert.Empty(t, cold, "every up was served from the pool (these were not)")
}
