package envd_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/fakeruntime"
)

// blockUntilCanceled makes the runtime's next calls of m wait until their
// context ends (a freeze or pull that hangs); entered is closed at the
// first call.
func blockUntilCanceled(rt *fakeruntime.Runtime, m fakeruntime.Method) (entered <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	rt.SetFault(m, func(ctx context.Context, id string) error {
		once.Do(func() { close(ch) })
		<-ctx.Done()
		return ctx.Err()
	})
	return ch
}

// Operations: idempotency keys, and how operations settle.
func TestCoreOperations(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	t.Run("idempotency", func(t *testing.T) { testIdempotency(t, e) })
	t.Run("settle", func(t *testing.T) { testOperationsSettle(t, e) })
}

// Idempotency keys: a retry gets what the first request made; another
// request under the same key is refused.
func testIdempotency(t *testing.T, e *coreEnv) {
	e = e.with(t)

	t.Run("project", func(t *testing.T) {
		e := e.with(t)
		req := types.CreateProjectRequest{Name: "idem", Base: baseImage}
		first, err := e.svc.CreateProject(e.ctx, e.user, req, "key-project")
		require.NoError(t, err)
		again, err := e.svc.CreateProject(e.ctx, e.user, req, "key-project")
		require.NoError(t, err, "a retry is not 'already exists'")
		assert.Equal(t, first.Name, again.Name)
		_, err = e.svc.CreateProject(e.ctx, e.user, types.CreateProjectRequest{Name: "idem2", Base: baseImage}, "key-project")
		assert.ErrorIs(t, err, errdefs.ErrIdempotencyReuse)
		_, err = e.svc.GetProject(e.ctx, e.user, "idem2")
		assert.ErrorIs(t, err, errdefs.ErrNotFound)
	})

	t.Run("instance", func(t *testing.T) {
		e := e.with(t)
		req := types.CreateInstanceRequest{TTL: "1h"}
		first, err := e.svc.Parts().Instances.CreateInstance(e.ctx, e.user, "idem", req, "key-instance")
		require.NoError(t, err)
		again, err := e.svc.Parts().Instances.CreateInstance(e.ctx, e.user, "idem", req, "key-instance")
		require.NoError(t, err)
		assert.Equal(t, first.ID, again.ID)
		ins, err := e.svc.Parts().Instances.ListInstances(e.ctx, e.user, "idem")
		require.NoError(t, err)
		assert.Len(t, ins, 1, "one instance made")
		_, err = e.svc.Parts().Instances.CreateInstance(e.ctx, e.user, "idem", types.CreateInstanceRequest{TTL: "2h"}, "key-instance")
		assert.ErrorIs(t, err, errdefs.ErrIdempotencyReuse)
	})

	t.Run("save", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("idem", types.CreateInstanceRequest{})
		req := types.SaveRequest{Message: "once"}
		first, err := e.svc.Save(e.ctx, e.user, in.ID, req, "key-save")
		require.NoError(t, err)
		again, err := e.svc.Save(e.ctx, e.user, in.ID, req, "key-save")
		require.NoError(t, err, "a retry while the save runs is not 'one save at a time'")
		assert.Equal(t, first.ID, again.ID)
		done := e.wait(e.user, first.ID)
		require.Equal(t, types.OpSucceeded, done.State)
		after, err := e.svc.Save(e.ctx, e.user, in.ID, req, "key-save")
		require.NoError(t, err)
		assert.Equal(t, first.ID, after.ID)
		assert.Equal(t, types.OpSucceeded, after.State, "a retry after the end gets the finished operation")
		assert.JSONEq(t, string(done.Result), string(after.Result))
		assert.Equal(t, []string{"1:ready", "2:ready:current"}, e.versionsOf("idem"), "one version made")

		for name, call := range map[string]func() error{
			"another message": func() error {
				_, err := e.svc.Save(e.ctx, e.user, in.ID, types.SaveRequest{Message: "twice"}, "key-save")
				return err
			},
			"another kind": func() error {
				_, err := e.svc.Parts().Instances.Restore(e.ctx, e.user, "idem", types.CreateInstanceRequest{}, "key-save")
				return err
			},
		} {
			assert.ErrorIs(t, call(), errdefs.ErrIdempotencyReuse, name)
		}
		_, err = e.svc.Save(e.ctx, e.user, in.ID, req, string(make([]byte, 300)))
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "a key longer than 255 bytes")
	})
}

// Operations run in the background and settle: succeeded with a result,
// failed with a code, canceled when asked; their events are ordered, the
// last one names the end; another tenant does not see them.
func testOperationsSettle(t *testing.T, e *coreEnv) {
	e = e.with(t)
	e.project("web")
	_, err := e.svc.Parts().Tokens.CreateToken(e.ctx, e.admin, "other", types.CreateTokenRequest{})
	require.NoError(t, err)

	t.Run("restore succeeds with the running instance as its result", func(t *testing.T) {
		e := e.with(t)
		op, err := e.svc.Parts().Instances.Restore(e.ctx, e.user, "web", types.CreateInstanceRequest{Version: 1}, "")
		require.NoError(t, err)
		assert.Equal(t, types.OpKindRestore, op.Kind)
		op = e.wait(e.user, op.ID)
		require.Equal(t, types.OpSucceeded, op.State)
		var in types.Instance
		require.NoError(t, json.Unmarshal(op.Result, &in))
		assert.Equal(t, op.Target, in.ID)
		assert.Equal(t, types.StateRunning, in.State)
		assert.Equal(t, 1, in.Version)
		assert.Equal(t, []string{"started", "running", string(types.OpSucceeded)}, e.eventTypes(e.user, op.ID))

		_, err = e.svc.Parts().Operations.GetOperation(e.ctx, types.Principal{Tenant: "other"}, op.ID)
		assert.ErrorIs(t, err, errdefs.ErrNotFound, "another tenant's operation")
		_, err = e.svc.Parts().Operations.OperationEvents(e.ctx, types.Principal{Tenant: "other"}, op.ID, 0)
		assert.ErrorIs(t, err, errdefs.ErrNotFound)
		tail, err := e.svc.Parts().Operations.OperationEvents(e.ctx, e.user, op.ID, 2)
		require.NoError(t, err)
		require.Len(t, tail, 1, "events after a cursor")
		assert.Equal(t, 3, tail[0].Seq)
	})

	t.Run("restore of a version that cannot start is refused before any operation", func(t *testing.T) {
		e := e.with(t)
		_, err := e.svc.Parts().Instances.Restore(e.ctx, e.user, "web", types.CreateInstanceRequest{Version: 9}, "")
		assert.ErrorIs(t, err, errdefs.ErrNotFound)
	})

	t.Run("restore whose pull fails fails, its instance Failed", func(t *testing.T) {
		e := e.with(t)
		e.rt.FailNext(fakeruntime.Pull, errdefs.ErrUnavailable)
		op, err := e.svc.Parts().Instances.Restore(e.ctx, e.user, "web", types.CreateInstanceRequest{}, "")
		require.NoError(t, err)
		op = e.wait(e.user, op.ID)
		assert.ErrorIs(t, opErr(t, op), errdefs.ErrUnavailable)
		assert.Equal(t, []string{"started", string(types.OpFailed)}, e.eventTypes(e.user, op.ID))
		in := e.getInstance(op.Target)
		assert.Equal(t, types.StateFailed, in.State)
		assert.Equal(t, types.ReasonProvisionFailed, in.Reason)
	})

	t.Run("a canceled save ends canceled and changes nothing", func(t *testing.T) {
		e := e.with(t)
		in := e.instance("web", types.CreateInstanceRequest{})
		entered := blockUntilCanceled(e.rt, fakeruntime.Pause)
		defer e.rt.SetFault(fakeruntime.Pause, nil)
		op, err := e.svc.Save(e.ctx, e.user, in.ID, types.SaveRequest{}, "")
		require.NoError(t, err)
		<-entered
		_, err = e.svc.Parts().Operations.CancelOperation(e.ctx, e.user, op.ID)
		require.NoError(t, err)
		op = e.wait(e.user, op.ID)
		assert.Equal(t, types.OpCanceled, op.State)
		assert.Equal(t, string(types.OpCanceled), lastOf(e.eventTypes(e.user, op.ID)))
		assert.Equal(t, []string{"1:ready:current"}, e.versionsOf("web"))
		assert.Equal(t, "running", e.task(in.ID))
		_, err = e.svc.Parts().Operations.CancelOperation(e.ctx, types.Principal{Tenant: "other"}, op.ID)
		assert.ErrorIs(t, err, errdefs.ErrNotFound)
	})
}

// Operations outlive the process that ran them: at start, an unfinished
// save runs again, an unfinished restore is settled (never run twice).
func TestCoreOperationsAfterRestart(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	e.project("web")
	in := e.instance("web", types.CreateInstanceRequest{})
	e.write(in.ID, "home/dev/f", "f")

	savePaused := blockUntilCanceled(e.rt, fakeruntime.Pause)
	save, err := e.svc.Save(e.ctx, e.user, in.ID, types.SaveRequest{Message: "across a restart"}, "key-restart")
	require.NoError(t, err)
	<-savePaused
	pullHangs := blockUntilCanceled(e.rt, fakeruntime.Pull)
	restore, err := e.svc.Parts().Instances.Restore(e.ctx, e.user, "web", types.CreateInstanceRequest{}, "")
	require.NoError(t, err)
	<-pullHangs

	e.rt.SetFault(fakeruntime.Pause, nil)
	e.rt.SetFault(fakeruntime.Pull, nil)
	e.restart()

	t.Run("the save runs again and commits", func(t *testing.T) {
		e := e.with(t)
		op := e.wait(e.user, save.ID)
		require.Equal(t, types.OpSucceeded, op.State, "%+v", op.Error)
		var res types.SaveResult
		require.NoError(t, json.Unmarshal(op.Result, &res))
		assert.Equal(t, types.SaveResult{Project: "web", Version: 2, Current: true, Expected: 1}, decision(res))
		assert.Equal(t, append([]string{"resumed"}, savedEvents...), e.eventTypes(e.user, save.ID))
		v, err := e.svc.GetVersion(e.ctx, e.user, "web", 2)
		require.NoError(t, err)
		assert.Equal(t, "across a restart", v.Message)
		again, err := e.svc.Save(e.ctx, e.user, in.ID, types.SaveRequest{Message: "across a restart"}, "key-restart")
		require.NoError(t, err)
		assert.Equal(t, save.ID, again.ID, "the key still names it")
	})

	t.Run("the restore is settled as interrupted, its instance Failed", func(t *testing.T) {
		e := e.with(t)
		op := e.wait(e.user, restore.ID)
		require.Equal(t, types.OpFailed, op.State)
		assert.Equal(t, "interrupted", op.Error.Code)
		got := e.getInstance(restore.Target)
		assert.Equal(t, types.StateFailed, got.State)
		assert.Equal(t, types.ReasonProvisionFailed, got.Reason)
		_, ok := e.rt.Spec(restore.Target)
		assert.False(t, ok, "no container was made for it")
	})
	assert.Empty(t, e.workDirEntries())
}
