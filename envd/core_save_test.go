package envd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/fakeruntime"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
)

// savedEvents are the events of a save that became current, in order.
var savedEvents = []string{"spooled", "encoded", "pushed", "committed", string(types.OpSucceeded)}

// The save path: which version a save expects to be current, what it is
// numbered, whether it becomes current, what it contains, and what it
// refuses before any operation exists.
func TestCoreSave(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	t.Run("decisions", func(t *testing.T) { testSaveDecisions(t, e) })
	t.Run("refused", func(t *testing.T) { testSaveRefused(t, e) })
	t.Run("freeze window", func(t *testing.T) { testSaveFreezeWindow(t, e) })
}

// holdThaw makes the runtime's next thaw wait until release is called:
// the task stays frozen and the save still holds it. frozen is closed when
// the thaw is asked.
func holdThaw(e *coreEnv) (frozen <-chan struct{}, release func()) {
	asked, done := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.rt.SetFault(fakeruntime.Resume, func(ctx context.Context, id string) error {
		once.Do(func() { close(asked) })
		<-done
		return nil
	})
	return asked, func() {
		e.rt.SetFault(fakeruntime.Resume, nil)
		close(done)
	}
}

// While a save holds the instance frozen, an exec waits for the thaw. (A
// user's pause during a save's freeze window needs a window the fake cannot
// hold open: the gate serializes it behind the thaw; freeze_test.go checks
// that interleaving on the gate itself.)
func testSaveFreezeWindow(t *testing.T, e *coreEnv) {
	e = e.with(t)
	e.project("freeze")
	e.rt.SetExec(func(ctx context.Context, upper string, spec runtime.ExecSpec) (int, error) {
		fmt.Fprint(spec.Stdout, "out")
		fmt.Fprint(spec.Stderr, "err")
		return 3, nil
	})
	defer e.rt.SetExec(nil)

	t.Run("an exec waits for the thaw", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("freeze", types.CreateInstanceRequest{})
		frozen, release := holdThaw(e)
		op, err := e.svc.Save(e.ctx, e.user, in.ID, types.SaveRequest{}, "")
		require.NoError(t, err)
		<-frozen
		require.Equal(t, "paused", e.task(in.ID))
		done := make(chan types.ExecResult, 1)
		go func() {
			res, err := e.svc.Parts().Instances.Exec(e.ctx, e.user, in.ID, types.ExecRequest{Args: []string{"make"}})
			assert.NoError(t, err)
			done <- res
		}()
		select {
		case <-done:
			t.Fatal("the exec ran while the instance was frozen")
		case <-time.After(200 * time.Millisecond):
		}
		release()
		res := <-done
		assert.Equal(t, types.ExecResult{ExitCode: 3, Stdout: "out", Stderr: "err"}, res, "the exit code and output pass through")
		assert.Equal(t, types.OpSucceeded, e.wait(e.user, op.ID).State)
		assert.Equal(t, "running", e.task(in.ID))
	})
}

func testSaveDecisions(t *testing.T, e *coreEnv) {
	e = e.with(t)
	t.Run("first save expects the version the instance started from and becomes current", func(t *testing.T) {
		e := e.with(t)
		e.project("first")
		in := e.instance("first", types.CreateInstanceRequest{})
		e.write(in.ID, "home/dev/notes.txt", "one")

		op := e.save(in.ID, types.SaveRequest{Message: "my first save"})
		require.Equal(t, types.OpSucceeded, op.State)
		var first types.SaveResult
		require.NoError(t, json.Unmarshal(op.Result, &first))
		assert.Equal(t, types.SaveResult{Project: "first", Version: 2, Current: true, Conflict: false, Expected: 1},
			decision(first), "version 1 is the base: the first save is version 2")
		assert.Equal(t, "estargz", first.Compression)
		assert.Positive(t, first.LayerBytes)
		assert.Equal(t, 3, first.Entries, "home/, home/dev/, home/dev/notes.txt")
		assert.Equal(t, 2, e.current("first"))
		assert.Equal(t, 2, e.getInstance(in.ID).LastSavedVersion)
		assert.Equal(t, savedEvents, e.eventTypes(e.user, op.ID))
		v, err := e.svc.GetVersion(e.ctx, e.user, "first", 2)
		require.NoError(t, err)
		assert.Equal(t, "snapshot", v.Kind)
		assert.Equal(t, "my first save", v.Message)
		assert.Equal(t, 1, v.Parent)
		assert.Equal(t, in.ID, v.InstanceID)
		assert.Equal(t, map[string]string{"home/": "", "home/dev/": "", "home/dev/notes.txt": "one"}, e.layerFiles("first", 2))
	})

	t.Run("a second save from the same instance expects its last save and replaces its layer", func(t *testing.T) {
		e := e.with(t)
		e.project("second")
		in := e.instance("second", types.CreateInstanceRequest{})
		e.write(in.ID, "home/dev/a", "a")
		first := e.saved(in.ID, types.SaveRequest{})
		require.Equal(t, 2, first.Version)
		assert.Equal(t, 2, e.getInstance(in.ID).LastSavedVersion)

		e.write(in.ID, "home/dev/b", "b")
		second := e.saved(in.ID, types.SaveRequest{})
		assert.Equal(t, types.SaveResult{Project: "second", Version: 3, Current: true, Expected: 2}, decision(second))
		assert.Equal(t, []string{"1:ready", "2:ready", "3:ready:current"}, e.versionsOf("second"))

		// Saves are incremental from the version the rootfs sits on: the
		// second image is the base plus one layer with both changes, not
		// the first save's image plus another layer.
		v2, err := e.svc.GetVersion(e.ctx, e.user, "second", 2)
		require.NoError(t, err)
		v3, err := e.svc.GetVersion(e.ctx, e.user, "second", 3)
		require.NoError(t, err)
		assert.Equal(t, v2.Layers, v3.Layers)
		assert.Equal(t, 1, v3.Parent, "the image extends the version the rootfs sits on")
		assert.Equal(t, map[string]string{"home/": "", "home/dev/": "", "home/dev/a": "a", "home/dev/b": "b"}, e.layerFiles("second", 3))
	})

	t.Run("a save whose expected current moved is ready but a conflict and does not move current", func(t *testing.T) {
		e := e.with(t)
		e.project("race")
		winner := e.instance("race", types.CreateInstanceRequest{})
		loser := e.instance("race", types.CreateInstanceRequest{})
		e.write(winner.ID, "home/dev/w", "w")
		e.write(loser.ID, "home/dev/l", "l")
		require.Equal(t, 2, e.saved(winner.ID, types.SaveRequest{}).Version)

		op := e.save(loser.ID, types.SaveRequest{})
		require.Equal(t, types.OpSucceeded, op.State, "a conflict is a result, not a failure")
		var res types.SaveResult
		require.NoError(t, json.Unmarshal(op.Result, &res))
		assert.Equal(t, types.SaveResult{Project: "race", Version: 3, Current: false, Conflict: true, Expected: 1}, decision(res))
		assert.Equal(t, []string{"spooled", "encoded", "pushed", "conflict", string(types.OpSucceeded)}, e.eventTypes(e.user, op.ID))
		assert.Equal(t, []string{"1:ready", "2:ready:current", "3:ready"}, e.versionsOf("race"))
		assert.Equal(t, 3, e.getInstance(loser.ID).LastSavedVersion, "the loser's save is recorded as its last")

		// Its next save expects its own last save, still not current.
		again := e.saved(loser.ID, types.SaveRequest{})
		assert.Equal(t, types.SaveResult{Project: "race", Version: 4, Conflict: true, Expected: 3}, decision(again))
		assert.Equal(t, 2, e.current("race"))

		// The user resolves it by switching, with the current they saw.
		_, err := e.svc.SetCurrent(e.ctx, e.user, "race", types.SetCurrentRequest{Version: 4, ExpectedCurrent: intp(1)})
		require.ErrorIs(t, err, errdefs.ErrConflict, "a blind or stale switch is refused")
		_, err = e.svc.SetCurrent(e.ctx, e.user, "race", types.SetCurrentRequest{Version: 4, ExpectedCurrent: intp(2)})
		require.NoError(t, err)
		e.write(loser.ID, "home/dev/l2", "l2")
		assert.Equal(t, types.SaveResult{Project: "race", Version: 5, Current: true, Expected: 4}, decision(e.saved(loser.ID, types.SaveRequest{})))
	})

	t.Run("concurrent saves expecting the same current: one becomes current, the other a conflict", func(t *testing.T) {
		e := e.with(t)
		e.project("concurrent")
		a := e.instance("concurrent", types.CreateInstanceRequest{})
		b := e.instance("concurrent", types.CreateInstanceRequest{})
		opA, err := e.svc.Save(e.ctx, e.user, a.ID, types.SaveRequest{}, "")
		require.NoError(t, err)
		opB, err := e.svc.Save(e.ctx, e.user, b.ID, types.SaveRequest{}, "")
		require.NoError(t, err)
		var results []types.SaveResult
		for _, id := range []string{opA.ID, opB.ID} {
			op := e.wait(e.user, id)
			require.Equal(t, types.OpSucceeded, op.State, "%+v", op.Error)
			var res types.SaveResult
			require.NoError(t, json.Unmarshal(op.Result, &res))
			results = append(results, decision(res))
		}
		slices.SortFunc(results, func(x, y types.SaveResult) int { return x.Version - y.Version })
		assert.Equal(t, []types.SaveResult{
			{Project: "concurrent", Version: 2, Current: true, Expected: 1},
			{Project: "concurrent", Version: 3, Conflict: true, Expected: 1},
		}, results, "the first commit wins the compare-and-swap")
		assert.Equal(t, 2, e.current("concurrent"))
	})

	t.Run("expected_current named by the caller replaces the instance's own", func(t *testing.T) {
		e := e.with(t)
		e.project("named")
		in := e.instance("named", types.CreateInstanceRequest{})
		require.Equal(t, 2, e.saved(in.ID, types.SaveRequest{}).Version)
		// A rollback to the base: the instance's own expectation (2) is stale.
		_, err := e.svc.SetCurrent(e.ctx, e.user, "named", types.SetCurrentRequest{Version: 1, ExpectedCurrent: intp(2)})
		require.NoError(t, err)

		assert.Equal(t, types.SaveResult{Project: "named", Version: 3, Conflict: true, Expected: 2},
			decision(e.saved(in.ID, types.SaveRequest{})))
		assert.Equal(t, types.SaveResult{Project: "named", Version: 4, Current: true, Expected: 1},
			decision(e.saved(in.ID, types.SaveRequest{ExpectedCurrent: intp(1)})))
		assert.Equal(t, 4, e.current("named"))
	})

	t.Run("runtime mount points, injected files and excluded paths are not saved", func(t *testing.T) {
		e := e.with(t)
		_, err := e.svc.CreateProject(e.ctx, e.user, types.CreateProjectRequest{Name: "excl", Base: baseImage, Excludes: []string{"/home/dev/.cache"}}, "")
		require.NoError(t, err)
		in := e.instance("excl", types.CreateInstanceRequest{})
		for _, name := range []string{"tmp/scratch", "run/secrets/token", "proc/1/status", "dev/null-ish", "sys/x",
			"etc/resolv.conf", "etc/hosts", "etc/hostname", "home/dev/.cache/blob"} {
			e.write(in.ID, name, "node's, not the environment's")
		}
		e.write(in.ID, "etc/motd", "kept")
		require.Equal(t, 2, e.saved(in.ID, types.SaveRequest{}).Version)
		assert.Equal(t, map[string]string{"etc/": "", "etc/motd": "kept", "home/": "", "home/dev/": ""}, e.layerFiles("excl", 2))
	})
}

// What a save refuses before any operation exists.
func testSaveRefused(t *testing.T, e *coreEnv) {
	e = e.with(t)
	e.project("refused")
	running := e.instance("refused", types.CreateInstanceRequest{})
	paused := e.instance("refused", types.CreateInstanceRequest{})
	_, err := e.svc.Parts().Instances.PauseInstance(e.ctx, e.user, paused.ID)
	require.NoError(t, err)
	retained := e.instance("refused", types.CreateInstanceRequest{Retain: true})
	_, err = e.svc.Parts().Instances.StopInstance(e.ctx, e.user, retained.ID)
	require.NoError(t, err)
	restarted, err := e.svc.Parts().Instances.StartInstance(e.ctx, e.user, retained.ID)
	require.NoError(t, err)
	require.Equal(t, retained.Generation+1, restarted.Generation, "a start bumps the generation")
	_, err = e.svc.Parts().Tokens.CreateToken(e.ctx, e.admin, "other", types.CreateTokenRequest{})
	require.NoError(t, err)

	for _, c := range []struct {
		name string
		p    types.Principal
		id   string
		req  types.SaveRequest
		want error
	}{
		{"stale generation", e.user, retained.ID, types.SaveRequest{Generation: retained.Generation}, errdefs.ErrStaleGeneration},
		{"paused instance", e.user, paused.ID, types.SaveRequest{}, errdefs.ErrFailedPrecondition},
		{"negative expected current", e.user, running.ID, types.SaveRequest{ExpectedCurrent: intp(-1)}, errdefs.ErrInvalidArgument},
		{"message too long", e.user, running.ID, types.SaveRequest{Message: strings.Repeat("m", 4097)}, errdefs.ErrInvalidArgument},
		{"unknown instance", e.user, "refused-00000000", types.SaveRequest{}, errdefs.ErrNotFound},
		{"another tenant's instance", types.Principal{Tenant: "other"}, running.ID, types.SaveRequest{}, errdefs.ErrNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := e.with(t)
			_, err := e.svc.Save(e.ctx, c.p, c.id, c.req, "")
			assert.ErrorIs(t, err, c.want)
		})
	}
	t.Run("another node's instance", func(t *testing.T) {
		e := e.with(t)
		// A second node on the same database: the instance is not its own.
		cfg := e.cfg
		cfg.Node, cfg.WorkDir = "node-b", filepath.Join(t.TempDir(), "work")
		other, err := envd.New(cfg, e.store, e.reg, e.rt)
		require.NoError(t, err)
		defer other.Close()
		_, err = other.Save(e.ctx, e.user, running.ID, types.SaveRequest{}, "")
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		_, err = other.Parts().Instances.PauseInstance(e.ctx, e.user, running.ID)
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		assert.Equal(t, types.StateRunning, e.getInstance(running.ID).State)
	})
	t.Run("the newest generation is accepted", func(t *testing.T) {
		e := e.with(t)
		assert.Equal(t, 2, e.saved(retained.ID, types.SaveRequest{Generation: restarted.Generation}).Version)
	})
	assert.Equal(t, []string{"1:ready", "2:ready:current"}, e.versionsOf("refused"), "refused saves made no version")
}

// A save that fails leaves the project, the instance and the work dir as
// they were, and the instance's processes running.
func TestCoreSaveFailures(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)

	t.Run("the generation moved during the upload: refused at commit, its image deleted", func(t *testing.T) {
		e := e.with(t)
		e.project("fenced")
		in := e.instance("fenced", types.CreateInstanceRequest{})
		e.write(in.ID, "home/dev/f", "f")
		var pushed registry.Image
		e.reg.setAfterPush(func(img registry.Image) {
			pushed = img
			// Another start (or node) took the instance over meanwhile.
			_, err := e.store.Instances.BumpGeneration(context.Background(), in.ID)
			assert.NoError(t, err)
		})
		op := e.save(in.ID, types.SaveRequest{})
		e.reg.setAfterPush(nil)

		assert.ErrorIs(t, opErr(t, op), errdefs.ErrStaleGeneration)
		assert.Equal(t, []string{"1:ready:current"}, e.versionsOf("fenced"))
		assert.Zero(t, e.getInstance(in.ID).LastSavedVersion)
		require.NotEmpty(t, pushed.Digest)
		_, err := e.reg.Get(e.ctx, pushed.Ref())
		assert.ErrorIs(t, err, errdefs.ErrNotFound, "the manifest of a version never committed is dropped")
		assert.Equal(t, "running", e.task(in.ID))
	})

	var leftFrozen string
	for _, c := range []struct {
		name   string
		inject func(id string)
		code   string // the failed operation's error code
		task   string // the instance's task afterwards
	}{
		{"the push fails", func(string) {
			e.reg.failNextAppend(fmt.Errorf("registry is down: %w", errdefs.ErrUnavailable))
		}, "unavailable", "running"},
		{"the freeze fails", func(string) {
			e.rt.FailNext(fakeruntime.Pause, errors.New("cgroup freezer: device or resource busy"))
		}, "internal", "running"},
		{"the layer cannot be found", func(string) {
			e.rt.FailNext(fakeruntime.Mounts, fmt.Errorf("snapshot: %w", errdefs.ErrNotFound))
		}, "not_found", "running"},
		// A thaw that fails leaves the task frozen: the save fails, and the
		// next start of the service thaws it (below).
		{"the thaw fails", func(string) {
			e.rt.FailNext(fakeruntime.Resume, errors.New("cgroup freezer: thaw timed out"))
		}, "internal", "paused"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := e.with(t)
			project := "fail-" + strings.ReplaceAll(strings.TrimPrefix(c.name, "the "), " ", "-")
			e.project(project)
			in := e.instance(project, types.CreateInstanceRequest{})
			e.write(in.ID, "home/dev/f", "f")
			blobs := len(e.registryBlobs())
			c.inject(in.ID)
			op := e.save(in.ID, types.SaveRequest{})
			require.Equal(t, types.OpFailed, op.State)
			assert.Equal(t, c.code, op.Error.Code, op.Error.Message)
			assert.Equal(t, string(types.OpFailed), lastOf(e.eventTypes(e.user, op.ID)))
			assert.Equal(t, []string{"1:ready:current"}, e.versionsOf(project))
			got := e.getInstance(in.ID)
			assert.Equal(t, types.StateRunning, got.State)
			assert.Zero(t, got.LastSavedVersion)
			assert.Equal(t, c.task, e.task(in.ID))
			assert.Empty(t, e.workDirEntries(), "no spool is left behind")
			assert.Len(t, e.registryBlobs(), blobs, "nothing was uploaded")
			if c.task == "paused" {
				leftFrozen = in.ID
			}
		})
	}

	t.Run("a task left frozen by a failed thaw is thawed when the service starts", func(t *testing.T) {
		e := e.with(t)
		require.NotEmpty(t, leftFrozen)
		require.Equal(t, "paused", e.task(leftFrozen))
		e.restart()
		assert.Equal(t, "running", e.task(leftFrozen))
		assert.Equal(t, types.StateRunning, e.getInstance(leftFrozen).State)
	})

	t.Run("one save of an instance at a time", func(t *testing.T) {
		e := e.with(t)
		e.project("one")
		in := e.instance("one", types.CreateInstanceRequest{})
		entered, unblock := make(chan struct{}), make(chan struct{})
		e.rt.SetFault(fakeruntime.Pause, func(ctx context.Context, id string) error {
			close(entered)
			<-unblock
			return nil
		})
		first, err := e.svc.Save(e.ctx, e.user, in.ID, types.SaveRequest{}, "")
		require.NoError(t, err)
		<-entered
		_, err = e.svc.Save(e.ctx, e.user, in.ID, types.SaveRequest{}, "")
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		assert.Equal(t, first.ID, errdefs.Details(err)["operation"])
		e.rt.SetFault(fakeruntime.Pause, nil)
		close(unblock)
		assert.Equal(t, types.OpSucceeded, e.wait(e.user, first.ID).State)
		assert.Equal(t, 3, e.saved(in.ID, types.SaveRequest{}).Version, "the next save runs once the first ended")
	})
}

// decision is the part of a save's result that the save path decides (not
// its timings and sizes).
func decision(r types.SaveResult) types.SaveResult {
	return types.SaveResult{Project: r.Project, Version: r.Version, Current: r.Current, Conflict: r.Conflict, Expected: r.Expected}
}

func lastOf(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[len(s)-1]
}
