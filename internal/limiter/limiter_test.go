package limiter_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/limiter"
)

func TestAcquireRefusesPastTheLimitPerTenant(t *testing.T) {
	l := limiter.New(map[string]limiter.Limit{"saves": {Max: 2, RetryAfter: 1500 * time.Millisecond}})
	r1, err := l.Acquire("a", "saves")
	require.NoError(t, err)
	r2, err := l.Acquire("a", "saves")
	require.NoError(t, err)

	_, err = l.Acquire("a", "saves")
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted)
	var ex *limiter.ExhaustedError
	require.True(t, errors.As(err, &ex))
	assert.Equal(t, 2*time.Second, ex.RetryAfter(), "rounded up to whole seconds")
	assert.Equal(t, map[string]any{"kind": "saves", "limit": 2, "retry_after_seconds": 2}, ex.Details())
	assert.Equal(t, "resource_exhausted", errdefs.Code(err))
	assert.Equal(t, 429, errdefs.HTTPStatus(err))

	// Another tenant and another kind are not affected.
	r3, err := l.Acquire("b", "saves")
	require.NoError(t, err)
	r4, err := l.Acquire("a", "exec")
	require.NoError(t, err)

	r1()
	r1() // a second release must not free a slot it does not hold
	assert.Equal(t, 1, l.InUse("a", "saves"))
	r5, err := l.Acquire("a", "saves")
	require.NoError(t, err)
	_, err = l.Acquire("a", "saves")
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted)
	for _, r := range []func(){r2, r3, r4, r5} {
		r()
	}
	assert.Zero(t, l.InUse("a", "saves"))
	assert.Zero(t, l.InUse("b", "saves"))
}

func TestAcquireUnlimited(t *testing.T) {
	for name, l := range map[string]*limiter.Limiter{
		"nil limiter":   nil,
		"zero max":      limiter.New(map[string]limiter.Limit{"exec": {Max: 0}}),
		"negative max":  limiter.New(map[string]limiter.Limit{"exec": {Max: -1}}),
		"kind not set":  limiter.New(map[string]limiter.Limit{"saves": {Max: 1}}),
		"empty limiter": limiter.New(nil),
	} {
		t.Run(name, func(t *testing.T) {
			for range 100 {
				_, err := l.Acquire("a", "exec")
				require.NoError(t, err)
			}
		})
	}
}

// Concurrent acquires never hand out more slots than the limit, and every
// released slot comes back.
func TestAcquireConcurrent(t *testing.T) {
	l := limiter.New(map[string]limiter.Limit{"exec": {Max: 3}})
	var mu sync.Mutex
	held, most := 0, 0
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				release, err := l.Acquire("t", "exec")
				if err != nil {
					continue
				}
				mu.Lock()
				held++
				most = max(most, held)
				mu.Unlock()
				mu.Lock()
				held--
				mu.Unlock()
				release()
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, most, 3)
	assert.Zero(t, l.InUse("t", "exec"))
}

// A node-wide limit counts every tenant's slots: past it, a tenant under
// its own limit is refused too, and a release makes room for anyone.
func TestAcquireNodeLimit(t *testing.T) {
	l := limiter.New(map[string]limiter.Limit{"dials": {Max: 2, NodeMax: 3, RetryAfter: time.Second}})
	a1, err := l.Acquire("a", "dials")
	require.NoError(t, err)
	_, err = l.Acquire("a", "dials")
	require.NoError(t, err)
	_, err = l.Acquire("b", "dials")
	require.NoError(t, err)

	_, err = l.Acquire("c", "dials")
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted)
	assert.Contains(t, err.Error(), "this node already serves its limit of 3 concurrent dials")
	var ex *limiter.ExhaustedError
	require.True(t, errors.As(err, &ex))
	assert.True(t, ex.Node)
	assert.Equal(t, map[string]any{"kind": "dials", "limit": 3, "retry_after_seconds": 1, "scope": "node"}, ex.Details())

	a1()
	a1()
	_, err = l.Acquire("c", "dials")
	require.NoError(t, err, "a released slot is free for another tenant")
	_, err = l.Acquire("c", "dials")
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted)

	// Only a node limit: tenants are not limited alone.
	n := limiter.New(map[string]limiter.Limit{"dials": {NodeMax: 2}})
	_, err = n.Acquire("a", "dials")
	require.NoError(t, err)
	_, err = n.Acquire("a", "dials")
	require.NoError(t, err)
	_, err = n.Acquire("b", "dials")
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted)
}

// A node limit refuses every tenant once all tenants together hold it,
// with a message that says so, and frees with the slots.
func TestAcquireRefusesPastTheNodeLimit(t *testing.T) {
	l := limiter.New(map[string]limiter.Limit{"sftp": {Max: 2, NodeMax: 3, RetryAfter: time.Second}})
	a1, err := l.Acquire("a", "sftp")
	require.NoError(t, err)
	a2, err := l.Acquire("a", "sftp")
	require.NoError(t, err)
	b1, err := l.Acquire("b", "sftp")
	require.NoError(t, err)

	_, err = l.Acquire("c", "sftp")
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted, "tenant c holds nothing, but the node is full")
	var ex *limiter.ExhaustedError
	require.True(t, errors.As(err, &ex))
	assert.True(t, ex.Node)
	assert.Equal(t, 3, ex.Limit)
	assert.Contains(t, err.Error(), "all tenants together")
	assert.Equal(t, "node", ex.Details()["scope"])

	a1()
	c1, err := l.Acquire("c", "sftp")
	require.NoError(t, err, "a released slot is the node's again")
	_, err = l.Acquire("a", "sftp")
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted)
	for _, r := range []func(){a2, b1, c1} {
		r()
	}
	for range 3 {
		_, err := l.Acquire("d", "sftp")
		if err != nil {
			require.True(t, errors.As(err, &ex))
			assert.False(t, ex.Node, "tenant d meets its own limit first")
		}
	}
}
