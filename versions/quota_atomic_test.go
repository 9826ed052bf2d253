package versions_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Concurrent commits of one tenant cannot together pass its quota: of N
// racing commits, exactly as many as fit succeed and the others are
// refused with quota_exceeded, writing nothing.
func TestCommitQuotaIsAtomic(t *testing.T) {
	t.Parallel()
	const racers = 8
	for _, c := range []struct {
		name   string
		quota  versions.Quota
		commit versions.Commit
		want   int // commits that succeed
		what   string
	}{
		{name: "versions", quota: versions.Quota{MaxVersions: 3}, want: 2, what: "versions"},
		{name: "stored bytes", quota: versions.Quota{MaxStoredBytes: 1000}, commit: versions.Commit{LayerBytes: 300}, want: 3, what: "stored_bytes"},
		{name: "stored bytes with volumes", quota: versions.Quota{MaxStoredBytes: 1000},
			commit: versions.Commit{LayerBytes: 300, OtherStoredBytes: 400}, want: 2, what: "stored_bytes"},
		{name: "exempt (idle hibernation)", quota: versions.Quota{MaxVersions: 3, MaxStoredBytes: 1000},
			commit: versions.Commit{LayerBytes: 300, Quota: versions.QuotaExempt}, want: racers},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := newStore(t)
			newProject(t, s)
			_, err := s.Tenants.SetQuota(ctx, tenant, c.quota)
			require.NoError(t, err)

			var wg sync.WaitGroup
			errs := make([]error, racers)
			for i := range errs {
				wg.Go(func() {
					commit := c.commit
					commit.Tenant, commit.Project, commit.NoSwitch = tenant, "p", true
					commit.Image = fmt.Sprintf("reg/p@sha256:%064d", i)
					_, _, errs[i] = s.Versions.CommitVersion(ctx, commit)
				})
			}
			wg.Wait()
			ok := 0
			for _, err := range errs {
				if err == nil {
					ok++
					continue
				}
				assert.ErrorIs(t, err, errdefs.ErrQuotaExceeded)
				assert.Equal(t, c.what, errdefs.Details(err)["quota"])
			}
			assert.Equal(t, c.want, ok, "commits that succeeded")
			vs, err := s.Versions.ListVersions(ctx, tenant, "p")
			require.NoError(t, err)
			assert.Len(t, vs, 1+c.want, "refused commits wrote nothing")
		})
	}
}

// A failed version counts against the quota until a GC collects it.
func TestFailedVersionCountsUntilCollected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	_, err := s.Tenants.SetQuota(ctx, tenant, versions.Quota{MaxVersions: 2, MaxStoredBytes: 1000})
	require.NoError(t, err)
	commit := versions.Commit{Tenant: tenant, Project: "p", NoSwitch: true, Image: "reg/p@sha256:2", LayerBytes: 600}
	v, _, err := s.Versions.CommitVersion(ctx, commit)
	require.NoError(t, err)
	require.NoError(t, s.Versions.FailVersion(ctx, tenant, "p", v.Number))

	u, err := s.Tenants.Usage(ctx, tenant)
	require.NoError(t, err)
	assert.Equal(t, 2, u.Versions["p"])
	assert.Equal(t, int64(600), u.LayerBytes)
	commit.Image, commit.LayerBytes = "reg/p@sha256:3", 100
	_, _, err = s.Versions.CommitVersion(ctx, commit)
	require.ErrorIs(t, err, errdefs.ErrQuotaExceeded, "the failed version still counts")

	marked, err := s.Versions.MarkCollectable(ctx, tenant, "p", time.Now(), false)
	require.NoError(t, err)
	assert.Equal(t, []int{v.Number}, numbers(marked), "GC collects a failed version without a retention policy")
	require.NoError(t, s.Versions.DeleteVersion(ctx, tenant, "p", v.Number))
	_, _, err = s.Versions.CommitVersion(ctx, commit)
	require.NoError(t, err, "room again once collected")

	ps, err := s.Projects.GCProjects(ctx)
	require.NoError(t, err)
	assert.Empty(t, ps, "nothing left to collect and no policy")
}

// Concurrent starts of stopped instances cannot together pass
// MaxInstances; transitions between states that hold compute are not
// checked.
func TestStartQuotaIsAtomic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	running := newInstance(t, s, "running")
	const stopped = 6
	for i := range stopped {
		instanceAt(t, s, fmt.Sprintf("s%d", i), "Stopped", 1)
	}
	_, err := s.Tenants.SetQuota(ctx, tenant, versions.Quota{MaxInstances: 3})
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make([]error, stopped)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = s.Instances.Transition(ctx, fmt.Sprintf("s%d", i), []types.InstanceState{"Stopped"}, "Pending", "started", "")
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		assert.ErrorIs(t, err, errdefs.ErrQuotaExceeded)
		assert.Equal(t, map[string]any{"quota": "instances", "limit": int64(3), "used": int64(3), "requested": int64(1)}, errdefs.Details(err))
	}
	assert.Equal(t, 2, ok, "one place was taken by the running instance")
	u, err := s.Tenants.Usage(ctx, tenant)
	require.NoError(t, err)
	assert.Equal(t, 3, u.Instances)

	_, err = s.Instances.Transition(ctx, running.ID, []types.InstanceState{"Running"}, "Pausing", "user_pause", "")
	assert.NoError(t, err, "a live instance changing state takes no new place")
	_, err = s.Instances.Transition(ctx, "s0", []types.InstanceState{"Running"}, "Pending", "started", "")
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "the from states are still checked")
}

// Rehome (the start of a wake from hibernation) is one update: the
// instance is Pending on its new node with its hibernation cleared, or
// nothing changed. It refuses an instance that is not a hibernated Stopped
// one, and concurrent wakes cannot together pass MaxInstances.
func TestRehomeIsOneStartOfAHibernatedInstance(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	running := newInstance(t, s, "running")
	const hibernated = 4
	for i := range hibernated {
		id := fmt.Sprintf("h%d", i)
		instanceAt(t, s, id, "Stopped", 1)
		_, err := s.Instances.Hibernated(ctx, id, 1, "idle", "")
		require.NoError(t, err)
	}
	instanceAt(t, s, "stopped", "Stopped", 1)

	_, err := s.Instances.Rehome(ctx, "stopped", "n2", 1, "started", "waking")
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "stopped, not hibernated")
	_, err = s.Instances.Rehome(ctx, running.ID, "n2", 1, "started", "waking")
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "running")
	assert.Equal(t, types.InstanceState("Running"), errdefs.Details(err)["state"])

	_, err = s.Tenants.SetQuota(ctx, tenant, versions.Quota{MaxInstances: 3})
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, hibernated)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = s.Instances.Rehome(ctx, fmt.Sprintf("h%d", i), "n2", 1, "started", "waking")
		})
	}
	wg.Wait()
	woken := 0
	for i, err := range errs {
		in, gerr := s.Instances.GetInstance(ctx, tenant, fmt.Sprintf("h%d", i))
		require.NoError(t, gerr)
		if err != nil {
			assert.ErrorIs(t, err, errdefs.ErrQuotaExceeded)
			assert.Equal(t, types.StateStopped, in.State, "refused: nothing changed")
			assert.Equal(t, 1, in.HibernatedVersion)
			assert.Equal(t, "n1", in.Node)
			continue
		}
		woken++
		assert.Equal(t, types.StatePending, in.State)
		assert.Equal(t, "waking", in.Message)
		assert.Zero(t, in.HibernatedVersion, "the hibernation is cleared with the transition")
		assert.Equal(t, "n2", in.Node)
		assert.Equal(t, int64(2), in.Generation)
	}
	assert.Equal(t, 2, woken, "one place was taken by the running instance")
}
