package versions_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

func TestQuotaRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	q, err := s.Tenants.Quota(ctx, "nobody")
	require.NoError(t, err)
	assert.Equal(t, versions.Quota{}, q, "a tenant without a row has no limits")

	want := versions.Quota{MaxInstances: 2, MaxVersions: 5, MaxStoredBytes: 1 << 30, MaxTTL: 90 * time.Minute}
	q, err = s.Tenants.SetQuota(ctx, "new-tenant", want)
	require.NoError(t, err)
	assert.Equal(t, want, q)
	q, err = s.Tenants.SetQuota(ctx, "new-tenant", versions.Quota{MaxTTL: 1500 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, versions.Quota{MaxTTL: 2 * time.Second}, q, "zero lifts a limit; a TTL rounds up")
	_, err = s.Tenants.SetQuota(ctx, "new-tenant", versions.Quota{MaxInstances: -1})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}

// Concurrent creations cannot both take the last place of MaxInstances;
// stopped and terminated instances do not count.
func TestInstanceQuota(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	_, err := s.Tenants.SetQuota(ctx, tenant, versions.Quota{MaxInstances: 2})
	require.NoError(t, err)
	stopped := newInstance(t, s, "stopped")
	_, err = s.Instances.Transition(ctx, stopped.ID, nil, "Stopped", "user_stop", "")
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = s.Instances.CreateInstance(ctx, versions.Instance{ID: fmt.Sprintf("c%d", i), Tenant: tenant, Project: "p", Version: 1})
		})
	}
	wg.Wait()
	var ok, refused int
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case assert.ErrorIs(t, err, errdefs.ErrQuotaExceeded):
			refused++
			assert.Equal(t, map[string]any{"quota": "instances", "limit": int64(2), "used": int64(2), "requested": int64(1)}, errdefs.Details(err))
		}
	}
	assert.Equal(t, 2, ok)
	assert.Equal(t, 4, refused)

	u, err := s.Tenants.Usage(ctx, tenant)
	require.NoError(t, err)
	assert.Equal(t, 2, u.Instances)
	assert.Equal(t, map[string]int{"p": 1}, u.Versions)
}

func TestUsageCountsLayerBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	for i, n := range []int64{100, 250} {
		_, _, err := s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: i + 1,
			Image: fmt.Sprintf("r@sha256:%064d", i), LayerBytes: n})
		require.NoError(t, err)
	}
	u, err := s.Tenants.Usage(ctx, tenant)
	require.NoError(t, err)
	assert.Equal(t, int64(350), u.LayerBytes)
	assert.Equal(t, 3, u.Versions["p"])
}
