package envd_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/fakeruntime"
)

// forked asks for a fork of instance id and waits for its operation.
func (e *coreEnv) forked(id string, req types.ForkRequest) (types.Operation, types.ForkResult) {
	e.t.Helper()
	op, err := e.svc.Parts().Forks.Fork(e.ctx, e.user, id, req, "")
	require.NoError(e.t, err)
	require.Equal(e.t, types.OpKindFork, op.Kind)
	op = e.wait(e.user, op.ID)
	var res types.ForkResult
	if op.State == types.OpSucceeded {
		require.NoError(e.t, json.Unmarshal(op.Result, &res))
	}
	return op, res
}

// A fork into N starts N new instances from one version that does not
// become current, each an instance of its own; the first runs on.
func TestCoreForkIntoN(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	e.project("web")
	in := e.instance("web", types.CreateInstanceRequest{})
	e.write(in.ID, "home/dev/point", "P")

	op, res := e.forked(in.ID, types.ForkRequest{Count: 3, Message: "three ways"})
	require.Equal(t, types.OpSucceeded, op.State, "fork failed: %+v", op.Error)
	assert.Equal(t, 2, res.Version)
	assert.Zero(t, res.Checkpoint, "a fork without memory makes no checkpoint")
	assert.Equal(t, 1, e.current("web"), "a fork leaves current alone")
	assert.Equal(t, "P", e.layerFiles("web", 2)["home/dev/point"])
	require.Len(t, res.Instances, 3)
	assert.Equal(t, res.Instances[0], res.Instance)
	ids := map[string]bool{in.ID: true}
	for _, c := range res.Instances {
		assert.False(t, ids[c.ID], "every copy has an id of its own: %s", c.ID)
		ids[c.ID] = true
		assert.Equal(t, types.StateRunning, c.State)
		assert.Equal(t, 2, c.Version)
		assert.Equal(t, int64(1), c.Generation, "a copy is a new instance with its own generation")
		assert.Equal(t, "running", e.task(c.ID))
	}
	assert.Equal(t, types.StateRunning, e.getInstance(in.ID).State, "the forked instance runs on")
	started := 0
	for _, ev := range e.eventTypes(e.user, op.ID) {
		if ev == "started" {
			started++
		}
	}
	assert.Equal(t, 3, started, "one started event per copy")
	cs, err := e.svc.Parts().Checkpoints.ListCheckpoints(e.ctx, e.user, "web")
	require.NoError(t, err)
	assert.Empty(t, cs, "a fork without memory records no checkpoint")
}

// Refused before an operation exists: a count out of range, a memory fork
// this node cannot take (its runtime has no memory engine: reason class),
// a memory fork of an instance that is not Running (reason state), more
// instances than the quota holds, all counted. Nothing is made.
func TestCoreForkRefusals(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	e.project("web")
	in := e.instance("web", types.CreateInstanceRequest{Retain: true})
	before := e.versionsOf("web")

	for _, c := range []struct {
		name   string
		req    types.ForkRequest
		kind   error
		reason string
	}{
		{"count above the maximum", types.ForkRequest{Count: types.MaxForkCount + 1}, errdefs.ErrInvalidArgument, ""},
		{"negative count", types.ForkRequest{Count: -1}, errdefs.ErrInvalidArgument, ""},
		{"memory on a node without an engine", types.ForkRequest{Memory: true, Count: 4}, errdefs.ErrMemoryUnsupported, "class"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.svc.Parts().Forks.Fork(e.ctx, e.user, in.ID, c.req, "")
			require.ErrorIs(t, err, c.kind)
			if c.reason != "" {
				assert.Equal(t, c.reason, errdefs.Details(err)["reason"])
			}
		})
	}

	t.Run("quota for all copies", func(t *testing.T) {
		_, err := e.svc.SetQuota(e.ctx, e.admin, testTenant, types.Quota{MaxInstances: 3})
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = e.svc.SetQuota(e.ctx, e.admin, testTenant, types.Quota{}) })
		_, err = e.svc.Parts().Forks.Fork(e.ctx, e.user, in.ID, types.ForkRequest{Count: 3}, "")
		require.ErrorIs(t, err, errdefs.ErrQuotaExceeded, "1 running + 3 > 3")
		d := errdefs.Details(err)
		assert.Equal(t, "instances", d["quota"])
		assert.EqualValues(t, 3, d["requested"])
		assert.EqualValues(t, 1, d["used"])
	})

	_, err := e.svc.Parts().Instances.StopInstance(e.ctx, e.user, in.ID)
	require.NoError(t, err)
	_, err = e.svc.Parts().Forks.Fork(e.ctx, e.user, in.ID, types.ForkRequest{Memory: true}, "")
	require.ErrorIs(t, err, errdefs.ErrMemoryUnsupported, "a stopped instance has no processes to fork")
	assert.Equal(t, "state", errdefs.Details(err)["reason"])
	_, err = e.svc.Parts().Forks.Fork(e.ctx, e.user, in.ID, types.ForkRequest{}, "")
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	assert.NotErrorIs(t, err, errdefs.ErrMemoryUnsupported, "a disk fork of a stopped instance is a plain precondition")

	assert.Equal(t, before, e.versionsOf("web"), "no version made")
	assert.Equal(t, []string{in.ID}, listIDs(t, e, "web"), "no instance made")
}

// All or none: when one copy fails to start, the others are removed
// (fork_failed), the failed one is Failed, and the operation fails naming
// the version to start from.
func TestCoreForkAllOrNone(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	e.project("web")
	in := e.instance("web", types.CreateInstanceRequest{})
	e.rt.FailNext(fakeruntime.Create, errors.New("runc: exec format error"))

	op, _ := e.forked(in.ID, types.ForkRequest{Count: 3})
	require.Equal(t, types.OpFailed, op.State)
	require.NotNil(t, op.Error)
	assert.Contains(t, op.Error.Message, "up --version 2")
	ins, err := e.svc.Parts().Instances.ListInstances(e.ctx, e.user, "web")
	require.NoError(t, err)
	reasons := map[string]int{}
	for _, c := range ins {
		if c.ID == in.ID {
			assert.Equal(t, types.StateRunning, c.State, "the forked instance runs on")
			continue
		}
		reasons[string(c.State)+" "+c.Reason]++
	}
	assert.Equal(t, map[string]int{"Failed provision_failed": 1, "Terminated fork_failed": 2}, reasons)
	_, err = e.svc.GetVersion(e.ctx, e.user, "web", 2)
	assert.NoError(t, err, "the fork point stays listed")
}
