package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd/node"
)

// restartNode stops the API process's part of the node and starts it again
// on the same data dir; containerd and PostgreSQL keep running, as they do
// when envd itself restarts.
func restartNode(t *testing.T) {
	t.Helper()
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env.node.Close(cctx)
	n, err := node.Start(cctx, sharedNodeConfig())
	require.NoError(t, err)
	env.node = n
	env.c, err = client.New(n.URL, n.Token)
	require.NoError(t, err)
}

// Restarting envd keeps projects, versions and running instances, and a
// save interrupted by the restart is run again to completion.
func TestRootRestartKeepsEverything(t *testing.T) {
	p := newProject(t, "restart")
	a := up(t, p, 0)
	mustSh(t, a.ID, "dd if=/dev/urandom of=/blob bs=1M count=40 2>/dev/null && echo kept > /marker")
	op, err := env.c.Save(ctx(t), a.ID, types.SaveRequest{Message: "interrupted"}, "restart-key")
	require.NoError(t, err)
	restartNode(t)

	in, err := env.c.GetInstance(ctx(t), a.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, in.State)
	// The node listens for the running instances' agents at its start,
	// and an agent redials at least every 2 s: the first command after
	// the restart runs under the agent the init started before it, with
	// no runc exec (its parent would be outside the instance).
	time.Sleep(3 * time.Second)
	par := sh(t, a.ID, `tr '\0' ' ' < /proc/$PPID/cmdline 2>/dev/null; echo; cut -d' ' -f4 /proc/$PPID/stat 2>/dev/null; true`)
	assert.Equal(t, "/dev/.envd-agent /dev/.envd/agent.sock \n1\n", par.Stdout, "the first command after the restart ran under the init's agent")
	assert.Equal(t, "kept", mustSh(t, a.ID, "cat /marker"), "the instance kept running through the restart")

	done, err := env.c.WaitOperation(ctx(t), op.ID, nil)
	require.NoError(t, err)
	require.Equalf(t, types.OpSucceeded, done.State, "error: %+v", done.Error)
	var res types.SaveResult
	require.NoError(t, json.Unmarshal(done.Result, &res))
	assert.True(t, res.Current)

	// The same idempotency key returns the same operation, not a new save.
	again, err := env.c.Save(ctx(t), a.ID, types.SaveRequest{Message: "interrupted"}, "restart-key")
	require.NoError(t, err)
	assert.Equal(t, op.ID, again.ID)

	vs, err := env.c.ListVersions(ctx(t), p)
	require.NoError(t, err)
	assert.Len(t, vs, 2, "one save, one new version, even though it ran twice")

	b := up(t, p, 0)
	assert.Equal(t, "kept", mustSh(t, b.ID, "cat /marker"))
}

// A process that dies inside a save's freeze window leaves the instance
// frozen; the next start of envd thaws it.
func TestRootRestartThawsInstanceFrozenByACrash(t *testing.T) {
	p := newProject(t, "frozen")
	a := up(t, p, 0)
	require.NoError(t, env.node.Runtime().Pause(ctx(t), a.ID)) // as a save's freeze would
	restartNode(t)
	st, err := env.node.Runtime().Status(ctx(t), a.ID)
	require.NoError(t, err)
	assert.Equal(t, "running", st.Task)
	assert.Equal(t, "ok", mustSh(t, a.ID, "echo ok"))
}

// Cancelling a running save is a request: the operation reports canceled
// once it stopped, no version appears and the instance is not left frozen.
func TestRootCancelSave(t *testing.T) {
	t.Parallel()
	p := newProject(t, "cancel")
	a := up(t, p, 0)
	mustSh(t, a.ID, "dd if=/dev/urandom of=/blob bs=1M count=300 2>/dev/null")
	op, err := env.c.Save(ctx(t), a.ID, types.SaveRequest{Message: "to cancel"}, "")
	require.NoError(t, err)
	asked, err := env.c.CancelOperation(ctx(t), op.ID)
	require.NoError(t, err)
	assert.Contains(t, []types.OpState{types.OpPending, types.OpRunning}, asked.State, "cancel answers the operation as it is now")
	done, err := env.c.WaitOperation(ctx(t), op.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, types.OpCanceled, done.State)
	vs, err := env.c.ListVersions(ctx(t), p)
	require.NoError(t, err)
	assert.Len(t, vs, 1)
	assert.Equal(t, "ok", mustSh(t, a.ID, "echo ok"))
}
