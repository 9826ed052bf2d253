package envd_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// checkpointed takes a checkpoint of instance id and returns its result.
func (e *coreEnv) checkpointed(id string, req types.CheckpointRequest) types.CheckpointResult {
	e.t.Helper()
	op, err := e.svc.Parts().Checkpoints.Checkpoint(e.ctx, e.user, id, req, "")
	require.NoError(e.t, err)
	require.Equal(e.t, types.OpKindCheckpoint, op.Kind)
	op = e.wait(e.user, op.ID)
	require.Equal(e.t, types.OpSucceeded, op.State, "checkpoint failed: %+v", op.Error)
	evs := e.eventTypes(e.user, op.ID)
	assert.Subset(e.t, evs, []string{"spooled", "encoded", "pushed", "committed"})
	var res types.CheckpointResult
	require.NoError(e.t, json.Unmarshal(op.Result, &res))
	return res
}

// A checkpoint is a version that leaves current alone (unless asked),
// recorded with a per-project id; an instance starts from it; it is
// listed, shown and deleted as one unit.
func TestCoreCheckpoint(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	e.project("web")
	in := e.instance("web", types.CreateInstanceRequest{})
	e.write(in.ID, "home/dev/a", "A")

	res := e.checkpointed(in.ID, types.CheckpointRequest{Message: "before the upgrade"})
	assert.Equal(t, 1, res.Checkpoint.ID)
	assert.Equal(t, 2, res.Checkpoint.Version)
	assert.False(t, res.Current)
	assert.Equal(t, 1, e.current("web"), "a checkpoint leaves current alone")
	assert.Equal(t, in.ID, res.Checkpoint.Instance)
	assert.Equal(t, "before the upgrade", res.Checkpoint.Message)
	assert.Empty(t, res.Checkpoint.Volumes, "the project has no volumes")
	assert.Positive(t, res.Checkpoint.VersionBytes)
	assert.Equal(t, res.Checkpoint.VersionBytes, res.Checkpoint.Bytes)
	assert.Equal(t, "A", e.layerFiles("web", 2)["home/dev/a"])

	// Later writes are saved as the instance's own version, current.
	e.write(in.ID, "home/dev/a", "A2")
	require.Equal(t, 3, e.saved(in.ID, types.SaveRequest{}).Version, "the checkpoint was not the instance's own save")
	assert.Equal(t, 3, e.current("web"))

	from := e.instance("web", types.CreateInstanceRequest{Checkpoint: 1})
	assert.Equal(t, 2, from.Version, "an instance from a checkpoint runs its version")

	for _, c := range []struct {
		name string
		req  types.CreateInstanceRequest
		kind error
	}{
		{"a checkpoint and a version", types.CreateInstanceRequest{Checkpoint: 1, Version: 2}, errdefs.ErrInvalidArgument},
		{"a negative checkpoint", types.CreateInstanceRequest{Checkpoint: -1}, errdefs.ErrInvalidArgument},
		{"no such checkpoint", types.CreateInstanceRequest{Checkpoint: 9}, errdefs.ErrNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := e.svc.Parts().Instances.CreateInstance(e.ctx, e.user, "web", c.req, "")
			assert.ErrorIs(t, err, c.kind)
		})
	}

	// set_current: the version becomes current by compare-and-swap.
	e.write(in.ID, "home/dev/b", "B")
	res2 := e.checkpointed(in.ID, types.CheckpointRequest{SetCurrent: true})
	assert.Equal(t, 2, res2.Checkpoint.ID)
	assert.True(t, res2.Current)
	assert.Equal(t, res2.Checkpoint.Version, e.current("web"))

	list, err := e.svc.Parts().Checkpoints.ListCheckpoints(e.ctx, e.user, "web")
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, []int{2, 1}, []int{list[0].ID, list[1].ID}, "newest first")
	got, err := e.svc.Parts().Checkpoints.GetCheckpoint(e.ctx, e.user, "web", 1)
	require.NoError(t, err)
	assert.Equal(t, 2, got.Version)
	_, err = e.svc.Parts().Checkpoints.GetCheckpoint(e.ctx, e.user, "web", 7)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	other, err := e.svc.Parts().Tokens.CreateToken(e.ctx, e.admin, "other", types.CreateTokenRequest{})
	require.NoError(t, err)
	op, err := e.svc.Parts().Tokens.Authenticate(e.ctx, other.Token)
	require.NoError(t, err)
	_, err = e.svc.Parts().Checkpoints.GetCheckpoint(e.ctx, op, "web", 1)
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "another tenant's checkpoint is not found")

	// A checkpoint and a save of one instance exclude each other: a
	// checkpoint of an instance that is not Running is refused at once.
	_, err = e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, in.ID)
	require.NoError(t, err)
	_, err = e.svc.Parts().Checkpoints.Checkpoint(e.ctx, e.user, in.ID, types.CheckpointRequest{}, "")
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)

	// Deleting checkpoint 1 deletes its version (nothing else keeps it
	// once its instance is gone); deleting 2 keeps its version: current.
	_, err = e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, from.ID)
	require.NoError(t, err)
	_, err = e.svc.Parts().Checkpoints.DeleteCheckpoint(e.ctx, e.user, "web", 1)
	require.NoError(t, err)
	_, err = e.svc.GetVersion(e.ctx, e.user, "web", 2)
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "the checkpoint's version went with it")
	_, err = e.svc.Parts().Checkpoints.DeleteCheckpoint(e.ctx, e.user, "web", 2)
	require.NoError(t, err)
	_, err = e.svc.GetVersion(e.ctx, e.user, "web", res2.Checkpoint.Version)
	assert.NoError(t, err, "a current version stays when its checkpoint goes")
	_, err = e.svc.Parts().Checkpoints.DeleteCheckpoint(e.ctx, e.user, "web", 2)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

// Retention counts checkpoints as units of their own: a checkpoint's
// version is never collected while the checkpoint is kept, nor counted
// among the newest versions; a checkpoint the policy does not keep is
// deleted by a GC with its version.
func TestCoreCheckpointRetention(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	e.project("web")
	in := e.instance("web", types.CreateInstanceRequest{})
	var cps []types.CheckpointResult
	for i := range 3 { // saves 2, 4, 6 (current: 6); checkpoints of versions 3, 5, 7
		e.write(in.ID, "home/dev/n", itoa(i))
		e.saved(in.ID, types.SaveRequest{})
		cps = append(cps, e.checkpointed(in.ID, types.CheckpointRequest{}))
	}
	require.Equal(t, []int{3, 5, 7}, []int{cps[0].Checkpoint.Version, cps[1].Checkpoint.Version, cps[2].Checkpoint.Version})
	_, err := e.svc.Parts().Instances.DeleteInstance(e.ctx, e.user, in.ID)
	require.NoError(t, err)
	_, err = e.svc.SetRetention(e.ctx, e.user, "web", types.Retention{KeepLast: 1})
	require.NoError(t, err)

	gc := func(t *testing.T, dryRun bool) types.GCResult {
		t.Helper()
		op, err := e.svc.GC(e.ctx, e.admin, types.GCRequest{DryRun: dryRun}, "")
		require.NoError(t, err)
		op = e.with(t).wait(e.admin, op.ID)
		require.Equal(t, types.OpSucceeded, op.State, "%+v", op.Error)
		var res types.GCResult
		require.NoError(t, json.Unmarshal(op.Result, &res))
		return res
	}
	dry := gc(t, true)
	var expired []int
	for _, c := range dry.Checkpoints {
		expired = append(expired, c.ID)
	}
	assert.Equal(t, []int{1, 2}, expired, "keep last 1 keeps the newest checkpoint")
	list, err := e.svc.Parts().Checkpoints.ListCheckpoints(e.ctx, e.user, "web")
	require.NoError(t, err)
	assert.Len(t, list, 3, "a dry run deletes nothing")

	res := gc(t, false)
	var collected []int
	for _, v := range res.Versions {
		collected = append(collected, v.Version)
	}
	// Versions 2 and 4 are ordinary versions beyond keep-last 1 (of the
	// ordinary ones, 6 is newest and current); 3 and 5 went with their
	// checkpoints; 7, the kept checkpoint's, stays although it is the
	// newest version: it is not counted among the ordinary ones.
	assert.ElementsMatch(t, []int{2, 3, 4, 5}, collected)
	assert.Equal(t, []string{"1:ready", "6:ready:current", "7:ready"}, e.versionsOf("web"))
	list, err = e.svc.Parts().Checkpoints.ListCheckpoints(e.ctx, e.user, "web")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, 3, list[0].ID)

	// The kept checkpoint still starts an instance.
	from := e.instance("web", types.CreateInstanceRequest{Checkpoint: 3})
	assert.Equal(t, 7, from.Version)

	// Usage counts a checkpoint's version with the others.
	u, err := e.svc.Usage(e.ctx, e.user, "")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, u.VersionBytes, list[0].VersionBytes)
	assert.Equal(t, int64(0), u.CheckpointBytes, "no volumes, no archives")
}
