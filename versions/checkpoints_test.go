package versions_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
