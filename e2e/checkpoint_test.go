package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// newVolumeProject creates a project with one volume, work at /workspace.
func newVolumeProject(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, projectSeq.Add(1))
	_, err := env.c.CreateProject(context.Background(), types.CreateProjectRequest{Name: name, Base: fixtureBase,
		Volumes: []string{"work:/workspace"}})
	require.NoError(t, err)
	return name
}

func getInstance(t *testing.T, id string) types.Instance {
	t.Helper()
	in, err := env.c.GetInstance(ctx(t), id)
	require.NoError(t, err)
	return in
}

func checkpoint(t *testing.T, id, msg string) types.CheckpointResult {
	t.Helper()
	op, err := env.c.Checkpoint(ctx(t), id, types.CheckpointRequest{Message: msg})
	return succeeded[types.CheckpointResult](t, op, err)
}

// A checkpoint restores the rootfs and the volume to the same moment, and
// the writes made after it are gone; a volume restore to it brings the
// volume back; deleting it removes its version and its archive; usage
// counts both.
func TestRootCheckpoint(t *testing.T) {
	c := ctx(t)
	p := newVolumeProject(t, "ckpt")
	a := up(t, p, 0)
	mustSh(t, a.ID, "echo A > /state && echo B > /workspace/state")
	before, err := env.c.Usage(c, "")
	require.NoError(t, err)

	res := checkpoint(t, a.ID, "A and B")
	cp := res.Checkpoint
	assert.Equal(t, 1, cp.ID)
	assert.Equal(t, "A and B", cp.Message)
	require.Len(t, cp.Volumes, 1)
	assert.Equal(t, "work", cp.Volumes[0].Volume)
	assert.Positive(t, cp.Volumes[0].Bytes)
	assert.Equal(t, cp.VersionBytes+cp.VolumeBytes, cp.Bytes)
	assert.False(t, res.Current)
	proj, err := env.c.GetProject(c, p)
	require.NoError(t, err)
	assert.Equal(t, 1, proj.Current, "a checkpoint does not move current")
	t.Logf("checkpoint: freeze %d ms, volume writes waited %d ms, archive %d ms, total %d ms",
		res.FreezeMS, res.VolumeFreezeMS, res.ArchiveMS, res.TotalMS)

	// The instance ran on: later writes land.
	mustSh(t, a.ID, "echo A2 > /state && echo B2 > /workspace/state")
	assert.Equal(t, "A2 B2", mustSh(t, a.ID, "echo $(cat /state) $(cat /workspace/state)"))

	after, err := env.c.Usage(c, "")
	require.NoError(t, err)
	assert.Equal(t, before.CheckpointBytes+cp.VolumeBytes, after.CheckpointBytes, "usage counts the archive")
	assert.GreaterOrEqual(t, after.VersionBytes, before.VersionBytes+cp.VersionBytes, "and the version")
	assert.Equal(t, after.VersionBytes+after.VolumeBytes+after.DiskBytes+after.CheckpointBytes, after.StoredBytes)

	// A volume restore to the checkpoint on the running instance: the
	// volume is back at B (in place, the instance frozen meanwhile), the
	// rootfs is untouched; by name or key the restore is still refused
	// while the volume is mounted in an instance.
	vol, err := env.c.RestoreVolume(c, p, "work", types.VolumeArchiveRequest{Checkpoint: cp.ID})
	require.NoError(t, err)
	assert.Equal(t, "work", vol.Name)
	assert.Equal(t, "A2 B", mustSh(t, a.ID, "echo $(cat /state) $(cat /workspace/state)"))
	assert.Equal(t, types.StateRunning, getInstance(t, a.ID).State, "thawed after the restore")
	_, err = env.c.RestoreVolume(c, p, "work", types.VolumeArchiveRequest{Key: cp.Volumes[0].Key})
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	mustSh(t, a.ID, "echo B2 > /workspace/state")
	// Starting from the checkpoint restores the volume first: refused
	// while the instance has it mounted, before any instance is made.
	before2, err := env.c.ListInstances(c, p)
	require.NoError(t, err)
	_, err = env.c.CreateInstance(c, p, types.CreateInstanceRequest{Checkpoint: cp.ID})
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	after2, err := env.c.ListInstances(c, p)
	require.NoError(t, err)
	assert.Len(t, after2, len(before2), "the refusal made no instance")
	_, err = env.c.DeleteInstance(c, a.ID)
	require.NoError(t, err)

	b, err := env.c.CreateInstance(c, p, types.CreateInstanceRequest{Checkpoint: cp.ID})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(context.Background(), b.ID) })
	assert.Equal(t, cp.Version, b.Version)
	assert.Equal(t, "A B", mustSh(t, b.ID, "echo $(cat /state) $(cat /workspace/state)"),
		"rootfs and volume at the checkpoint's moment; the later writes are gone")

	// A volume restore to the checkpoint brings the volume back alone.
	mustSh(t, b.ID, "echo B3 > /workspace/state")
	_, err = env.c.DeleteInstance(c, b.ID)
	require.NoError(t, err)
	_, err = env.c.RestoreVolume(c, p, "work", types.VolumeArchiveRequest{Checkpoint: cp.ID})
	require.NoError(t, err)
	d := up(t, p, 0)
	assert.Equal(t, "B", mustSh(t, d.ID, "cat /workspace/state"))
	assert.Equal(t, "none", mustSh(t, d.ID, "cat /state 2>/dev/null || echo none"), "current is still version 1")
	_, err = env.c.RestoreVolume(c, p, "work", types.VolumeArchiveRequest{Checkpoint: 9})
	assert.Error(t, err)

	list, err := env.c.ListCheckpoints(c, p)
	require.NoError(t, err)
	require.Len(t, list, 1)
	archives, err := env.c.ListArchives(c, p, "")
	require.NoError(t, err)
	assert.Empty(t, archives, "a checkpoint's archive is not a user archive")

	// Deleting the checkpoint removes its version and its archive.
	_, err = env.c.DeleteInstance(c, d.ID)
	require.NoError(t, err)
	_, err = env.c.DeleteCheckpoint(c, p, cp.ID)
	require.NoError(t, err)
	_, err = env.c.GetVersion(c, p, cp.Version)
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "the version went with the checkpoint")
	_, err = env.c.RestoreVolume(c, p, "work", types.VolumeArchiveRequest{Key: cp.Volumes[0].Key})
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "and the archive")
	_, err = env.c.CreateInstance(c, p, types.CreateInstanceRequest{Checkpoint: cp.ID})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	gone, err := env.c.Usage(c, "")
	require.NoError(t, err)
	assert.Equal(t, before.CheckpointBytes, gone.CheckpointBytes)
}

// Retention counts checkpoints as units: a GC deletes the checkpoints the
// policy does not keep with their versions and archives, and keeps the
// others whole.
func TestRootCheckpointRetention(t *testing.T) {
	c := ctx(t)
	p := newVolumeProject(t, "ckptret")
	a := up(t, p, 0)
	var cps []types.Checkpoint
	for i := range 2 {
		mustSh(t, a.ID, fmt.Sprintf("echo %d > /state && echo %d > /workspace/state", i, i))
		cps = append(cps, checkpoint(t, a.ID, "").Checkpoint)
	}
	_, err := env.c.DeleteInstance(c, a.ID)
	require.NoError(t, err)
	_, err = env.c.SetRetention(c, p, types.Retention{KeepLast: 1})
	require.NoError(t, err)
	res := runGC(t, false)
	var expired []int
	for _, x := range res.Checkpoints {
		if x.Project == p {
			expired = append(expired, x.ID)
			assert.Equal(t, 1, x.Archives)
		}
	}
	assert.Equal(t, []int{cps[0].ID}, expired)
	assert.True(t, slices.Contains(collected(res, p), cps[0].Version), "the expired checkpoint's version went with it")
	assert.False(t, slices.Contains(collected(res, p), cps[1].Version), "the kept checkpoint's version stays")
	_, err = env.c.RestoreVolume(c, p, "work", types.VolumeArchiveRequest{Key: cps[0].Volumes[0].Key})
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "its archive went too")

	b, err := env.c.CreateInstance(c, p, types.CreateInstanceRequest{Checkpoint: cps[1].ID})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(context.Background(), b.ID) })
	assert.Equal(t, "1 1", mustSh(t, b.ID, "echo $(cat /state) $(cat /workspace/state)"), "the kept checkpoint is whole")
}

// BenchmarkRootCheckpointFreeze compares the freeze of a checkpoint of an
// instance with a 100 MB volume (8 MB of it written, not synced, just
// before) with a plain save's: freeze-ms is how long
// the instance's processes were frozen, volume-freeze-ms how long writes
// to the volume waited (its image was copied). Run with
//
//	go test -run '^$' -bench BenchmarkRootCheckpointFreeze -benchtime 5x ./e2e/
func BenchmarkRootCheckpointFreeze(b *testing.B) {
	ctx := context.Background()
	p := newVolumeProject(b, "ckptbench")
	in, err := env.c.CreateInstance(ctx, p, types.CreateInstanceRequest{})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _, _ = env.c.DeleteInstance(context.Background(), in.ID) }()
	// 100 MB of incompressible data in the volume, a few files in the rootfs.
	script := "head -c 104857600 /dev/urandom > /workspace/data && sync && mkdir -p /root/w && for i in 1 2 3 4 5; do head -c 65536 /dev/urandom > /root/w/$i; done"
	if r, err := env.c.Exec(ctx, in.ID, types.ExecRequest{Args: []string{"sh", "-c", script}, Timeout: "5m"}); err != nil || r.ExitCode != 0 {
		b.Fatalf("fill: %v %+v", err, r)
	}
	wait := func(op types.Operation, err error, out any) {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
		final, err := env.c.WaitOperation(ctx, op.ID, nil)
		if err != nil || final.State != types.OpSucceeded {
			b.Fatalf("%s: %v %+v", op.Kind, err, final.Error)
		}
		if err := json.Unmarshal(final.Result, out); err != nil {
			b.Fatal(err)
		}
	}
	// Before each capture, 8 MB more in the volume and 64 KiB in the
	// rootfs, not synced: the volume's flush is part of the freeze.
	dirty := func(b *testing.B) {
		b.Helper()
		b.StopTimer()
		defer b.StartTimer()
		r, err := env.c.Exec(ctx, in.ID, types.ExecRequest{Args: []string{"sh", "-c",
			"head -c 8388608 /dev/urandom > /workspace/fresh && head -c 65536 /dev/urandom > /root/w/fresh"}})
		if err != nil || r.ExitCode != 0 {
			b.Fatalf("dirty: %v %+v", err, r)
		}
	}
	b.Run("save", func(b *testing.B) {
		var freeze []time.Duration
		for b.Loop() {
			dirty(b)
			var res types.SaveResult
			op, err := env.c.Save(ctx, in.ID, types.SaveRequest{}, "")
			wait(op, err, &res)
			freeze = append(freeze, time.Duration(res.FreezeMS)*time.Millisecond)
		}
		b.ReportMetric(float64(ckptMedian(freeze).Milliseconds()), "freeze-ms")
	})
	b.Run("checkpoint-100MB-volume", func(b *testing.B) {
		var freeze, vol, arc []time.Duration
		for b.Loop() {
			dirty(b)
			var res types.CheckpointResult
			op, err := env.c.Checkpoint(ctx, in.ID, types.CheckpointRequest{})
			wait(op, err, &res)
			freeze = append(freeze, time.Duration(res.FreezeMS)*time.Millisecond)
			vol = append(vol, time.Duration(res.VolumeFreezeMS)*time.Millisecond)
			arc = append(arc, time.Duration(res.ArchiveMS)*time.Millisecond)
			if _, err := env.c.DeleteCheckpoint(ctx, p, res.Checkpoint.ID); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(ckptMedian(freeze).Milliseconds()), "freeze-ms")
		b.ReportMetric(float64(ckptMedian(vol).Milliseconds()), "volume-freeze-ms")
		b.ReportMetric(float64(ckptMedian(arc).Milliseconds()), "archive-ms")
	})
}

func ckptMedian(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
