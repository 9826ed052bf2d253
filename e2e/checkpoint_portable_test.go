package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/tartest"
)

// A checkpoint with memory travels: taken on a gVisor node, exported as
// one tar, imported into a fresh installation (its own PostgreSQL,
// registry and containerd), and resumed there with `up --checkpoint`: the
// in-memory counter goes on from where it was instead of starting at 1.
// The import counts in the tenant's stored bytes there; a corrupted copy
// of the tar is refused and leaves no checkpoint.
func TestRootCheckpointMemoryTravels(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	_, ca := startJoiningNode(t, "memx-a", &node.Config{DefaultTTL: time.Hour, RuntimeClass: "gvisor"})
	p := fmt.Sprintf("memtravel-%d", projectSeq.Add(1))
	_, err := ca.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	a, err := ca.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	_, err = ca.Exec(c, a.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c", memCounter}})
	require.NoError(t, err)
	before := countPast(t, ca, a.ID, 5)

	res := memCheckpoint(t, ca, a.ID)
	cp := res.Checkpoint
	require.NotNil(t, cp.Memory)
	var archive, base bytes.Buffer
	start := time.Now()
	n, err := ca.ExportCheckpoint(c, p, cp.ID, &archive)
	require.NoError(t, err)
	exportTime := time.Since(start)
	assert.Equal(t, int64(archive.Len()), n)
	assert.Greater(t, n, cp.Memory.Bytes, "the tar holds the memory image and the version's layers")
	_, err = ca.ExportVersion(c, p, 1, &base)
	require.NoError(t, err)
	_, err = ca.DeleteInstance(c, a.ID)
	require.NoError(t, err)

	// A fresh installation on this machine.
	dir, err := os.MkdirTemp("", "envd-e2e-memx-fresh-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // the postgres user must reach its cluster dir
	fresh, err := node.Start(c, node.Config{DataDir: filepath.Join(dir, "data"), Node: "memx-fresh", PrefetchWindow: -1,
		RuntimeClass: "gvisor", DefaultTTL: time.Hour, WrapAPI: env.spec.Wrap})
	require.NoError(t, err)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		fresh.Shutdown(sctx)
		_ = os.RemoveAll(dir)
	})
	fc, err := client.New(fresh.URL, fresh.Token)
	require.NoError(t, err)
	_, err = fc.ImportImage(c, "base", bytes.NewReader(base.Bytes()))
	require.NoError(t, err)
	_, err = fc.CreateProject(c, types.CreateProjectRequest{Name: p, Base: "base"})
	require.NoError(t, err)

	// Corrupted: one byte of the largest blob (a memory chunk or a layer).
	_, err = fc.ImportCheckpoint(c, p, bytes.NewReader(tartest.FlipByteOfLargestFile(t, archive.Bytes())))
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	cps, err := fc.ListCheckpoints(c, p)
	require.NoError(t, err)
	assert.Empty(t, cps, "a refused import leaves no checkpoint")

	usage, err := fc.Usage(c, "")
	require.NoError(t, err)
	start = time.Now()
	got, err := fc.ImportCheckpoint(c, p, bytes.NewReader(archive.Bytes()))
	require.NoError(t, err)
	importTime := time.Since(start)
	require.NotNil(t, got.Memory, "the memory image came along")
	assert.Equal(t, cp.Memory.Bytes, got.Memory.Bytes)
	after, err := fc.Usage(c, "")
	require.NoError(t, err)
	assert.Equal(t, usage.CheckpointBytes+got.Memory.NewBytes, after.CheckpointBytes, "the memory image counts in stored bytes there")
	assert.Greater(t, after.StoredBytes, usage.StoredBytes)

	start = time.Now()
	in, err := fc.CreateInstance(c, p, types.CreateInstanceRequest{Checkpoint: got.ID})
	require.NoError(t, err)
	resumeTime := time.Since(start)
	t.Cleanup(func() { _, _ = fc.DeleteInstance(context.Background(), in.ID) })
	first := countIn(t, fc, in.ID)
	assert.GreaterOrEqual(t, first, before, "the resumed counter goes on from its checkpointed value, it did not start again")
	next := countPast(t, fc, in.ID, first) // nothing but the resumed process counts
	got, err = fc.GetCheckpoint(c, p, got.ID)
	require.NoError(t, err)
	assert.Equal(t, in.ID, got.Memory.ResumedBy)
	t.Logf("memory image %d bytes, tar %d bytes: export %s, import %s, resume %s; counter %d before the checkpoint, %d then %d after the resume elsewhere",
		cp.Memory.Bytes, n, exportTime.Round(time.Millisecond), importTime.Round(time.Millisecond), resumeTime.Round(time.Millisecond), before, first, next)
}
