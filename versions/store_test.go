package versions_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/pgserver/pgtest"
	"github.com/envd-dev/envd/versions"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const tenant = "acme"

func pgtestDSN(t testing.TB) string { return pgtest.DSN(t) }

func newStore(t *testing.T) *versions.Store {
	t.Helper()
	s, err := versions.Open(context.Background(), pgtestDSN(t))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// newProject creates project "p" (version 1 current) of tenant.
func newProject(t *testing.T, s *versions.Store) versions.Project {
	t.Helper()
	p, _, err := s.Projects.CreateProject(context.Background(), versions.Project{
		Tenant: tenant, Name: "p", BaseImage: "reg/base@sha256:aaa",
	}, versions.Version{Message: "base"})
	require.NoError(t, err)
	return p
}

func newInstance(t *testing.T, s *versions.Store, id string) versions.Instance {
	t.Helper()
	in, err := s.Instances.CreateInstance(context.Background(), versions.Instance{
		ID: id, Tenant: tenant, Project: "p", Node: "n1", Version: 1, State: "Running",
	})
	require.NoError(t, err)
	return in
}

func TestCreateProject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)

	p, v, err := s.Projects.CreateProject(ctx, versions.Project{
		Tenant: tenant, Name: "p", BaseImage: "reg/base@sha256:aaa",
		Excludes: []string{"/var/cache"}, Spec: json.RawMessage(`{"packages":["graphviz"]}`),
	}, versions.Version{Message: "base", SizeBytes: 10, Layers: 2})
	require.NoError(t, err)
	assert.Equal(t, 1, p.Current)
	assert.Equal(t, []string{"/var/cache"}, p.Excludes)
	assert.JSONEq(t, `{"packages":["graphviz"]}`, string(p.Spec))
	assert.Equal(t, versions.Version{Project: "p", Number: 1, Kind: versions.KindBase, State: versions.StateReady,
		Image: "reg/base@sha256:aaa", Message: "base", SizeBytes: 10, Layers: 2, CreatedAt: v.CreatedAt, Current: true}, v)

	got, err := s.Versions.GetVersion(ctx, tenant, "p", 1)
	require.NoError(t, err)
	assert.Equal(t, v.CreatedAt.UnixMicro(), got.CreatedAt.UnixMicro())
	got.CreatedAt = v.CreatedAt
	assert.Equal(t, v, got)

	gp, err := s.Projects.GetProject(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, p.ID, gp.ID)
	assert.Equal(t, 1, gp.Current)

	_, _, err = s.Projects.CreateProject(ctx, versions.Project{Tenant: tenant, Name: "p", BaseImage: "x"}, versions.Version{})
	assert.ErrorIs(t, err, errdefs.ErrAlreadyExists)

	// Defaults: no spec or excludes given.
	p2, _, err := s.Projects.CreateProject(ctx, versions.Project{Tenant: tenant, Name: "a", BaseImage: "x"}, versions.Version{})
	require.NoError(t, err)
	assert.JSONEq(t, `{}`, string(p2.Spec))
	assert.Empty(t, p2.Excludes)

	ps, err := s.Projects.ListProjects(ctx, tenant)
	require.NoError(t, err)
	require.Len(t, ps, 2)
	assert.Equal(t, "a", ps[0].Name)
	ps, err = s.Projects.ListProjects(ctx, "other")
	require.NoError(t, err)
	assert.Empty(t, ps)

	_, err = s.Projects.GetProject(ctx, "other", "p")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = s.Versions.GetVersion(ctx, tenant, "p", 7)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = s.Versions.ListVersions(ctx, tenant, "nope")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

func TestCommitVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	in := newInstance(t, s, "i1")

	// Right expected: switches.
	v, switched, err := s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 1,
		InstanceID: "i1", Generation: in.Generation, Image: "reg/p@sha256:bbb", Parent: 1, Message: "m", Layers: 3})
	require.NoError(t, err)
	assert.True(t, switched)
	assert.Equal(t, 2, v.Number)
	assert.Equal(t, versions.KindSnapshot, v.Kind)
	assert.Equal(t, versions.StateReady, v.State)
	assert.Equal(t, 1, v.Parent)
	assert.Equal(t, "i1", v.InstanceID)
	assert.True(t, v.Current)
	got, err := s.Instances.GetInstance(ctx, "", "i1")
	require.NoError(t, err)
	assert.Equal(t, 2, got.LastSavedVersion)

	// Stale expected (current is 2 now): the version is kept, ready, not current.
	v, switched, err = s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 1,
		InstanceID: "i1", Generation: in.Generation, Image: "reg/p@sha256:ccc", Parent: 1})
	require.NoError(t, err)
	assert.False(t, switched)
	assert.Equal(t, 3, v.Number)
	assert.Equal(t, versions.StateReady, v.State)
	assert.False(t, v.Current)
	p, err := s.Projects.GetProject(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, 2, p.Current)
	got, err = s.Instances.GetInstance(ctx, "", "i1")
	require.NoError(t, err)
	assert.Equal(t, 3, got.LastSavedVersion, "the save is recorded even when it did not switch")

	// NoSwitch: recorded, current untouched.
	v, switched, err = s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 2, Kind: versions.KindBuild,
		Image: "reg/p@sha256:ddd", NoSwitch: true})
	require.NoError(t, err)
	assert.False(t, switched)
	assert.Equal(t, 4, v.Number)

	vs, err := s.Versions.ListVersions(ctx, tenant, "p")
	require.NoError(t, err)
	var nums []int
	var current []int
	for _, v := range vs {
		nums = append(nums, v.Number)
		if v.Current {
			current = append(current, v.Number)
		}
	}
	assert.Equal(t, []int{1, 2, 3, 4}, nums)
	assert.Equal(t, []int{2}, current)

	_, _, err = s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "nope", Expected: 1, Image: "x"})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, _, err = s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 2, Kind: "bogus", Image: "x"})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}

func TestCommitVersionStaleGeneration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	in := newInstance(t, s, "i1")
	gen, err := s.Instances.BumpGeneration(ctx, "i1") // restarted elsewhere
	require.NoError(t, err)
	assert.Equal(t, in.Generation+1, gen)

	_, _, err = s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 1,
		InstanceID: "i1", Generation: in.Generation, Image: "reg/p@sha256:bbb"})
	assert.ErrorIs(t, err, errdefs.ErrStaleGeneration)

	// Nothing written: no version, current and counter unchanged, no last save.
	vs, err := s.Versions.ListVersions(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Len(t, vs, 1)
	got, err := s.Instances.GetInstance(ctx, tenant, "i1")
	require.NoError(t, err)
	assert.Zero(t, got.LastSavedVersion)
	v, switched, err := s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 1,
		InstanceID: "i1", Generation: gen, Image: "reg/p@sha256:bbb"})
	require.NoError(t, err)
	assert.True(t, switched)
	assert.Equal(t, 2, v.Number, "the refused commit consumed no number")

	_, _, err = s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 2,
		InstanceID: "nope", Generation: 1, Image: "x"})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

// Eight saves based on the same current race: exactly one wins the pointer,
// all eight are kept as ready versions with distinct numbers.
func TestCommitVersionConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)

	const n = 8
	type result struct {
		v        versions.Version
		switched bool
		err      error
	}
	results := make([]result, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			v, sw, err := s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 1,
				Image: fmt.Sprintf("reg/p@sha256:%d", i), Parent: 1})
			results[i] = result{v, sw, err}
		})
	}
	close(start)
	wg.Wait()

	var winners, nums []int
	for _, r := range results {
		require.NoError(t, r.err)
		nums = append(nums, r.v.Number)
		if r.switched {
			winners = append(winners, r.v.Number)
		}
	}
	sort.Ints(nums)
	assert.Equal(t, []int{2, 3, 4, 5, 6, 7, 8, 9}, nums)
	require.Len(t, winners, 1)

	p, err := s.Projects.GetProject(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, winners[0], p.Current)
	vs, err := s.Versions.ListVersions(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Len(t, vs, n+1)
	for _, v := range vs {
		assert.Equal(t, versions.StateReady, v.State)
	}
}

func TestSetCurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	_, _, err := s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 1, Image: "x2"})
	require.NoError(t, err)
	// A version that is not ready, as a build in progress would leave.
	_, err = s.Pool().Exec(ctx, `INSERT INTO versions (project_id, number, kind, state) SELECT id, 3, 'build', 'creating' FROM projects`)
	require.NoError(t, err)

	cases := []struct {
		name        string
		n, expected int
		want        error
		current     int
	}{
		{"rollback with right expected", 1, 2, nil, 1},
		{"stale expected", 2, 2, errdefs.ErrConflict, 1},
		{"same version is a no-op", 1, 1, nil, 1},
		{"not ready", 3, 1, errdefs.ErrFailedPrecondition, 1},
		{"missing version", 9, 1, errdefs.ErrNotFound, 1},
		{"no blind write", 2, -1, errdefs.ErrInvalidArgument, 1},
	}
	for _, c := range cases { // sequential: each case starts from the previous one's current
		p, err := s.Versions.SetCurrent(ctx, tenant, "p", c.n, c.expected)
		if c.want != nil {
			assert.ErrorIs(t, err, c.want, c.name)
		} else if assert.NoError(t, err, c.name) {
			assert.Equal(t, c.current, p.Current, c.name)
		}
		got, err := s.Projects.GetProject(ctx, tenant, "p")
		require.NoError(t, err)
		assert.Equal(t, c.current, got.Current, c.name)
	}
	_, err = s.Versions.SetCurrent(ctx, tenant, "nope", 1, 0)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

func TestPin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	v, err := s.Versions.Pin(ctx, tenant, "p", 1, true)
	require.NoError(t, err)
	assert.True(t, v.Pinned)
	assert.True(t, v.Current)
	v, err = s.Versions.GetVersion(ctx, tenant, "p", 1)
	require.NoError(t, err)
	assert.True(t, v.Pinned)
	_, err = s.Versions.Pin(ctx, tenant, "p", 2, true)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

func TestInstances(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	exp := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	in, err := s.Instances.CreateInstance(ctx, versions.Instance{ID: "i1", Tenant: tenant, Project: "p", Node: "n1", Version: 1,
		Retain: true, ExpiresAt: &exp, Spec: json.RawMessage(`{"env":["A=1"]}`)})
	require.NoError(t, err)
	assert.Equal(t, types.StatePending, in.State)
	assert.Equal(t, int64(1), in.Generation)
	assert.Equal(t, "p", in.Project)
	require.NotNil(t, in.ExpiresAt)
	assert.True(t, exp.Equal(*in.ExpiresAt))
	assert.JSONEq(t, `{"env":["A=1"]}`, string(in.Spec))

	_, err = s.Instances.CreateInstance(ctx, versions.Instance{ID: "i1", Tenant: tenant, Project: "p", Version: 1})
	assert.ErrorIs(t, err, errdefs.ErrAlreadyExists)
	_, err = s.Instances.CreateInstance(ctx, versions.Instance{ID: "i2", Tenant: tenant, Project: "nope", Version: 1})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = s.Instances.CreateInstance(ctx, versions.Instance{ID: "i3", Tenant: "other", Project: "p", Version: 1})
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "another tenant's project")
	_, err = s.Instances.CreateInstance(ctx, versions.Instance{ID: "i4", Tenant: tenant, Project: "p", Version: 9})
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "an unknown version")

	in, err = s.Instances.Transition(ctx, "i1", []types.InstanceState{"Pending"}, "Running", "Started", "")
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, in.State)
	assert.Equal(t, "Started", in.Reason)

	_, err = s.Instances.Transition(ctx, "i1", []types.InstanceState{"Paused", "Stopped"}, "Running", "Resumed", "")
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	assert.Contains(t, err.Error(), "is Running")
	got, err := s.Instances.GetInstance(ctx, tenant, "i1")
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, got.State, "a refused transition changes nothing")
	assert.Equal(t, "Started", got.Reason)

	_, err = s.Instances.Transition(ctx, "nope", nil, "Failed", "Lost", "")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	_, err = s.Instances.GetInstance(ctx, "other", "i1")
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "another tenant's instance")

	// Hibernation is recorded with its reason in one update, only on a
	// Stopped instance; a later transition keeps the version.
	_, err = s.Instances.Hibernated(ctx, "i1", 1, "hibernated", "as version 1")
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "a Running instance does not hibernate")
	_, err = s.Instances.Transition(ctx, "i1", []types.InstanceState{"Running"}, "Stopped", "user_stop", "")
	require.NoError(t, err)
	in, err = s.Instances.Hibernated(ctx, "i1", 1, "hibernated", "as version 1")
	require.NoError(t, err)
	assert.Equal(t, 1, in.HibernatedVersion)
	assert.Equal(t, "hibernated", in.Reason)
	assert.Equal(t, "as version 1", in.Message)
	in, err = s.Instances.Transition(ctx, "i1", []types.InstanceState{"Stopped"}, "Running", "Started", "")
	require.NoError(t, err)
	assert.Equal(t, 1, in.HibernatedVersion, "an ordinary transition leaves it")

	// The idle stop ends hibernated in the same update: from Stopping only.
	_, err = s.Instances.StopHibernated(ctx, "i1", 2, "idle", "saved as version 2")
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "a Running instance is not stopping")
	_, err = s.Instances.Transition(ctx, "i1", []types.InstanceState{"Running"}, "Stopping", "idle", "")
	require.NoError(t, err)
	in, err = s.Instances.StopHibernated(ctx, "i1", 2, "idle", "saved as version 2")
	require.NoError(t, err)
	assert.Equal(t, types.StateStopped, in.State)
	assert.Equal(t, 2, in.HibernatedVersion)
	assert.Equal(t, "saved as version 2", in.Message)
	in, err = s.Instances.Transition(ctx, "i1", []types.InstanceState{"Stopped"}, "Running", "Started", "")
	require.NoError(t, err)

	in, err = s.Instances.SetExpiry(ctx, "i1", nil)
	require.NoError(t, err)
	assert.Nil(t, in.ExpiresAt)
	in, err = s.Instances.SetNode(ctx, "i1", "n2")
	require.NoError(t, err)
	assert.Equal(t, "n2", in.Node)

	list, err := s.Instances.ListInstances(ctx, tenant, "")
	require.NoError(t, err)
	assert.Len(t, list, 1)
	list, err = s.Instances.ListInstances(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Len(t, list, 1)
	_, err = s.Instances.ListInstances(ctx, tenant, "nope")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	list, err = s.Instances.ListNodeInstances(ctx, "n2")
	require.NoError(t, err)
	assert.Len(t, list, 1)
	list, err = s.Instances.ListNodeInstances(ctx, "n1")
	require.NoError(t, err)
	assert.Empty(t, list)
}

func TestDeleteProject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	newInstance(t, s, "i1")

	_, err := s.Projects.DeleteProject(ctx, tenant, "p")
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	assert.Contains(t, err.Error(), "i1 is Running")

	_, err = s.Instances.Transition(ctx, "i1", nil, versions.InstanceTerminated, "Deleted", "")
	require.NoError(t, err)
	images, err := s.Projects.DeleteProject(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, []string{"reg/base@sha256:aaa"}, images, "the images its versions had")
	_, err = s.Projects.GetProject(ctx, tenant, "p")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = s.Instances.GetInstance(ctx, "", "i1")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = s.Projects.DeleteProject(ctx, tenant, "p")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	// The name is free again; numbering restarts with the new project.
	_, v, err := s.Projects.CreateProject(ctx, versions.Project{Tenant: tenant, Name: "p", BaseImage: "x"}, versions.Version{})
	require.NoError(t, err)
	assert.Equal(t, 1, v.Number)
}

func TestTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)

	require.NoError(t, s.Access.EnsureAdminToken(ctx, "admin", "secret"))
	require.NoError(t, s.Access.EnsureAdminToken(ctx, "admin", "secret"), "idempotent")
	p, err := s.Access.Authenticate(ctx, "secret")
	require.NoError(t, err)
	assert.Equal(t, versions.Principal{Tenant: "admin", Admin: true}, p)
	assert.ErrorIs(t, s.Access.EnsureAdminToken(ctx, "other", "secret"), errdefs.ErrAlreadyExists)

	tok, err := s.Access.CreateToken(ctx, tenant, false)
	require.NoError(t, err)
	assert.Len(t, tok, 64)
	p, err = s.Access.Authenticate(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, versions.Principal{Tenant: tenant}, p)

	var stored int
	require.NoError(t, s.Pool().QueryRow(ctx, "SELECT count(*) FROM tokens WHERE token_hash = $1", tok).Scan(&stored))
	assert.Zero(t, stored, "the token itself is never stored")

	for _, bad := range []string{"", "wrong", tok + "x"} {
		_, err = s.Access.Authenticate(ctx, bad)
		assert.ErrorIs(t, err, errdefs.ErrUnauthenticated, "%q", bad)
	}
}

func TestCreateOperationIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)

	op := versions.Operation{ID: "op1", Tenant: tenant, Kind: "save", Target: "i1", IdempotencyKey: "k", RequestHash: "h1", Node: "n1"}
	got, created, err := s.Operations.CreateOperation(ctx, op)
	require.NoError(t, err)
	assert.True(t, created)
	assert.Equal(t, versions.OpPending, got.State)

	op.ID = "op2" // a retry gets a fresh id from the caller
	again, created, err := s.Operations.CreateOperation(ctx, op)
	require.NoError(t, err)
	assert.False(t, created)
	assert.Equal(t, "op1", again.ID)

	op.RequestHash = "h2"
	_, _, err = s.Operations.CreateOperation(ctx, op)
	assert.ErrorIs(t, err, errdefs.ErrIdempotencyReuse)

	// Same key, other tenant: independent.
	op.Tenant, op.ID = "other", "op3"
	_, created, err = s.Operations.CreateOperation(ctx, op)
	require.NoError(t, err)
	assert.True(t, created)

	// No key: never deduplicated; an id is unique.
	for _, id := range []string{"op4", "op5"} {
		_, created, err = s.Operations.CreateOperation(ctx, versions.Operation{ID: id, Tenant: tenant, Kind: "gc"})
		require.NoError(t, err)
		assert.True(t, created)
	}
	_, _, err = s.Operations.CreateOperation(ctx, versions.Operation{ID: "op4", Tenant: tenant, Kind: "gc"})
	assert.ErrorIs(t, err, errdefs.ErrAlreadyExists)

	// Concurrent retries with one key: one operation.
	var wg sync.WaitGroup
	ids := make([]string, 4)
	errs := make([]error, 4)
	for i := range ids {
		wg.Go(func() {
			o, _, err := s.Operations.CreateOperation(ctx, versions.Operation{ID: fmt.Sprintf("c%d", i), Tenant: tenant, Kind: "save",
				IdempotencyKey: "concurrent", RequestHash: "h"})
			ids[i], errs[i] = o.ID, err
		})
	}
	wg.Wait()
	for i := range ids {
		require.NoError(t, errs[i])
		assert.Equal(t, ids[0], ids[i])
	}
}

func TestOperationLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	_, _, err := s.Operations.CreateOperation(ctx, versions.Operation{ID: "op1", Tenant: tenant, Kind: "save", Node: "n1"})
	require.NoError(t, err)
	_, _, err = s.Operations.CreateOperation(ctx, versions.Operation{ID: "op2", Tenant: tenant, Kind: "build", Node: "n2"})
	require.NoError(t, err)

	require.NoError(t, s.Operations.SetOperationState(ctx, "op1", versions.OpRunning))
	assert.ErrorIs(t, s.Operations.SetOperationState(ctx, "op1", versions.OpSucceeded), errdefs.ErrInvalidArgument)
	assert.ErrorIs(t, s.Operations.SetOperationState(ctx, "nope", versions.OpRunning), errdefs.ErrNotFound)

	un, err := s.Operations.UnfinishedOperations(ctx, "n1")
	require.NoError(t, err)
	require.Len(t, un, 1)
	assert.Equal(t, "op1", un[0].ID)
	un, err = s.Operations.UnfinishedOperations(ctx, "")
	require.NoError(t, err)
	assert.Len(t, un, 2)

	op, err := s.Operations.RequestCancel(ctx, tenant, "op2")
	require.NoError(t, err)
	assert.True(t, op.CancelRequested)
	_, err = s.Operations.RequestCancel(ctx, "other", "op2")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	require.NoError(t, s.Operations.FinishOperation(ctx, "op1", versions.OpSucceeded, map[string]int{"version": 2}, nil))
	op, err = s.Operations.GetOperation(ctx, tenant, "op1")
	require.NoError(t, err)
	assert.Equal(t, versions.OpSucceeded, op.State)
	assert.JSONEq(t, `{"version":2}`, string(op.Result))
	assert.Nil(t, op.Error)

	opErr := &versions.OpError{Code: "canceled", Message: "canceled by user"}
	require.NoError(t, s.Operations.FinishOperation(ctx, "op2", versions.OpCanceled, nil, opErr))
	op, err = s.Operations.GetOperation(ctx, "", "op2")
	require.NoError(t, err)
	assert.Equal(t, opErr, op.Error)
	assert.Nil(t, op.Result)

	// Finished: no more state changes or events; cancel returns it unchanged.
	assert.ErrorIs(t, s.Operations.FinishOperation(ctx, "op1", versions.OpFailed, nil, nil), errdefs.ErrFailedPrecondition)
	assert.ErrorIs(t, s.Operations.SetOperationState(ctx, "op1", versions.OpRunning), errdefs.ErrFailedPrecondition)
	_, err = s.Operations.AppendEvent(ctx, "op1", "progress", "late", nil)
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	op, err = s.Operations.RequestCancel(ctx, tenant, "op1")
	require.NoError(t, err)
	assert.False(t, op.CancelRequested)

	evs, err := s.Operations.Events(ctx, "op2", 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, string(versions.OpCanceled), evs[0].Type)
	assert.Equal(t, "canceled by user", evs[0].Message)
	assert.JSONEq(t, `{"error":{"code":"canceled","message":"canceled by user"}}`, string(evs[0].Data))

	un, err = s.Operations.UnfinishedOperations(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, un)
	_, err = s.Operations.GetOperation(ctx, "other", "op1")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

// Four writers append to one log at once: seqs are 1..N, no gaps, no
// duplicates; then a reader pages through it with a cursor.
func TestEventsConcurrentAndPaging(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	_, _, err := s.Operations.CreateOperation(ctx, versions.Operation{ID: "op", Tenant: tenant, Kind: "save"})
	require.NoError(t, err)

	const writers, each = 4, 25
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				if _, err := s.Operations.AppendEvent(ctx, "op", "progress", fmt.Sprintf("w%d-%d", w, i), map[string]int{"w": w}); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}

	var seqs []int
	after := 0
	for {
		page, err := s.Operations.Events(ctx, "op", after, 30)
		require.NoError(t, err)
		if len(page) == 0 {
			break
		}
		assert.LessOrEqual(t, len(page), 30)
		for _, ev := range page {
			seqs = append(seqs, ev.Seq)
		}
		after = page[len(page)-1].Seq
	}
	want := make([]int, writers*each)
	for i := range want {
		want[i] = i + 1
	}
	assert.Equal(t, want, seqs)

	page, err := s.Operations.Events(ctx, "op", 98, 0)
	require.NoError(t, err)
	require.Len(t, page, 2)
	assert.Equal(t, []int{99, 100}, []int{page[0].Seq, page[1].Seq})
	assert.Equal(t, "progress", page[0].Type)
	assert.NotZero(t, page[0].At)

	ev, err := s.Operations.AppendEvent(ctx, "op", "note", "no data", nil)
	require.NoError(t, err)
	assert.Equal(t, 101, ev.Seq)
	assert.Nil(t, ev.Data)

	_, err = s.Operations.Events(ctx, "nope", 0, 10)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = s.Operations.AppendEvent(ctx, "nope", "x", "", nil)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}
