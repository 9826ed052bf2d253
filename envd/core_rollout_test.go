package envd_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/rollout"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/fakeruntime"
	"github.com/envd-dev/envd/runtime"
)

// newBaseTar is the test base's "update": /etc/os-release changed and
// /etc/motd added.
func newBaseTar(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Unix(1700000100, 0)
	for _, d := range []string{"bin/", "etc/", "home/", "tmp/"} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: now}))
	}
	for name, content := range map[string]string{"etc/os-release": "ID=core-test-2\n", "bin/true": "#!/bin/sh\n", "etc/motd": "v2\n"} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(content)), ModTime: now}))
		_, err := tw.Write([]byte(content))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// rolloutEnv is a core env with a second base "v2" and, for the user's
// tenant, projects on the first base each with a saved change: "bad-*"
// fail any validation, "p-conflict" changed /etc/os-release (which v2
// also changes); "on-v2" was made on v2.
func rolloutEnv(t *testing.T) *coreEnv { return rolloutEnvWith(t, nil) }

// rolloutEnvWith is rolloutEnv with edit applied to the config.
func rolloutEnvWith(t *testing.T, edit func(*envd.Config)) *coreEnv {
	e := newCoreEnv(t, func(c *envd.Config) {
		c.RolloutConcurrency = 2
		if edit != nil {
			edit(c)
		}
	})
	_, err := e.svc.Parts().Images.ImportImage(e.ctx, e.admin, "v2", bytes.NewReader(newBaseTar(t)))
	require.NoError(t, err)
	// An exec fails in instances whose id starts with "bad-".
	e.rt.SetExec(func(ctx context.Context, upper string, spec runtime.ExecSpec) (int, error) {
		if strings.HasPrefix(filepath.Base(filepath.Dir(upper)), "bad-") {
			fmt.Fprintln(spec.Stderr, "check: the tool is missing on v2")
			return 3, nil
		}
		return 0, nil
	})
	for _, name := range []string{"bad-1", "bad-2", "p-a", "p-b", "p-c", "p-conflict"} {
		e.project(name)
		in := e.instance(name, types.CreateInstanceRequest{})
		e.write(in.ID, "home/"+name, "mine")
		if name == "p-conflict" {
			e.write(in.ID, "etc/os-release", "ID=mine\n")
		}
		e.saved(in.ID, types.SaveRequest{})
		_, err := e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, in.ID)
		require.NoError(t, err)
	}
	_, err = e.svc.CreateProject(e.ctx, e.user, types.CreateProjectRequest{Name: "on-v2", Base: "v2"}, "")
	require.NoError(t, err)
	return e
}

// rollout starts a rollout and waits for it to end.
func (e *coreEnv) rollout(req types.CreateRolloutRequest) types.Rollout {
	e.t.Helper()
	ro, err := e.svc.Parts().Rollouts.CreateRollout(e.ctx, e.admin, req, "")
	require.NoError(e.t, err)
	op := e.wait(e.admin, ro.OperationID)
	require.Equal(e.t, types.OpSucceeded, op.State, "rollout operation: %+v", op.Error)
	ro, err = e.svc.Parts().Rollouts.GetRollout(e.ctx, e.admin, ro.ID)
	require.NoError(e.t, err)
	return ro
}

func byProject(ro types.Rollout) map[string]types.RolloutProject {
	out := map[string]types.RolloutProject{}
	for _, p := range ro.Projects {
		out[p.Project] = p
	}
	return out
}

func statuses(ro types.Rollout) map[string]string {
	out := map[string]string{}
	for _, p := range ro.Projects {
		out[p.Project] = p.Status
	}
	return out
}

// Rollouts: selection by layers, dry run, waves with a failure budget, a
// real run, rollback by compare-and-swap.
func TestCoreRollout(t *testing.T) {
	e := rolloutEnv(t)

	t.Run("refused", func(t *testing.T) {
		e := e.with(t)
		_, err := e.svc.Parts().Rollouts.CreateRollout(e.ctx, e.user, types.CreateRolloutRequest{From: baseImage, To: "v2"}, "")
		assert.ErrorIs(t, err, errdefs.ErrPermissionDenied, "admin only")
		for name, req := range map[string]types.CreateRolloutRequest{
			"no to":        {From: baseImage},
			"same image":   {From: baseImage, To: baseImage},
			"bad glob":     {From: baseImage, To: "v2", Selector: "["},
			"wave too big": {From: baseImage, To: "v2", WaveSize: 1000},
			"empty cmd":    {From: baseImage, To: "v2", Validate: [][]string{{}}},
		} {
			_, err := e.svc.Parts().Rollouts.CreateRollout(e.ctx, e.admin, req, "")
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, name)
		}
	})

	t.Run("dry run", func(t *testing.T) {
		e := e.with(t)
		before := e.versionsOf("p-a")
		ro := e.rollout(types.CreateRolloutRequest{From: baseImage, To: "v2", DryRun: true})
		assert.Equal(t, types.RolloutSucceeded, ro.State)
		assert.Equal(t, map[string]string{"bad-1": "clean", "bad-2": "clean", "p-a": "clean", "p-b": "clean", "p-c": "clean",
			"p-conflict": "conflicts"}, statuses(ro), "on-v2 is not on the from base")
		assert.Equal(t, []string{"/etc/os-release"}, byProject(ro)["p-conflict"].Conflicts)
		assert.Equal(t, before, e.versionsOf("p-a"), "a dry run makes no version")
		_, err := e.svc.Parts().Rollouts.RollbackRollout(e.ctx, e.admin, ro.ID)
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "a dry run has nothing to roll back")
	})

	t.Run("selector and tenant", func(t *testing.T) {
		e := e.with(t)
		ro := e.rollout(types.CreateRolloutRequest{From: baseImage, To: "v2", DryRun: true, Selector: "p-[ab]"})
		assert.Equal(t, map[string]string{"p-a": "clean", "p-b": "clean"}, statuses(ro))
		ro = e.rollout(types.CreateRolloutRequest{From: baseImage, To: "v2", DryRun: true, Tenant: "nobody"})
		assert.Empty(t, ro.Projects)
		assert.Equal(t, types.RolloutSucceeded, ro.State)
	})

	t.Run("budget", func(t *testing.T) {
		e := e.with(t)
		ro := e.rollout(types.CreateRolloutRequest{From: baseImage, To: "v2", WaveSize: 2, MaxFailures: 1,
			Validate: [][]string{{"sh", "-c", "check"}}})
		assert.Equal(t, types.RolloutStoppedBudget, ro.State, ro.Message)
		assert.Equal(t, map[string]int{"validation_failed": 2, "skipped": 4}, ro.Totals, "the first wave's two failures exceed a budget of one")
		bad := byProject(ro)["bad-1"]
		assert.Contains(t, bad.Output, "the tool is missing on v2")
		assert.Contains(t, bad.Message, "sh -c check exited 3")
		assert.Equal(t, 2, bad.OldVersion)
		assert.Equal(t, 3, bad.NewVersion)
		assert.Equal(t, 2, e.current("bad-1"), "current untouched")
		p, err := e.svc.GetProject(e.ctx, e.user, "bad-1")
		require.NoError(t, err)
		require.NotNil(t, p.RolloutFailure, "the owner sees the failure")
		assert.Equal(t, ro.ID, p.RolloutFailure.Rollout)
		assert.Equal(t, "validation_failed", p.RolloutFailure.Status)
		assert.Contains(t, byProject(ro)["p-a"].Message, "failure budget")
		assert.Equal(t, 2, e.current("p-a"), "a project not started is not moved")
	})

	var real types.Rollout
	t.Run("run", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("p-a", types.CreateInstanceRequest{})
		real = e.rollout(types.CreateRolloutRequest{From: baseImage, To: "v2", Selector: "p-*", WaveSize: 2, MaxFailures: 1,
			Validate: [][]string{{"true"}}})
		assert.Equal(t, types.RolloutSucceeded, real.State, real.Message)
		assert.Equal(t, map[string]string{"p-a": "switched", "p-b": "switched", "p-c": "switched", "p-conflict": "conflicts"}, statuses(real))
		assert.Equal(t, map[string]int{"switched": 3, "conflicts": 1}, real.Totals)
		pa := byProject(real)["p-a"]
		assert.Equal(t, pa.NewVersion, e.current("p-a"))
		v, err := e.svc.GetVersion(e.ctx, e.user, "p-a", pa.NewVersion)
		require.NoError(t, err)
		assert.Equal(t, "migration", v.Kind)
		assert.Equal(t, 2, e.current("p-conflict"), "conflicts are not moved")
		p, err := e.svc.GetProject(e.ctx, e.user, "p-a")
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(p.CurrentBase, "v2 ("), p.CurrentBase)
		assert.Equal(t, pa.NewVersion, e.getInstance(in.ID).NewerCurrent, "a running instance keeps its version and says a newer base is current")

		events := e.eventTypes(e.admin, real.OperationID)
		assert.Contains(t, events, "wave")
		assert.Contains(t, events, "project")

		// Selection sees the projects now on v2 no more.
		again := e.rollout(types.CreateRolloutRequest{From: baseImage, To: "v2", Selector: "p-*", DryRun: true})
		assert.Equal(t, map[string]string{"p-conflict": "conflicts"}, statuses(again))
	})

	t.Run("rollback", func(t *testing.T) {
		e := e.with(t)
		require.NotEmpty(t, real.ID)
		// p-b's owner moved current since: the rollback must not touch it.
		pb := byProject(real)["p-b"]
		exp := pb.NewVersion
		_, err := e.svc.SetCurrent(e.ctx, e.user, "p-b", types.SetCurrentRequest{Version: 1, ExpectedCurrent: &exp})
		require.NoError(t, err)

		_, err = e.svc.Parts().Rollouts.RollbackRollout(e.ctx, e.user, real.ID)
		assert.ErrorIs(t, err, errdefs.ErrPermissionDenied, "admin only")
		op, err := e.svc.Parts().Rollouts.RollbackRollout(e.ctx, e.admin, real.ID)
		require.NoError(t, err)
		assert.Equal(t, types.OpKindRollback, op.Kind)
		assert.Equal(t, real.ID, op.Target)
		op = e.wait(e.admin, op.ID)
		require.Equal(t, types.OpSucceeded, op.State, "%+v", op.Error)
		var res types.Rollout
		require.NoError(t, json.Unmarshal(op.Result, &res))
		assert.Equal(t, types.RolloutRolledBack, res.State, "the result is the rollout")
		ro, err := e.svc.Parts().Rollouts.GetRollout(e.ctx, e.admin, real.ID)
		require.NoError(t, err)
		assert.Equal(t, types.RolloutRolledBack, ro.State)
		assert.Equal(t, op.ID, ro.RollbackOperationID)
		assert.Equal(t, map[string]string{"p-a": "rolled_back", "p-b": "switched", "p-c": "rolled_back", "p-conflict": "conflicts"}, statuses(ro))
		assert.Contains(t, byProject(ro)["p-b"].Message, "not rolled back")
		assert.Equal(t, 2, e.current("p-a"))
		assert.Equal(t, 2, e.current("p-c"))
		assert.Equal(t, 1, e.current("p-b"), "the owner's switch stays")
		assert.Contains(t, e.eventTypes(e.admin, op.ID), "rolled_back")

		again, err := e.svc.Parts().Rollouts.RollbackRollout(e.ctx, e.admin, real.ID)
		require.NoError(t, err, "asking again is not refused")
		assert.Equal(t, op.ID, again.ID, "it answers the rollback that finished")
		assert.Equal(t, types.OpSucceeded, again.State)
	})

	t.Run("idempotency key", func(t *testing.T) {
		e := e.with(t)
		req := types.CreateRolloutRequest{From: baseImage, To: "v2", DryRun: true, Selector: "p-c"}
		first, err := e.svc.Parts().Rollouts.CreateRollout(e.ctx, e.admin, req, "key-rollout")
		require.NoError(t, err)
		again, err := e.svc.Parts().Rollouts.CreateRollout(e.ctx, e.admin, req, "key-rollout")
		require.NoError(t, err)
		assert.Equal(t, first.ID, again.ID, "a retry gets the same rollout")
		rs, err := e.svc.Parts().Rollouts.ListRollouts(e.ctx, e.admin)
		require.NoError(t, err)
		n := 0
		for _, r := range rs {
			if r.Selector == "p-c" {
				n++
			}
		}
		assert.Equal(t, 1, n, "one rollout made")
		req.Selector = "p-b"
		_, err = e.svc.Parts().Rollouts.CreateRollout(e.ctx, e.admin, req, "key-rollout")
		assert.ErrorIs(t, err, errdefs.ErrIdempotencyReuse)
		e.wait(e.admin, first.OperationID)
	})

	t.Run("list", func(t *testing.T) {
		e := e.with(t)
		rs, err := e.svc.Parts().Rollouts.ListRollouts(e.ctx, e.admin)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(rs), 5)
		assert.Empty(t, rs[0].Projects, "a listing has totals only")
		_, err = e.svc.Parts().Rollouts.ListRollouts(e.ctx, e.user)
		assert.ErrorIs(t, err, errdefs.ErrPermissionDenied)
	})
}

// A rollout can be paused, resumed and canceled; one that a restart
// interrupted runs on at the next start.
func TestCoreRolloutControl(t *testing.T) {
	e := rolloutEnv(t)
	// Hold every validation until released.
	release := make(chan struct{})
	e.rt.SetExec(func(ctx context.Context, upper string, spec runtime.ExecSpec) (int, error) {
		select {
		case <-release:
			return 0, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	ro, err := e.svc.Parts().Rollouts.CreateRollout(e.ctx, e.admin, types.CreateRolloutRequest{From: baseImage, To: "v2", Selector: "p-[abc]",
		WaveSize: 1, Validate: [][]string{{"true"}}}, "")
	require.NoError(t, err)
	assert.Len(t, ro.Projects, 3, "the selection is made at once")
	ro, err = e.svc.Parts().Rollouts.RolloutAction(e.ctx, e.admin, ro.ID, "pause")
	require.NoError(t, err)
	assert.Equal(t, types.RolloutPaused, ro.State)
	_, err = e.svc.Parts().Rollouts.RolloutAction(e.ctx, e.admin, ro.ID, "pause")
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	close(release)
	time.Sleep(300 * time.Millisecond)
	ro, err = e.svc.Parts().Rollouts.GetRollout(e.ctx, e.admin, ro.ID)
	require.NoError(t, err)
	assert.Equal(t, types.RolloutPaused, ro.State)
	assert.LessOrEqual(t, ro.Totals["switched"], 1, "at most the project that had started")

	// A restart while paused: the rollout goes on after resume.
	e.restart()
	ro, err = e.svc.Parts().Rollouts.RolloutAction(e.ctx, e.admin, ro.ID, "resume")
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for ro.State == types.RolloutRunning && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		ro, err = e.svc.Parts().Rollouts.GetRollout(e.ctx, e.admin, ro.ID)
		require.NoError(t, err)
	}
	assert.Equal(t, types.RolloutSucceeded, ro.State)
	assert.Equal(t, map[string]int{"switched": 3}, ro.Totals)

	// Cancel: nothing more starts; the rest is reported skipped.
	hold := make(chan struct{})
	e.rt.SetExec(func(ctx context.Context, upper string, spec runtime.ExecSpec) (int, error) {
		select {
		case <-hold:
			return 0, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	ro, err = e.svc.Parts().Rollouts.CreateRollout(e.ctx, e.admin, types.CreateRolloutRequest{From: baseImage, To: "v2", Selector: "bad-*",
		WaveSize: 1, Validate: [][]string{{"true"}}}, "")
	require.NoError(t, err)
	ro, err = e.svc.Parts().Rollouts.RolloutAction(e.ctx, e.admin, ro.ID, "cancel")
	require.NoError(t, err)
	assert.Equal(t, types.RolloutCanceled, ro.State)
	close(hold)
	op := e.wait(e.admin, ro.OperationID)
	assert.Equal(t, types.OpSucceeded, op.State)
	ro, err = e.svc.Parts().Rollouts.GetRollout(e.ctx, e.admin, ro.ID)
	require.NoError(t, err)
	assert.Equal(t, types.RolloutCanceled, ro.State)
	assert.GreaterOrEqual(t, ro.Totals["skipped"], 1, "%v", ro.Totals)

	// Canceling its operation cancels the rollout, the migration in
	// flight included.
	hold = make(chan struct{})
	defer close(hold)
	ro, err = e.svc.Parts().Rollouts.CreateRollout(e.ctx, e.admin, types.CreateRolloutRequest{From: baseImage, To: "v2", Selector: "bad-*",
		WaveSize: 1, Validate: [][]string{{"true"}}}, "")
	require.NoError(t, err)
	_, err = e.svc.Parts().Operations.CancelOperation(e.ctx, e.admin, ro.OperationID)
	require.NoError(t, err)
	op = e.wait(e.admin, ro.OperationID)
	assert.Equal(t, types.OpCanceled, op.State)
	ro, err = e.svc.Parts().Rollouts.GetRollout(e.ctx, e.admin, ro.ID)
	require.NoError(t, err)
	assert.Equal(t, types.RolloutCanceled, ro.State)
	require.NotEmpty(t, ro.Projects)
	assert.Equal(t, map[string]int{"skipped": len(ro.Projects)}, ro.Totals)
}

// Per-project migration, as rollouts lean on it.
func TestCoreMigrateFixes(t *testing.T) {
	e := rolloutEnv(t)

	t.Run("no conflicts is an empty list", func(t *testing.T) {
		e := e.with(t)
		op, err := e.svc.Migrate(e.ctx, e.user, "p-a", types.MigrateRequest{Base: "v2"}, "")
		require.NoError(t, err)
		op = e.wait(e.user, op.ID)
		require.Equal(t, types.OpSucceeded, op.State)
		var raw map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(op.Result, &raw))
		assert.JSONEq(t, `[]`, string(raw["conflicts"]))
	})

	t.Run("onto the base it sits on is refused at once", func(t *testing.T) {
		e := e.with(t)
		_, err := e.svc.Migrate(e.ctx, e.user, "on-v2", types.MigrateRequest{Base: "v2"}, "")
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	})

	t.Run("a failed migration keeps its result; GC collects the failed version", func(t *testing.T) {
		e := e.with(t)
		op, err := e.svc.Migrate(e.ctx, e.user, "bad-1", types.MigrateRequest{Base: "v2", Validate: [][]string{{"sh", "-c", "test -e /x"}}}, "")
		require.NoError(t, err)
		op = e.wait(e.user, op.ID)
		require.Equal(t, types.OpFailed, op.State)
		assert.Contains(t, op.Error.Message, "sh -c 'test -e /x' exited 3", "the command as given")
		var res types.MigrateResult
		require.NoError(t, json.Unmarshal(op.Result, &res), "the failed operation carries its result")
		assert.Equal(t, 2, res.From)
		require.NotZero(t, res.Version)
		assert.Equal(t, []string{}, res.Conflicts)
		v, err := e.svc.GetVersion(e.ctx, e.user, "bad-1", res.Version)
		require.NoError(t, err)
		assert.Equal(t, "failed", v.State)

		gc, err := e.svc.GC(e.ctx, e.admin, types.GCRequest{}, "")
		require.NoError(t, err)
		gc = e.wait(e.admin, gc.ID)
		require.Equal(t, types.OpSucceeded, gc.State, "%+v", gc.Error)
		_, err = e.svc.GetVersion(e.ctx, e.user, "bad-1", res.Version)
		assert.ErrorIs(t, err, errdefs.ErrNotFound, "the failed version was collected")
	})

	t.Run("declared validation runs in every migration", func(t *testing.T) {
		e := e.with(t)
		p, err := e.svc.SetProjectValidation(e.ctx, e.user, "bad-2", types.ProjectValidation{Validate: [][]string{{"check"}}})
		require.NoError(t, err)
		assert.Equal(t, [][]string{{"check"}}, p.Validate)
		op, err := e.svc.Migrate(e.ctx, e.user, "bad-2", types.MigrateRequest{Base: "v2"}, "")
		require.NoError(t, err)
		op = e.wait(e.user, op.ID)
		assert.Equal(t, types.OpFailed, op.State, "the declared command ran and failed")
		_, err = e.svc.SetProjectValidation(e.ctx, e.user, "bad-2", types.ProjectValidation{Validate: [][]string{{""}}})
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	})

	t.Run("a successful switch clears a rollout failure", func(t *testing.T) {
		e := e.with(t)
		ro := e.rollout(types.CreateRolloutRequest{From: baseImage, To: "v2", Selector: "p-conflict"})
		assert.Equal(t, map[string]int{"conflicts": 1}, ro.Totals)
		p, err := e.svc.GetProject(e.ctx, e.user, "p-conflict")
		require.NoError(t, err)
		require.NotNil(t, p.RolloutFailure)
		assert.True(t, strings.HasPrefix(p.CurrentBase, baseImage+" ("), p.CurrentBase)
		op, err := e.svc.Migrate(e.ctx, e.user, "p-conflict", types.MigrateRequest{Base: "v2", Switch: true}, "")
		require.NoError(t, err)
		require.Equal(t, types.OpSucceeded, e.wait(e.user, op.ID).State)
		p, err = e.svc.GetProject(e.ctx, e.user, "p-conflict")
		require.NoError(t, err)
		assert.Nil(t, p.RolloutFailure)
		assert.True(t, strings.HasPrefix(p.CurrentBase, "v2 ("), p.CurrentBase)
	})
}

// A restart while a project migrates: the rollout runs on at the next
// start and tries that project again (its trial instance removed).
func TestCoreRolloutResumesAfterRestart(t *testing.T) {
	e := rolloutEnv(t)
	entered := make(chan struct{}, 8)
	e.rt.SetExec(func(ctx context.Context, upper string, spec runtime.ExecSpec) (int, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return 0, ctx.Err()
	})
	ro, err := e.svc.Parts().Rollouts.CreateRollout(e.ctx, e.admin, types.CreateRolloutRequest{From: baseImage, To: "v2", Selector: "p-[ab]",
		WaveSize: 1, Validate: [][]string{{"true"}}}, "")
	require.NoError(t, err)
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first validation did not start")
	}
	e.rt.SetExec(func(ctx context.Context, upper string, spec runtime.ExecSpec) (int, error) { return 0, nil })
	e.restart()

	op := e.wait(e.admin, ro.OperationID)
	require.Equal(t, types.OpSucceeded, op.State, "%+v", op.Error)
	ro, err = e.svc.Parts().Rollouts.GetRollout(e.ctx, e.admin, ro.ID)
	require.NoError(t, err)
	assert.Equal(t, types.RolloutSucceeded, ro.State)
	assert.Equal(t, map[string]string{"p-a": "switched", "p-b": "switched"}, statuses(ro))
	assert.Contains(t, e.eventTypes(e.admin, ro.OperationID), "resumed")
	for _, p := range ro.Projects {
		assert.Equal(t, p.NewVersion, e.current(p.Project))
	}
}

// A rollout's migrations wait while the node runs a save: interactive work
// goes first.
func TestCoreRolloutYieldsToSaves(t *testing.T) {
	e := rolloutEnv(t)
	in := e.instance("p-a", types.CreateInstanceRequest{})
	release := make(chan struct{})
	frozen := make(chan struct{})
	var once sync.Once
	e.rt.SetFault(fakeruntime.Pause, func(ctx context.Context, id string) error {
		once.Do(func() { close(frozen) })
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	saveOp, err := e.svc.Save(e.ctx, e.user, in.ID, types.SaveRequest{}, "")
	require.NoError(t, err)
	<-frozen
	require.Equal(t, 1, e.svc.InteractiveInFlight())

	ro, err := e.svc.Parts().Rollouts.CreateRollout(e.ctx, e.admin, types.CreateRolloutRequest{From: baseImage, To: "v2", Selector: "p-b", DryRun: true}, "")
	require.NoError(t, err)
	time.Sleep(time.Second)
	ro, err = e.svc.Parts().Rollouts.GetRollout(e.ctx, e.admin, ro.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"pending": 1}, ro.Totals, "the rollout waits for the save")

	close(release)
	assert.Equal(t, types.OpSucceeded, e.wait(e.user, saveOp.ID).State)
	assert.Equal(t, types.OpSucceeded, e.wait(e.admin, ro.OperationID).State)
	ro, err = e.svc.Parts().Rollouts.GetRollout(e.ctx, e.admin, ro.ID)
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"clean": 1}, ro.Totals)
	assert.Equal(t, 0, e.svc.InteractiveInFlight())
}

// crashPoints is a service's rollout.Deps.CrashPoint. Armed at one step
// (of one project, or any), it fires once: it closes the channel arm
// returned, then does what it was armed to do.
type crashPoints struct {
	mu      sync.Mutex
	step    rollout.Step
	project string
	hit     chan struct{}
	then    func(ctx context.Context)
}

// crash stops the work there as a kill would: the goroutine waits until
// the service stops (its operation's context ends), then exits, so that
// nothing after that point runs and nothing records how it ended.
func crash(ctx context.Context) {
	<-ctx.Done()
	goruntime.Goexit()
}

// stall holds the work there until its operation's context ends, then
// lets it go on (with that context).
func stall(ctx context.Context) { <-ctx.Done() }

func (c *crashPoints) arm(step rollout.Step, project string, then func(ctx context.Context)) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step, c.project, c.hit, c.then = step, project, make(chan struct{}), then
	return c.hit
}

func (c *crashPoints) point(ctx context.Context, step rollout.Step, _, project string) {
	c.mu.Lock()
	fire := c.hit != nil && step == c.step && (c.project == "" || c.project == project)
	hit, then := c.hit, c.then
	if fire {
		c.hit, c.then = nil, nil
	}
	c.mu.Unlock()
	if fire {
		close(hit)
		then(ctx)
	}
}

func awaitHit(t testing.TB, hit <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-hit:
	case <-time.After(60 * time.Second):
		t.Fatalf("the work did not reach %s", what)
	}
}

// crashEnv is a rolloutEnv whose rollouts stop where cp is armed.
func crashEnv(t *testing.T) (*coreEnv, *crashPoints) {
	cp := &crashPoints{}
	e := rolloutEnvWith(t, func(c *envd.Config) { c.RolloutCrashPoint = cp.point })
	return e, cp
}

// rolloutABC moves p-a, p-b and p-c onto v2, one at a time, and returns
// the rollout as its creation answered it.
func (e *coreEnv) startRolloutABC() types.Rollout {
	e.t.Helper()
	ro, err := e.svc.Parts().Rollouts.CreateRollout(e.ctx, e.admin, types.CreateRolloutRequest{From: baseImage, To: "v2", Selector: "p-[abc]",
		WaveSize: 1, Validate: [][]string{{"true"}}}, "")
	require.NoError(e.t, err)
	require.Len(e.t, ro.Projects, 3)
	return ro
}

// rollbackDone waits for a rollback operation to succeed and returns the
// rollout.
func (e *coreEnv) rollbackDone(id, opID string) types.Rollout {
	e.t.Helper()
	op := e.wait(e.admin, opID)
	require.Equal(e.t, types.OpSucceeded, op.State, "rollback operation: %+v", op.Error)
	ro, err := e.svc.Parts().Rollouts.GetRollout(e.ctx, e.admin, id)
	require.NoError(e.t, err)
	return ro
}

// assertBack checks that every project of the rollout is rolled back and
// on its old version again.
func (e *coreEnv) assertBack(ro types.Rollout, want map[string]string) {
	e.t.Helper()
	assert.Equal(e.t, types.RolloutRolledBack, ro.State, ro.Message)
	assert.Equal(e.t, want, statuses(ro))
	for _, p := range ro.Projects {
		assert.Equal(e.t, p.OldVersion, e.current(p.Project), "%s is on its old version", p.Project)
	}
}

// A crash between a project's switch and its record, or between its
// intent and the switch: the restarted rollout recognizes the switch by
// the project's current (or makes it), never reports the project skipped
// while it sits on the new base, and the rollback switches it back. A
// rollout canceled meanwhile settles the switch the same way, without
// making it.
func TestCoreRolloutSwitchCrash(t *testing.T) {
	e, cp := crashEnv(t)
	for _, tc := range []struct {
		name     string
		step     rollout.Step
		cancel   bool
		statuses map[string]string // after the rollout
	}{
		{"after the intent", rollout.StepSwitchIntent, false, map[string]string{"p-a": "switched", "p-b": "switched", "p-c": "switched"}},
		{"after the swap", rollout.StepSwitched, false, map[string]string{"p-a": "switched", "p-b": "switched", "p-c": "switched"}},
		{"after the intent, canceled", rollout.StepSwitchIntent, true, map[string]string{"p-a": "switched", "p-b": "skipped", "p-c": "skipped"}},
		{"after the swap, canceled", rollout.StepSwitched, true, map[string]string{"p-a": "switched", "p-b": "switched", "p-c": "skipped"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := e.with(t)
			hit := cp.arm(tc.step, "p-b", crash)
			ro := e.startRolloutABC()
			awaitHit(t, hit, string(tc.step))
			if tc.cancel {
				_, err := e.svc.Parts().Rollouts.RolloutAction(e.ctx, e.admin, ro.ID, "cancel")
				require.NoError(t, err)
			}
			e.restart()

			op := e.wait(e.admin, ro.OperationID)
			require.Equal(t, types.OpSucceeded, op.State, "%+v", op.Error)
			ro, err := e.svc.Parts().Rollouts.GetRollout(e.ctx, e.admin, ro.ID)
			require.NoError(t, err)
			assert.Equal(t, tc.statuses, statuses(ro))
			pb := byProject(ro)["p-b"]
			require.NotZero(t, pb.NewVersion, "p-b's migrated version is reported")
			for _, p := range ro.Projects {
				if p.Status == types.RolloutProjectSwitched {
					assert.Equal(t, p.NewVersion, e.current(p.Project), "%s is on the version the report says", p.Project)
				} else {
					assert.Equal(t, p.OldVersion, e.current(p.Project), "%s (%s) did not move", p.Project, p.Status)
				}
			}
			if pb.Status == types.RolloutProjectSkipped {
				assert.Contains(t, pb.Message, "the rollout ended during its switch")
			}

			back, err := e.svc.Parts().Rollouts.RollbackRollout(e.ctx, e.admin, ro.ID)
			require.NoError(t, err)
			want := map[string]string{}
			for p, st := range tc.statuses {
				want[p] = st
				if st == types.RolloutProjectSwitched {
					want[p] = types.RolloutProjectRolledBack
				}
			}
			e.assertBack(e.rollbackDone(ro.ID, back.ID), want)
		})
	}
}

// A crash at each step of a rollback: asking again before the restart
// gets the same operation, and the restarted service finishes it; every
// project ends on its old version, rolled_back, a project switched back
// before the crash recognized by its current.
func TestCoreRollbackCrash(t *testing.T) {
	e, cp := crashEnv(t)
	for _, tc := range []struct {
		step    rollout.Step
		project string
	}{
		{rollout.StepRollbackStart, ""},
		{rollout.StepRollbackIntent, "p-b"},
		{rollout.StepRolledBack, "p-b"},
		{rollout.StepRollbackEnd, ""},
	} {
		t.Run(string(tc.step), func(t *testing.T) {
			e := e.with(t)
			ro := e.startRolloutABC()
			require.Equal(t, types.OpSucceeded, e.wait(e.admin, ro.OperationID).State)

			hit := cp.arm(tc.step, tc.project, crash)
			op, err := e.svc.Parts().Rollouts.RollbackRollout(e.ctx, e.admin, ro.ID)
			require.NoError(t, err)
			awaitHit(t, hit, string(tc.step))
			got, err := e.svc.Parts().Rollouts.GetRollout(e.ctx, e.admin, ro.ID)
			require.NoError(t, err)
			assert.Equal(t, types.RolloutRollingBack, got.State)
			again, err := e.svc.Parts().Rollouts.RollbackRollout(e.ctx, e.admin, ro.ID)
			require.NoError(t, err, "asking again is not refused")
			assert.Equal(t, op.ID, again.ID, "it answers the rollback running")
			e.restart()

			e.assertBack(e.rollbackDone(ro.ID, op.ID), map[string]string{"p-a": "rolled_back", "p-b": "rolled_back", "p-c": "rolled_back"})
			assert.Contains(t, e.eventTypes(e.admin, op.ID), "resumed")
		})
	}
}

// A rollback does not run under its request's context; one whose
// operation is canceled part way is taken over by the next request, which
// goes on where it stopped.
func TestCoreRollbackCanceled(t *testing.T) {
	e, cp := crashEnv(t)

	t.Run("request context", func(t *testing.T) {
		e := e.with(t)
		ro := e.startRolloutABC()
		require.Equal(t, types.OpSucceeded, e.wait(e.admin, ro.OperationID).State)
		rctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		hit := cp.arm(rollout.StepRolledBack, "p-a", func(context.Context) { cancel() })
		op, err := e.svc.Parts().Rollouts.RollbackRollout(rctx, e.admin, ro.ID)
		require.NoError(t, err)
		awaitHit(t, hit, "p-a's swap back")
		require.Error(t, rctx.Err())
		e.assertBack(e.rollbackDone(ro.ID, op.ID), map[string]string{"p-a": "rolled_back", "p-b": "rolled_back", "p-c": "rolled_back"})
	})

	t.Run("operation canceled, then asked again", func(t *testing.T) {
		e := e.with(t)
		ro := e.startRolloutABC()
		require.Equal(t, types.OpSucceeded, e.wait(e.admin, ro.OperationID).State)
		hit := cp.arm(rollout.StepRollbackIntent, "p-b", stall)
		op, err := e.svc.Parts().Rollouts.RollbackRollout(e.ctx, e.admin, ro.ID)
		require.NoError(t, err)
		awaitHit(t, hit, "p-b's intent")
		_, err = e.svc.Parts().Operations.CancelOperation(e.ctx, e.admin, op.ID)
		require.NoError(t, err)
		assert.Equal(t, types.OpCanceled, e.wait(e.admin, op.ID).State)
		got, err := e.svc.Parts().Rollouts.GetRollout(e.ctx, e.admin, ro.ID)
		require.NoError(t, err)
		assert.Equal(t, types.RolloutRollingBack, got.State)
		assert.Equal(t, "rolled_back", statuses(got)["p-a"])
		assert.Equal(t, byProject(got)["p-b"].NewVersion, e.current("p-b"), "p-b not switched back yet")

		next, err := e.svc.Parts().Rollouts.RollbackRollout(e.ctx, e.admin, ro.ID)
		require.NoError(t, err, "a rollback whose operation was canceled is taken over")
		assert.NotEqual(t, op.ID, next.ID)
		e.assertBack(e.rollbackDone(ro.ID, next.ID), map[string]string{"p-a": "rolled_back", "p-b": "rolled_back", "p-c": "rolled_back"})
	})

	t.Run("refused", func(t *testing.T) {
		e := e.with(t)
		hold := cp.arm(rollout.StepSwitchIntent, "p-a", stall)
		ro := e.startRolloutABC()
		awaitHit(t, hold, "p-a's intent")
		_, err := e.svc.Parts().Rollouts.RollbackRollout(e.ctx, e.admin, ro.ID)
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "a running rollout is canceled first")
		_, err = e.svc.Parts().Rollouts.RollbackRollout(e.ctx, e.admin, "ro-nonexistent")
		assert.ErrorIs(t, err, errdefs.ErrNotFound)
		_, err = e.svc.Parts().Rollouts.RollbackRollout(e.ctx, e.admin, "../x")
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		_, err = e.svc.Parts().Operations.CancelOperation(e.ctx, e.admin, ro.OperationID)
		require.NoError(t, err)
		assert.Equal(t, types.OpCanceled, e.wait(e.admin, ro.OperationID).State)
	})
}
