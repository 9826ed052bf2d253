package versions_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// A checkpoint is recorded with its version in one commit, its archives
// count in the tenant's stored bytes and quota, they are not user archives
// (not listed, not deletable by name), and deleting the checkpoint hands
// its archives to the orphan cleanup and marks its version deleting.
func TestCheckpointRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)

	commit := func(t *testing.T, rec *versions.CheckpointRecord, layer int64) (versions.Version, error) {
		t.Helper()
		v, _, err := s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 1, Image: "reg/p@sha256:" + time.Now().Format("150405.000000000"),
			Parent: 1, LayerBytes: layer, NoSwitch: true, Checkpoint: rec})
		return v, err
	}
	v, err := commit(t, &versions.CheckpointRecord{Message: "before", Node: "n1", FreezeMS: 7, Archives: []versions.Archive{
		{Volume: "work", Key: "checkpoints/acme/p/work/1.tar.zst", SizeBytes: 100, Files: 3},
		{Volume: "home", Key: "checkpoints/acme/p/home/1.tar.zst", SizeBytes: 50, Files: 1},
	}}, 1000)
	require.NoError(t, err)
	assert.False(t, v.Current, "a checkpoint's version is not current unless asked")

	cs, err := s.Versions.ListCheckpoints(ctx, tenant, "p")
	require.NoError(t, err)
	require.Len(t, cs, 1)
	c := cs[0]
	assert.Equal(t, 1, c.Number)
	assert.Equal(t, v.Number, c.Version)
	assert.Equal(t, "before", c.Message)
	assert.Equal(t, int64(7), c.FreezeMS)
	require.Len(t, c.Archives, 2)
	assert.Equal(t, "home", c.Archives[0].Volume)
	assert.Equal(t, versions.CheckpointArchiveName(1), c.Archives[0].Name)
	assert.Equal(t, int64(1150), c.Bytes(), "the version's layer and both archives")

	u, err := s.Tenants.Usage(ctx, tenant)
	require.NoError(t, err)
	assert.Equal(t, int64(150), u.CheckpointBytes)

	as, err := s.Volumes.ListArchives(ctx, tenant, "p", "")
	require.NoError(t, err)
	assert.Empty(t, as, "a checkpoint's archives are not user archives")
	_, err = s.Volumes.DeleteArchive(ctx, tenant, "p", "work", versions.CheckpointArchiveName(1))
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "nor deleted apart from their checkpoint")
	a, err := s.Volumes.GetArchiveByKey(ctx, tenant, "p", "checkpoints/acme/p/work/1.tar.zst")
	require.NoError(t, err, "restorable by key")
	assert.Equal(t, "work", a.Volume)

	// The quota counts the archives already kept and those a commit adds.
	_, err = s.Tenants.SetQuota(ctx, tenant, versions.Quota{MaxStoredBytes: 1000 + 150 + 10 + 20})
	require.NoError(t, err)
	_, err = commit(t, &versions.CheckpointRecord{Archives: []versions.Archive{{Volume: "work", Key: "checkpoints/acme/p/work/2.tar.zst", SizeBytes: 21}}}, 10)
	assert.ErrorIs(t, err, errdefs.ErrQuotaExceeded)
	v2, err := commit(t, &versions.CheckpointRecord{Archives: []versions.Archive{{Volume: "work", Key: "checkpoints/acme/p/work/2.tar.zst", SizeBytes: 20}}}, 10)
	require.NoError(t, err)
	_, err = s.Tenants.SetQuota(ctx, tenant, versions.Quota{})
	require.NoError(t, err)

	// The version a checkpoint holds cannot be deleted under it.
	_, err = s.Versions.MarkCollectable(ctx, tenant, "p", time.Now(), false)
	require.NoError(t, err)
	got, err := s.Versions.GetVersion(ctx, tenant, "p", v.Number)
	require.NoError(t, err)
	assert.Equal(t, versions.StateReady, got.State)

	deleted, released, err := s.Versions.DeleteCheckpoint(ctx, tenant, "p", 1)
	require.NoError(t, err)
	assert.True(t, released, "nothing else keeps the version")
	assert.Len(t, deleted.Archives, 2)
	got, err = s.Versions.GetVersion(ctx, tenant, "p", v.Number)
	require.NoError(t, err)
	assert.Equal(t, versions.StateDeleting, got.State)
	orphans, err := s.Volumes.OrphanArchives(ctx, 10)
	require.NoError(t, err)
	var keys []string
	for _, o := range orphans {
		keys = append(keys, o.Key)
	}
	assert.ElementsMatch(t, []string{"checkpoints/acme/p/work/1.tar.zst", "checkpoints/acme/p/home/1.tar.zst"}, keys)
	u, err = s.Tenants.Usage(ctx, tenant)
	require.NoError(t, err)
	assert.Equal(t, int64(20), u.CheckpointBytes, "the deleted checkpoint's archives no longer count")
	_, _, err = s.Versions.DeleteCheckpoint(ctx, tenant, "p", 1)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	// A checkpoint whose version is current releases only its archives.
	_, err = s.Versions.SetCurrent(ctx, tenant, "p", v2.Number, 1)
	require.NoError(t, err)
	_, released, err = s.Versions.DeleteCheckpoint(ctx, tenant, "p", 2)
	require.NoError(t, err)
	assert.False(t, released)
	got, err = s.Versions.GetVersion(ctx, tenant, "p", v2.Number)
	require.NoError(t, err)
	assert.Equal(t, versions.StateReady, got.State)

	// Numbers are never reused.
	_, err = commit(t, &versions.CheckpointRecord{}, 1)
	require.NoError(t, err)
	cs, err = s.Versions.ListCheckpoints(ctx, tenant, "p")
	require.NoError(t, err)
	require.Len(t, cs, 1)
	assert.Equal(t, 3, cs[0].Number)

	// Deleting the project deletes its checkpoints; their archives become
	// orphans, for the cleanup to delete.
	_, err = commit(t, &versions.CheckpointRecord{Archives: []versions.Archive{{Volume: "work", Key: "checkpoints/acme/p/work/4.tar.zst", SizeBytes: 1}}}, 1)
	require.NoError(t, err)
	_, err = s.Projects.DeleteProject(ctx, tenant, "p")
	require.NoError(t, err)
	orphans, err = s.Volumes.OrphanArchives(ctx, 10)
	require.NoError(t, err)
	keys = keys[:0]
	for _, o := range orphans {
		keys = append(keys, o.Key)
	}
	assert.Contains(t, keys, "checkpoints/acme/p/work/4.tar.zst")
}

// A checkpoint with memory records its image with the version in one
// commit: the row owns the artifact (the orphan scan keeps it), what its
// push added counts in stored bytes and the quota, and one instance at a
// time may resume it: a second resume is refused while the first instance
// lives, and allowed once it is gone.
func TestCheckpointMemoryRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	mem := versions.CheckpointMemory{Image: "envd/projects/acme/p@sha256:" + strings.Repeat("a", 64), Bytes: 5000, NewBytes: 300, FreezeMS: 40}
	commit := func(rec *versions.CheckpointRecord, layer int64) (versions.Version, error) {
		v, _, err := s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 1, Image: "envd/projects/acme/p@sha256:" + time.Now().Format("150405.000000000"),
			Parent: 1, LayerBytes: layer, NoSwitch: true, Checkpoint: rec})
		return v, err
	}
	owned, err := s.Content.ImageOwned(ctx, mem.Image)
	require.NoError(t, err)
	require.False(t, owned, "no row owns the artifact before its commit")

	// The quota counts the memory image's new bytes with the layer.
	_, err = s.Tenants.SetQuota(ctx, tenant, versions.Quota{MaxStoredBytes: 1000 + 299})
	require.NoError(t, err)
	_, err = commit(&versions.CheckpointRecord{Node: "n1", Memory: mem}, 1000)
	require.ErrorIs(t, err, errdefs.ErrQuotaExceeded)
	_, err = s.Tenants.SetQuota(ctx, tenant, versions.Quota{})
	require.NoError(t, err)
	_, err = commit(&versions.CheckpointRecord{Node: "n1", Memory: mem}, 1000)
	require.NoError(t, err)

	c, err := s.Versions.GetCheckpoint(ctx, tenant, "p", 1)
	require.NoError(t, err)
	assert.Equal(t, mem, c.Memory)
	assert.Equal(t, int64(1300), c.Bytes(), "the layer and the memory image's new bytes")
	u, err := s.Tenants.Usage(ctx, tenant)
	require.NoError(t, err)
	assert.Equal(t, int64(300), u.CheckpointBytes)
	owned, err = s.Content.ImageOwned(ctx, mem.Image)
	require.NoError(t, err)
	assert.True(t, owned, "the checkpoint's row owns its memory image")
	all, err := s.Content.OwnedImages(ctx, "envd/")
	require.NoError(t, err)
	assert.True(t, all[mem.Image], "and the orphan scan sees it owned")

	for _, id := range []string{"i-one", "i-two"} {
		_, err := s.Instances.CreateInstance(ctx, versions.Instance{ID: id, Tenant: tenant, Project: "p", Node: "n1", Version: 1, State: types.StatePending})
		require.NoError(t, err)
	}
	require.NoError(t, s.Versions.ClaimCheckpointMemory(ctx, tenant, "p", 1, "i-one"))
	err = s.Versions.ClaimCheckpointMemory(ctx, tenant, "p", 1, "i-two")
	require.ErrorIs(t, err, errdefs.ErrConflict, "a second resume while the first instance lives")
	assert.Contains(t, err.Error(), "i-one")
	_, err = s.Instances.Transition(ctx, "i-one", nil, types.StateTerminated, "user_delete", "")
	require.NoError(t, err)
	require.NoError(t, s.Versions.ClaimCheckpointMemory(ctx, tenant, "p", 1, "i-two"), "the first instance is gone")
	c, err = s.Versions.GetCheckpoint(ctx, tenant, "p", 1)
	require.NoError(t, err)
	assert.Equal(t, "i-two", c.Memory.ResumedBy)

	// A checkpoint without memory has nothing to resume.
	_, err = commit(&versions.CheckpointRecord{Node: "n1"}, 10)
	require.NoError(t, err)
	err = s.Versions.ClaimCheckpointMemory(ctx, tenant, "p", 2, "i-two")
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
}

// A hibernation with memory records its checkpoint with the stop's first
// step and its version with the stop; a transition to Running clears both.
// One cut short (Stopping or Pending) is put back to hibernated on the
// checkpoint's version; retention keeps the checkpoint a live instance is
// hibernated on.
func TestHibernationWithMemoryRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	mem := versions.CheckpointMemory{Image: "envd/projects/acme/p@sha256:" + strings.Repeat("b", 64), Bytes: 5000, NewBytes: 300}
	v, _, err := s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 1, Image: "envd/projects/acme/p@sha256:" + strings.Repeat("c", 64),
		Parent: 1, LayerBytes: 10, NoSwitch: true, Checkpoint: &versions.CheckpointRecord{Node: "n1", Memory: mem}})
	require.NoError(t, err)
	_, err = s.Instances.CreateInstance(ctx, versions.Instance{ID: "i-hib", Tenant: tenant, Project: "p", Node: "n1", Version: 1, State: types.StateRunning})
	require.NoError(t, err)

	_, err = s.Instances.TransitionHibernating(ctx, "i-hib", []types.InstanceState{types.StateRunning}, types.StateStopping, 1, "hibernated", "stopping")
	require.NoError(t, err)
	in, err := s.Instances.GetInstance(ctx, tenant, "i-hib")
	require.NoError(t, err)
	assert.Equal(t, 1, in.HibernatedCheckpoint)
	assert.Zero(t, in.HibernatedVersion, "not hibernated before the stop is recorded")

	// A crash here: put back to hibernated on the checkpoint's version.
	in, err = s.Instances.Rehibernate(ctx, "i-hib", "recovered", "interrupted")
	require.NoError(t, err)
	assert.Equal(t, types.StateStopped, in.State)
	assert.Equal(t, v.Number, in.HibernatedVersion)
	assert.Equal(t, 1, in.HibernatedCheckpoint)
	_, err = s.Instances.Rehibernate(ctx, "i-hib", "recovered", "again")
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "only a Stopping or Pending one")

	// Retention keeps the checkpoint while the instance is hibernated on it.
	_, err = s.Projects.SetRetention(ctx, tenant, "p", versions.Retention{KeepLast: 1})
	require.NoError(t, err)
	_, _, err = s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 1, Image: "envd/projects/acme/p@sha256:" + strings.Repeat("d", 64),
		Parent: 1, LayerBytes: 10, NoSwitch: true, Checkpoint: &versions.CheckpointRecord{Node: "n1"}})
	require.NoError(t, err)
	expired, err := s.Versions.ExpireCheckpoints(ctx, tenant, "p", time.Now(), true)
	require.NoError(t, err)
	assert.Empty(t, expired, "the checkpoint an instance is hibernated on is kept")

	// The wake: Pending (a crash here goes back too), then Running clears it.
	in, err = s.Instances.Rehome(ctx, "i-hib", "n2", v.Number, "started", "waking")
	require.NoError(t, err)
	assert.Equal(t, types.StatePending, in.State)
	assert.Equal(t, "n2", in.Node)
	assert.Zero(t, in.HibernatedVersion)
	assert.Equal(t, 1, in.HibernatedCheckpoint, "kept through the wake's Pending")
	in, err = s.Instances.Transition(ctx, "i-hib", []types.InstanceState{types.StatePending}, types.StateRunning, "started", "woke")
	require.NoError(t, err)
	assert.Zero(t, in.HibernatedCheckpoint, "cleared once it runs")
	expired, err = s.Versions.ExpireCheckpoints(ctx, tenant, "p", time.Now(), true)
	require.NoError(t, err)
	require.Len(t, expired, 1, "once it runs, retention may expire the checkpoint")
	assert.Equal(t, 1, expired[0].Number)

	// The idle fallback's record: hibernated, no checkpoint, a reason.
	_, err = s.Instances.Transition(ctx, "i-hib", []types.InstanceState{types.StateRunning}, types.StateStopping, "idle", "stopping")
	require.NoError(t, err)
	in, err = s.Instances.StopHibernatedWith(ctx, "i-hib", versions.Hibernation{Version: v.Number, MemoryNotKept: "class"}, "idle", "memory not kept")
	require.NoError(t, err)
	assert.Equal(t, "class", in.MemoryNotKept)
	assert.Zero(t, in.HibernatedCheckpoint)
}
