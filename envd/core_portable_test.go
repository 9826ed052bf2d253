package envd_test

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/fakeruntime"
	"github.com/envd-dev/envd/internal/tartest"
)

// mib is n MiB of random bytes: chunks no other test's images share.
func mib(t testing.TB, n int) []byte {
	b := make([]byte, n<<20)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

// memoryOf is the memory (fakeruntime.MemoryFile) instance id holds.
func (e *coreEnv) memoryOf(id string) []byte {
	e.t.Helper()
	b, err := os.ReadFile(filepath.Join(e.rt.UpperDir(id), fakeruntime.MemoryFile))
	require.NoError(e.t, err)
	return b
}

func (e *coreEnv) exportCheckpoint(project string, id int) []byte {
	e.t.Helper()
	var buf bytes.Buffer
	require.NoError(e.t, e.svc.Parts().Checkpoints.ExportCheckpoint(e.ctx, e.user, project, id, &buf))
	return buf.Bytes()
}

func (e *coreEnv) storedBytes() int64 {
	e.t.Helper()
	u, err := e.svc.Usage(e.ctx, e.user, "")
	require.NoError(e.t, err)
	return u.StoredBytes
}

// A checkpoint with memory, exported from one installation and imported
// into another (own database, own registry), is a checkpoint there whose
// resume gives the memory back; its bytes count in the tenant's stored
// bytes there.
func TestCoreCheckpointExportImport(t *testing.T) {
	t.Parallel()
	a := newCoreEnvOn(t, nil, true)
	a.project("web")
	in := a.instance("web", types.CreateInstanceRequest{})
	a.write(in.ID, "home/dev/a", "A")
	memory := mib(t, 3)
	a.write(in.ID, fakeruntime.MemoryFile, string(memory))
	res := a.checkpointed(in.ID, types.CheckpointRequest{Memory: true, Message: "counter at 3"})
	require.NotNil(t, res.Checkpoint.Memory, "a memory checkpoint")
	archive := a.exportCheckpoint("web", res.Checkpoint.ID)

	b := newCoreEnvOn(t, nil, true)
	b.project("web")
	b.project("other")
	before := b.storedBytes()
	got, err := b.svc.Parts().Checkpoints.ImportCheckpoint(b.ctx, b.user, "web", bytes.NewReader(archive))
	require.NoError(t, err)
	assert.Equal(t, 1, got.ID)
	assert.Equal(t, 2, got.Version)
	assert.Contains(t, got.Message, "counter at 3")
	require.NotNil(t, got.Memory)
	assert.Equal(t, res.Checkpoint.Memory.Bytes, got.Memory.Bytes, "the same chunks, index and manifest")
	assert.Equal(t, got.Memory.Bytes, got.Memory.NewBytes, "all of it is new to this registry")
	assert.Equal(t, strings.SplitN(res.Checkpoint.Memory.Image, "@", 2)[1], strings.SplitN(got.Memory.Image, "@", 2)[1],
		"the memory image keeps its digest (its subject, the version image, too)")
	assert.Equal(t, 1, b.current("web"), "an imported checkpoint leaves current alone")
	assert.Equal(t, "A", b.layerFiles("web", 2)["home/dev/a"])
	assert.GreaterOrEqual(t, b.storedBytes()-before, got.Memory.NewBytes+int64(len(memory)), "counted: the memory image and the version's layers")

	// up --checkpoint there: the processes' memory comes back.
	from := b.instance("web", types.CreateInstanceRequest{Checkpoint: got.ID})
	assert.Equal(t, 2, from.Version)
	assert.Equal(t, memory, b.memoryOf(from.ID), "resumed with the checkpoint's memory")

	// A second import into the same project stores no chunk twice.
	again, err := b.svc.Parts().Checkpoints.ImportCheckpoint(b.ctx, b.user, "web", bytes.NewReader(archive))
	require.NoError(t, err)
	assert.Equal(t, 2, again.ID)
	require.NotNil(t, again.Memory)
	assert.Less(t, again.Memory.NewBytes, int64(4096), "only the manifest is new (the index and chunks are the first import's)")

	// Refusals leave nothing: no checkpoint, no version, no memory image.
	refused := func(t *testing.T, archive []byte, kind error) {
		t.Helper()
		b := b.with(t)
		versionsBefore := b.versionsOf("other")
		_, err := b.svc.Parts().Checkpoints.ImportCheckpoint(b.ctx, b.user, "other", bytes.NewReader(archive))
		require.ErrorIs(t, err, kind)
		assert.Equal(t, errdefs.Code(kind), errdefs.Code(err))
		cps, err := b.svc.Parts().Checkpoints.ListCheckpoints(b.ctx, b.user, "other")
		require.NoError(t, err)
		assert.Empty(t, cps)
		assert.Equal(t, versionsBefore, b.versionsOf("other"))
		_, err = b.reg.Get(b.ctx, "envd/projects/"+testTenant+"/other@"+strings.SplitN(got.Memory.Image, "@", 2)[1])
		assert.ErrorIs(t, err, errdefs.ErrNotFound, "no memory image pushed")
	}
	t.Run("truncated", func(t *testing.T) {
		refused(t, archive[:len(archive)/2], errdefs.ErrInvalidArgument)
	})
	t.Run("truncated at a file boundary", func(t *testing.T) {
		refused(t, dropLastBlob(t, archive), errdefs.ErrInvalidArgument)
	})
	t.Run("a chunk corrupted", func(t *testing.T) {
		refused(t, tartest.FlipByteOfLargestFile(t, archive), errdefs.ErrInvalidArgument)
	})
	t.Run("not an archive", func(t *testing.T) {
		refused(t, []byte("not a tar"), errdefs.ErrInvalidArgument)
	})
	t.Run("over the stored bytes quota", func(t *testing.T) {
		used := b.storedBytes()
		_, err := b.svc.SetQuota(b.ctx, b.admin, testTenant, types.Quota{MaxStoredBytes: used + int64(len(memory))/2})
		require.NoError(t, err)
		defer func() {
			_, err := b.svc.SetQuota(b.ctx, b.admin, testTenant, types.Quota{})
			require.NoError(t, err)
		}()
		// into "other": its repository has none of the archive's blobs
		refused(t, archive, errdefs.ErrQuotaExceeded)
	})
}

// An export of a checkpoint without memory imports as a checkpoint without
// memory.
func TestCoreCheckpointExportImportWithoutMemory(t *testing.T) {
	t.Parallel()
	a := newCoreEnv(t, nil)
	a.project("web")
	in := a.instance("web", types.CreateInstanceRequest{})
	a.write(in.ID, "home/dev/a", "A")
	res := a.checkpointed(in.ID, types.CheckpointRequest{})
	archive := a.exportCheckpoint("web", res.Checkpoint.ID)

	b := newCoreEnv(t, nil)
	b.project("web")
	got, err := b.svc.Parts().Checkpoints.ImportCheckpoint(b.ctx, b.user, "web", bytes.NewReader(archive))
	require.NoError(t, err)
	assert.Nil(t, got.Memory)
	assert.Equal(t, "A", b.layerFiles("web", got.Version)["home/dev/a"])
	from := b.instance("web", types.CreateInstanceRequest{Checkpoint: got.ID})
	assert.Equal(t, got.Version, from.Version)
}

// Deleting the first of two checkpoints whose memory images share chunks
// leaves the second counted whole: the tenant's stored bytes hold what its
// image holds, not only what its push added.
func TestCoreMemoryBytesRecountedAfterDelete(t *testing.T) {
	t.Parallel()
	e := newCoreEnvOn(t, nil, true)
	e.project("web")
	in := e.instance("web", types.CreateInstanceRequest{})
	// 16 MiB of which the last one changes. Chunks are cut by content
	// (registry/memimage: at most 4 MiB each), so the chunks that end
	// before the chunk holding the change's first byte are shared: what
	// the second push adds is at most that chunk (from 11 MiB on) to the
	// end, index and manifest.
	memory := mib(t, 16)
	e.write(in.ID, fakeruntime.MemoryFile, string(memory))
	first := e.checkpointed(in.ID, types.CheckpointRequest{Memory: true}).Checkpoint
	copy(memory[15<<20:], mib(t, 1))
	e.write(in.ID, fakeruntime.MemoryFile, string(memory))
	second := e.checkpointed(in.ID, types.CheckpointRequest{Memory: true}).Checkpoint
	require.NotNil(t, first.Memory)
	require.NotNil(t, second.Memory)
	assert.Less(t, second.Memory.NewBytes, int64(6<<20), "chunks before the change shared with the first")
	assert.Greater(t, second.Memory.Bytes, int64(16<<20))

	before := e.storedBytes()
	_, err := e.svc.Parts().Checkpoints.DeleteCheckpoint(e.ctx, e.user, "web", first.ID)
	require.NoError(t, err)
	after, err := e.svc.Parts().Checkpoints.GetCheckpoint(e.ctx, e.user, "web", second.ID)
	require.NoError(t, err)
	require.NotNil(t, after.Memory)
	assert.Equal(t, second.Memory.Bytes, after.Memory.NewBytes, "the second image now counts every chunk it holds")
	assert.Equal(t, before-first.Bytes-second.Memory.NewBytes+second.Memory.Bytes, e.storedBytes(),
		"stored bytes: the first checkpoint's gone, the shared chunks counted once, with the second")
}

// dropLastBlob rewrites a tar without its last file: an archive cut at a
// file boundary, which a tar reader alone takes for whole.
func dropLastBlob(t *testing.T, archive []byte) []byte {
	t.Helper()
	type file struct {
		h    *tar.Header
		body []byte
	}
	var files []file
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		body, err := io.ReadAll(tr)
		require.NoError(t, err)
		files = append(files, file{h, body})
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, f := range files[:len(files)-1] {
		require.NoError(t, tw.WriteHeader(f.h))
		_, err := tw.Write(f.body)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return out.Bytes()
}
