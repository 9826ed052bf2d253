package memimage

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/internal/gvisortest"
)

// The root tests here check the package against the engine it is for:
// gVisor's runsc under a private containerd, driven through runc's shim as
// runtime/sandbox's tests do (docs/gvisor.md). They fail rather than skip
// without root or runsc: CI runs as root after scripts/setup.sh.

const ctrdNamespace = "memimage-test"

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var n int64
	for _, e := range entries {
		fi, err := e.Info()
		require.NoError(t, err)
		t.Logf("  %s: %d bytes", e.Name(), fi.Size())
		n += fi.Size()
	}
	return n
}

// A program holding a counter and 64 MiB in memory is checkpointed under
// gVisor, the image pushed and its directory removed, pulled back from the
// registry and restored on a second private containerd: the counter goes
// on, and the memory is the same.
func TestRootCheckpointThroughRegistryRestoresOnAnotherNode(t *testing.T) {
	runsc := gvisortest.RequireRunsc(t)
	ctx := context.Background()
	archive := gvisortest.MemhogArchive(t)
	s, _ := startStore(t)

	a := gvisortest.StartNode(t, runsc, ctrdNamespace, archive)
	task, out := a.Run(t, "hog", "", "/bin/memhog", "64")
	exitCh, err := task.Wait(ctx)
	require.NoError(t, err)
	seen := 0
	for seen < 5 {
		seen = out.Next(t)
	}
	require.NoError(t, task.Kill(ctx, syscall.SIGUSR2))
	sumBefore := out.Word(t, "sum ")

	dir, took := gvisortest.Checkpoint(t, task, true)
	t.Logf("checkpoint: %v, %d bytes", took, dirBytes(t, dir))
	select {
	case <-exitCh:
	case <-time.After(time.Minute):
		t.Fatal("task still running a minute after a checkpoint with exit")
	}
	_, err = task.Delete(ctx)
	require.NoError(t, err)
	stopped := out.Drain(t, seen)

	start := time.Now()
	res, err := s.Push(ctx, PushRequest{Dir: dir, Repo: repo,
		Annotations: map[string]string{"dev.envd.memory.engine": "runsc"}})
	require.NoError(t, err)
	t.Logf("push: %v, %d bytes uploaded, usage %+v", time.Since(start), res.Uploaded, res.Artifact.Usage())
	require.NoError(t, os.RemoveAll(dir))

	got, err := s.Get(ctx, repo, res.Artifact.Digest)
	require.NoError(t, err)
	pulled := filepath.Join(t.TempDir(), "pulled")
	start = time.Now()
	require.NoError(t, s.Pull(ctx, got, pulled))
	t.Logf("pull: %v", time.Since(start))

	b := gvisortest.StartNode(t, runsc, ctrdNamespace, archive)
	start = time.Now()
	task2, out2 := b.Run(t, "hog-restored", pulled, "/bin/memhog", "64")
	first := out2.Next(t)
	t.Logf("restore to first line: %v", time.Since(start))
	assert.Equal(t, stopped+1, first, "the restored program goes on from %d", stopped)
	require.NoError(t, task2.Kill(ctx, syscall.SIGUSR2))
	assert.Equal(t, sumBefore, out2.Word(t, "sum "), "the restored memory is the checkpointed memory")
}

// A program holding 128 MiB is checkpointed (left running), a contiguous
// tenth of its memory rewritten, and checkpointed again: the second push
// uploads at most a quarter of the first's bytes (issue 25's target), even
// when runsc laid pages.img out a few pages apart the second time. The test
// also prints what other average chunk sizes would have stored, the
// measurement behind DefaultChunkSize.
func TestRootSecondCheckpointStoresOnlyWhatChanged(t *testing.T) {
	runsc := gvisortest.RequireRunsc(t)
	ctx := context.Background()
	archive := gvisortest.MemhogArchive(t)
	s, _ := startStore(t)
	n := gvisortest.StartNode(t, runsc, ctrdNamespace, archive)

	task, out := n.Run(t, "hog", "", "/bin/memhog", "128")
	for seen := 0; seen < 3; {
		seen = out.Next(t)
	}
	dir1, took := gvisortest.Checkpoint(t, task, false)
	t.Logf("first checkpoint: %v, %d bytes", took, dirBytes(t, dir1))
	first, err := s.Push(ctx, PushRequest{Dir: dir1, Repo: repo})
	require.NoError(t, err)

	// Still running: it goes on counting and answers the signal.
	out.Next(t)
	require.NoError(t, task.Kill(ctx, syscall.SIGUSR1))
	out.Word(t, "changed")
	dir2, took := gvisortest.Checkpoint(t, task, false)
	t.Logf("second checkpoint: %v, %d bytes", took, dirBytes(t, dir2))
	second, err := s.Push(ctx, PushRequest{Dir: dir2, Repo: repo})
	require.NoError(t, err)

	ratio := float64(second.Uploaded) / float64(first.Uploaded)
	t.Logf("first push %d bytes (%d blobs), second %d bytes (%d blobs): %.1f%%",
		first.Uploaded, first.UploadedBlobs, second.Uploaded, second.UploadedBlobs, 100*ratio)
	assert.LessOrEqual(t, ratio, 0.25, "issue 25: a second checkpoint after a 10%% change stores at most 25%%")
	assert.Equal(t, second.Uploaded, NewBytes(second.Artifact, first.Artifact.Blobs))

	for _, avg := range []int64{256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20} {
		a, b := chunkSums(t, dir1, avg), chunkSums(t, dir2, avg)
		var total, fresh int64
		for d, sz := range b {
			total += sz
			if _, ok := a[d]; !ok {
				fresh += sz
			}
		}
		t.Logf("average chunk %7d: second image %d bytes in distinct non-zero chunks, %d new (%.1f%%), %d chunks",
			avg, total, fresh, 100*float64(fresh)/float64(total), len(b))
	}
	// What fixed 1 MiB chunks (index v1) would have re-stored: near 100%
	// when runsc moved the pages.
	a, b := fixedChunkSums(t, dir1), fixedChunkSums(t, dir2)
	var total, fresh int64
	for d, sz := range b {
		total += sz
		if _, ok := a[d]; !ok {
			fresh += sz
		}
	}
	t.Logf("fixed 1 MiB chunks: %d of %d bytes new (%.1f%%)", fresh, total, 100*float64(fresh)/float64(total))
}

// fixedChunkSums maps the sha256 of every non-zero 1 MiB chunk of dir's
// files to its size.
func fixedChunkSums(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		for off := int64(0); off < int64(len(b)); off += 1 << 20 {
			c := b[off:min(off+1<<20, int64(len(b)))]
			if !isZero(c) {
				out[fmt.Sprintf("%x", sha256.Sum256(c))] = int64(len(c))
			}
		}
	}
	return out
}

// chunkSums maps the sha256 of every chunk of dir's files, cut as a push
// with average chunk size avg cuts them, to its size.
func chunkSums(t *testing.T, dir string, avg int64) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		for _, x := range chunking(avg).cut(pagesOf(b), int64(len(b))) {
			if !x.hole {
				out[fmt.Sprintf("%x", sha256.Sum256(b[x.off:x.off+x.n]))] = x.n
			}
		}
	}
	return out
}
