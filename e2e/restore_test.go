package e2e

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Starting an instance with Prefer: respond-async is a restore operation:
// its target is the new instance, its result the instance running the
// version asked for; a retry with the same key is the same operation, and
// what cannot start is refused before any operation exists.
func TestRootRestoreOperation(t *testing.T) {
	t.Parallel()
	p := newProject(t, "restore")
	a := up(t, p, 0)
	mustSh(t, a.ID, "echo saved > /marker")
	_, saved := save(t, a.ID, "marker")

	c := ctx(t)
	req := types.CreateInstanceRequest{Version: saved.Version}
	op, err := env.c.Restore(c, p, req, client.WithIdempotencyKey("restore-key"))
	require.NoError(t, err)
	assert.Equal(t, types.OpKindRestore, op.Kind)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(c, op.Target) })

	again, err := env.c.Restore(c, p, req, client.WithIdempotencyKey("restore-key"))
	require.NoError(t, err)
	assert.Equal(t, op.ID, again.ID, "the same key and request: the same operation")
	_, err = env.c.Restore(c, p, types.CreateInstanceRequest{Version: 1}, client.WithIdempotencyKey("restore-key"))
	assert.ErrorIs(t, err, errdefs.ErrIdempotencyReuse)

	done, err := env.c.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	require.Equalf(t, types.OpSucceeded, done.State, "%+v", done.Error)
	var in types.Instance
	require.NoError(t, json.Unmarshal(done.Result, &in))
	assert.Equal(t, op.Target, in.ID)
	assert.Equal(t, types.StateRunning, in.State)
	assert.Equal(t, saved.Version, in.Version)
	assert.Equal(t, "saved", mustSh(t, in.ID, "cat /marker"))

	_, err = env.c.Restore(c, p, types.CreateInstanceRequest{Version: 99})
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "an unknown version is refused at once")
	_, err = env.c.Restore(c, p, types.CreateInstanceRequest{TTL: "soon"})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	list, err := env.c.ListInstances(c, p)
	require.NoError(t, err)
	assert.Len(t, list, 2, "refusals made no instance")
}

// A restore that envd's restart interrupts does not stay running: it is
// settled (failed, code interrupted) with its instance Failed, or it
// finished before the restart with its instance Running.
func TestRootRestoreInterruptedByRestart(t *testing.T) {
	p := newProject(t, "restorerestart")
	op, err := env.c.Restore(ctx(t), p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(ctx(t), op.Target) })
	restartNode(t)

	done, err := env.c.WaitOperation(ctx(t), op.ID, nil)
	require.NoError(t, err)
	in, err := env.c.GetInstance(ctx(t), op.Target)
	switch done.State {
	case types.OpSucceeded:
		require.NoError(t, err)
		assert.Equal(t, types.StateRunning, in.State)
	case types.OpFailed:
		require.NotNil(t, done.Error)
		assert.Equal(t, "interrupted", done.Error.Code, done.Error.Message)
		if err == nil { // recorded before the restart: not left Pending
			assert.Equal(t, types.StateFailed, in.State)
			assert.Equal(t, types.ReasonProvisionFailed, in.Reason)
		} else {
			assert.ErrorIs(t, err, errdefs.ErrNotFound)
		}
	default:
		t.Fatalf("operation %s after the restart: %+v", done.State, done)
	}
	t.Logf("restore %s: %s", done.State, in.State)
}

// A restore whose instance got to Running but whose operation's end was
// never recorded (envd killed right then) is settled as succeeded at the
// next start, and its instance is left running: never removed.
func TestRootRestoreSettledAfterItsInstanceRan(t *testing.T) {
	c := ctx(t)
	p := newProject(t, "restoreran")
	in := up(t, p, 0)
	mustSh(t, in.ID, "echo unsaved > /work")

	store, err := versions.Open(c, env.node.DSN())
	require.NoError(t, err)
	defer store.Close()
	row, err := store.Instances.GetInstance(c, "", in.ID)
	require.NoError(t, err)
	job, err := json.Marshal(map[string]any{"instance_id": in.ID, "project": p})
	require.NoError(t, err)
	opID := fmt.Sprintf("op-lost%d", projectSeq.Add(1))
	_, _, err = store.Operations.CreateOperation(c, versions.Operation{ID: opID, Tenant: row.Tenant, Kind: "restore", Target: in.ID,
		State: types.OpRunning, Node: env.node.Name(), Request: job})
	require.NoError(t, err)

	restartNode(t)
	done, err := env.c.WaitOperation(c, opID, nil)
	require.NoError(t, err)
	assert.Equal(t, types.OpSucceeded, done.State, "%+v", done.Error)
	got, err := env.c.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, got.State)
	assert.Equal(t, "unsaved", mustSh(t, in.ID, "cat /work"), "the instance and its changes are untouched")
}
