package versions_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// sixVersions creates project "p": 1 is its base, 2 to 6 snapshots, each
// made current in turn, so 6 is current.
func sixVersions(t *testing.T, s *versions.Store) {
	t.Helper()
	newProject(t, s)
	for n := 2; n <= 6; n++ {
		_, switched, err := s.Versions.CommitVersion(context.Background(), versions.Commit{Tenant: tenant, Project: "p",
			Expected: n - 1, Image: fmt.Sprintf("reg/p@sha256:%d", n), Parent: n - 1})
		require.NoError(t, err)
		require.True(t, switched)
	}
}

// sql runs a statement the API has no call for (backdating, odd states).
func sql(t *testing.T, s *versions.Store, stmt string, args ...any) {
	t.Helper()
	_, err := s.Pool().Exec(context.Background(), stmt, args...)
	require.NoError(t, err)
}

// instanceAt creates instance id of "p" in state, started from version v.
func instanceAt(t *testing.T, s *versions.Store, id, state string, v int) {
	t.Helper()
	_, err := s.Instances.CreateInstance(context.Background(), versions.Instance{
		ID: id, Tenant: tenant, Project: "p", Node: "n1", Version: v, State: types.InstanceState(state),
	})
	require.NoError(t, err)
}

func setRetention(t *testing.T, s *versions.Store, r versions.Retention) {
	t.Helper()
	_, err := s.Projects.SetRetention(context.Background(), tenant, "p", r)
	require.NoError(t, err)
}

func numbers(vs []versions.Version) []int {
	ns := []int{}
	for _, v := range vs {
		ns = append(ns, v.Number)
	}
	return ns
}

func states(t *testing.T, s *versions.Store) map[int]string {
	t.Helper()
	vs, err := s.Versions.ListVersions(context.Background(), tenant, "p")
	require.NoError(t, err)
	m := map[int]string{}
	for _, v := range vs {
		m[v.Number] = v.State
	}
	return m
}

// Each case starts from sixVersions (1 base, 2-6 snapshots, 6 current) and
// says which versions MarkCollectable marks.
func TestMarkCollectable(t *testing.T) {
	t.Parallel()
	keep2 := versions.Retention{KeepLast: 2}
	for _, c := range []struct {
		name   string
		policy versions.Retention
		setup  func(t *testing.T, s *versions.Store)
		now    time.Duration // added to time.Now()
		want   []int
	}{
		{name: "no policy keeps all", want: []int{}},
		{name: "keep last 2: the base and the newest two stay", policy: keep2, want: []int{2, 3, 4}},
		{name: "pinned kept", policy: keep2, want: []int{2, 4}, setup: func(t *testing.T, s *versions.Store) {
			_, err := s.Versions.Pin(context.Background(), tenant, "p", 3, true)
			require.NoError(t, err)
		}},
		{name: "current kept", policy: keep2, want: []int{2, 4}, setup: func(t *testing.T, s *versions.Store) {
			_, err := s.Versions.SetCurrent(context.Background(), tenant, "p", 3, 6)
			require.NoError(t, err)
		}},
		{name: "version of a running instance kept", policy: keep2, want: []int{2, 4}, setup: func(t *testing.T, s *versions.Store) {
			instanceAt(t, s, "i1", "Running", 3)
		}},
		{name: "version of a terminated instance not kept", policy: keep2, want: []int{2, 3, 4}, setup: func(t *testing.T, s *versions.Store) {
			instanceAt(t, s, "i1", versions.InstanceTerminated, 3)
		}},
		{name: "last saved version kept", policy: keep2, want: []int{2, 4}, setup: func(t *testing.T, s *versions.Store) {
			instanceAt(t, s, "i1", "Running", 6)
			sql(t, s, "UPDATE instances SET last_saved_version = 3")
		}},
		{name: "hibernated version kept", policy: keep2, want: []int{2, 4}, setup: func(t *testing.T, s *versions.Store) {
			instanceAt(t, s, "i1", "Stopped", 6)
			_, err := s.Instances.Hibernated(context.Background(), "i1", 3, "Idle", "")
			require.NoError(t, err)
		}},
		{name: "layer version kept", policy: keep2, want: []int{2, 4}, setup: func(t *testing.T, s *versions.Store) {
			instanceAt(t, s, "i1", "Stopped", 6)
			_, err := s.Instances.Hibernated(context.Background(), "i1", 3, "Idle", "")
			require.NoError(t, err)
			_, err = s.Instances.Rehome(context.Background(), "i1", "n2", 3, "started", "waking")
			require.NoError(t, err)
		}},
		{name: "base kind kept", policy: keep2, want: []int{2, 4}, setup: func(t *testing.T, s *versions.Store) {
			sql(t, s, "UPDATE versions SET kind = 'base' WHERE number = 3")
		}},
		{name: "creating left alone, failed collected, neither counted", policy: keep2, want: []int{3, 4}, setup: func(t *testing.T, s *versions.Store) {
			sql(t, s, "UPDATE versions SET state = 'creating' WHERE number = 2")
			sql(t, s, "UPDATE versions SET state = 'failed' WHERE number = 3")
		}},
		{name: "failed collected without a policy", want: []int{3}, setup: func(t *testing.T, s *versions.Store) {
			sql(t, s, "UPDATE versions SET state = 'failed' WHERE number = 3")
		}},
		{name: "failed kept while an instance uses it", want: []int{}, setup: func(t *testing.T, s *versions.Store) {
			instanceAt(t, s, "i1", "Running", 3)
			sql(t, s, "UPDATE versions SET state = 'failed' WHERE number = 3")
		}},
		{name: "keep newer than keeps recent ones", policy: versions.Retention{KeepNewerThan: time.Hour}, want: []int{2, 3},
			setup: func(t *testing.T, s *versions.Store) {
				sql(t, s, "UPDATE versions SET created_at = now() - interval '2 hours' WHERE number <= 3")
			}},
		{name: "keep newer than, later", policy: versions.Retention{KeepNewerThan: time.Hour}, now: 2 * time.Hour, want: []int{2, 3, 4, 5}},
		{name: "either rule keeps", policy: versions.Retention{KeepLast: 1, KeepNewerThan: time.Hour}, want: []int{2, 3},
			setup: func(t *testing.T, s *versions.Store) {
				sql(t, s, "UPDATE versions SET created_at = now() - interval '2 hours' WHERE number <= 3")
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := newStore(t)
			sixVersions(t, s)
			setRetention(t, s, c.policy)
			if c.setup != nil {
				c.setup(t, s)
			}

			vs, err := s.Versions.MarkCollectable(ctx, tenant, "p", time.Now().Add(c.now), false)
			require.NoError(t, err)
			assert.Equal(t, c.want, numbers(vs))
			for _, v := range vs {
				assert.Equal(t, versions.StateDeleting, v.State, "version %d", v.Number)
			}
			// Marked versions still show, as deleting; the others keep their state.
			got := states(t, s)
			assert.Len(t, got, 6)
			for _, n := range c.want {
				assert.Equal(t, versions.StateDeleting, got[n], "version %d", n)
			}
		})
	}
}

func TestMarkCollectableDryRunAndIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	sixVersions(t, s)
	setRetention(t, s, versions.Retention{KeepLast: 2})

	vs, err := s.Versions.MarkCollectable(ctx, tenant, "p", time.Now(), true)
	require.NoError(t, err)
	assert.Equal(t, []int{2, 3, 4}, numbers(vs))
	for n, st := range states(t, s) {
		assert.Equal(t, versions.StateReady, st, "dry run marked version %d", n)
	}

	first, err := s.Versions.MarkCollectable(ctx, tenant, "p", time.Now(), false)
	require.NoError(t, err)
	assert.Equal(t, []int{2, 3, 4}, numbers(first))
	again, err := s.Versions.MarkCollectable(ctx, tenant, "p", time.Now(), false)
	require.NoError(t, err)
	assert.Equal(t, first, again)
	dry, err := s.Versions.MarkCollectable(ctx, tenant, "p", time.Now(), true)
	require.NoError(t, err)
	assert.Equal(t, first, dry)

	_, err = s.Versions.MarkCollectable(ctx, tenant, "nope", time.Now(), false)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

// A GC interrupted after marking: the next MarkCollectable returns the
// versions left deleting, even once the project has no policy.
func TestMarkCollectableReturnsLeftovers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	sixVersions(t, s)
	setRetention(t, s, versions.Retention{KeepLast: 2})
	_, err := s.Versions.MarkCollectable(ctx, tenant, "p", time.Now(), false)
	require.NoError(t, err)
	require.NoError(t, s.Versions.DeleteVersion(ctx, tenant, "p", 2))
	setRetention(t, s, versions.Retention{})

	vs, err := s.Versions.MarkCollectable(ctx, tenant, "p", time.Now(), false)
	require.NoError(t, err)
	assert.Equal(t, []int{3, 4}, numbers(vs))
}

func TestDeleteVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	sixVersions(t, s)

	err := s.Versions.DeleteVersion(ctx, tenant, "p", 2)
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "a ready version")
	assert.ErrorIs(t, s.Versions.DeleteVersion(ctx, tenant, "p", 99), errdefs.ErrNotFound)
	assert.ErrorIs(t, s.Versions.DeleteVersion(ctx, tenant, "nope", 2), errdefs.ErrNotFound)

	setRetention(t, s, versions.Retention{KeepLast: 2})
	vs, err := s.Versions.MarkCollectable(ctx, tenant, "p", time.Now(), false)
	require.NoError(t, err)
	for _, v := range vs {
		require.NoError(t, s.Versions.DeleteVersion(ctx, tenant, "p", v.Number))
	}
	all, err := s.Versions.ListVersions(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, []int{1, 5, 6}, numbers(all))
	_, err = s.Versions.GetVersion(ctx, tenant, "p", 2)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	assert.ErrorIs(t, s.Versions.DeleteVersion(ctx, tenant, "p", 2), errdefs.ErrNotFound, "deleted already")

	v, _, err := s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 6, Image: "reg/p@sha256:7"})
	require.NoError(t, err)
	assert.Equal(t, 7, v.Number, "numbers are not reused")
}

// A version being deleted cannot be made current or pinned again.
func TestDeletingVersionRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	sixVersions(t, s)
	setRetention(t, s, versions.Retention{KeepLast: 2})
	_, err := s.Versions.MarkCollectable(ctx, tenant, "p", time.Now(), false)
	require.NoError(t, err)

	_, err = s.Versions.SetCurrent(ctx, tenant, "p", 3, 6)
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	_, err = s.Versions.Pin(ctx, tenant, "p", 3, true)
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	_, err = s.Versions.Pin(ctx, tenant, "p", 99, true)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = s.Instances.CreateInstance(ctx, versions.Instance{ID: "late", Tenant: tenant, Project: "p", Version: 3})
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "no instance starts from a version being deleted")

	v, err := s.Versions.GetVersion(ctx, tenant, "p", 3)
	require.NoError(t, err)
	assert.Equal(t, versions.StateDeleting, v.State)
	assert.False(t, v.Pinned)
	p, err := s.Projects.GetProject(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, 6, p.Current)
}

func TestSetRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)

	for _, r := range []versions.Retention{{KeepLast: -1}, {KeepNewerThan: -time.Second}} {
		_, err := s.Projects.SetRetention(ctx, tenant, "p", r)
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "%+v", r)
	}
	_, err := s.Projects.SetRetention(ctx, tenant, "nope", versions.Retention{KeepLast: 1})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	want := versions.Retention{KeepLast: 3, KeepNewerThan: 90 * time.Minute}
	p, err := s.Projects.SetRetention(ctx, tenant, "p", want)
	require.NoError(t, err)
	assert.Equal(t, want, p.Retention)
	p, err = s.Projects.GetProject(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, want, p.Retention)

	p, err = s.Projects.SetRetention(ctx, tenant, "p", versions.Retention{KeepNewerThan: 1500 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, versions.Retention{KeepNewerThan: 2 * time.Second}, p.Retention, "whole seconds, rounded up")

	p, err = s.Projects.SetRetention(ctx, tenant, "p", versions.Retention{})
	require.NoError(t, err)
	assert.Zero(t, p.Retention)
}

func TestRetainedProjects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	for _, p := range []struct{ tenant, name string }{{"t2", "b"}, {"t1", "none"}, {"t1", "a"}} {
		_, _, err := s.Projects.CreateProject(ctx, versions.Project{Tenant: p.tenant, Name: p.name, BaseImage: "reg/base@sha256:aaa"},
			versions.Version{})
		require.NoError(t, err)
	}
	_, err := s.Projects.SetRetention(ctx, "t1", "a", versions.Retention{KeepNewerThan: time.Hour})
	require.NoError(t, err)
	_, err = s.Projects.SetRetention(ctx, "t2", "b", versions.Retention{KeepLast: 2})
	require.NoError(t, err)
	_, err = s.Projects.SetRetention(ctx, "t1", "none", versions.Retention{})
	require.NoError(t, err)

	ps, err := s.Projects.RetainedProjects(ctx)
	require.NoError(t, err)
	var got []string
	for _, p := range ps {
		got = append(got, p.Tenant+"/"+p.Name)
	}
	assert.Equal(t, []string{"t2/b", "t1/a"}, got, "all tenants, by id")
	assert.Equal(t, versions.Retention{KeepLast: 2}, ps[0].Retention)
}

// The version a migration moved stays for rollback, whatever the policy;
// failed versions count against quotas until collected; only validated builds are
// found for reuse.
func TestMigrationParentKeptAndFailedCounted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	sixVersions(t, s)
	v7, _, err := s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", NoSwitch: true, Kind: "migration",
		Image: "reg/p@sha256:7", Parent: 3})
	require.NoError(t, err)
	v8, _, err := s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", NoSwitch: true, Kind: "build",
		Image: "reg/p@sha256:8", Message: "build sha256:k apt: tree"})
	require.NoError(t, err)
	_, err = s.Versions.FindBuild(ctx, tenant, "p", "sha256:k")
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "not validated yet: not reused")
	require.NoError(t, s.Versions.MarkValidated(ctx, tenant, "p", v8.Number))
	found, err := s.Versions.FindBuild(ctx, tenant, "p", "sha256:k")
	require.NoError(t, err)
	assert.Equal(t, v8.Number, found.Number)

	require.NoError(t, s.Versions.FailVersion(ctx, tenant, "p", v7.Number))
	u, err := s.Tenants.Usage(ctx, tenant)
	require.NoError(t, err)
	assert.Equal(t, 8, u.Versions["p"], "the failed version 7 counts until collected")

	setRetention(t, s, versions.Retention{KeepLast: 1})
	marked, err := s.Versions.MarkCollectable(ctx, tenant, "p", time.Now(), true)
	require.NoError(t, err)
	assert.NotContains(t, numbers(marked), 3, "migrated from (version 7 is failed but still names it)")
	assert.Contains(t, numbers(marked), 2)
}
