package envd_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/internal/fakeruntime"
	"github.com/envd-dev/envd/registry/memimage"
)

// loseChunks deletes the stored chunks of memory image ("repo@digest")
// from the registry's storage: a registry that lost them.
func (e *coreEnv) loseChunks(image string) int {
	e.t.Helper()
	st, err := memimage.New(e.reg.Client)
	require.NoError(e.t, err)
	repo, digest, _ := strings.Cut(image, "@")
	a, err := st.Get(e.ctx, repo, digest)
	require.NoError(e.t, err)
	chunks := map[string]bool{}
	for _, f := range a.Index.Files {
		for _, d := range f.Chunks {
			if d != "" {
				chunks[strings.TrimPrefix(d, "sha256:")] = true
			}
		}
	}
	lost := 0
	require.NoError(e.t, filepath.WalkDir(e.regRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "data" || !chunks[filepath.Base(filepath.Dir(p))] {
			return err
		}
		lost++
		return os.Remove(p)
	}))
	require.NotZero(e.t, lost, "the image's chunks are in the registry's storage")
	return lost
}

// A resume on the node that took the checkpoint links the memory image the
// node kept after its push instead of pulling it: it resumes with the
// checkpoint's memory even when the registry has lost the image's chunks.
// A node that keeps none (MemoryCacheBytes < 0) pulls, and fails so; an
// entry whose files are not the index's is not used (the pull is).
func TestCoreResumeOnTheSameNodeLinksTheKeptImage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		cacheSize int64
		tamper    bool
	}{{"kept", 0, false}, {"none kept", -1, false}, {"kept but truncated", 0, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newCoreEnvOn(t, func(cfg *envd.Config) { cfg.MemoryCacheBytes = c.cacheSize }, true)
			e.project("web")
			in := e.instance("web", types.CreateInstanceRequest{})
			memory := mib(t, 3)
			e.write(in.ID, fakeruntime.MemoryFile, string(memory))
			res := e.checkpointed(in.ID, types.CheckpointRequest{Memory: true})
			require.NotNil(t, res.Checkpoint.Memory)
			cache := filepath.Join(e.cfg.WorkDir, "memory-cache")
			entry := filepath.Join(cache, strings.ReplaceAll(strings.SplitN(res.Checkpoint.Memory.Image, "@", 2)[1], ":", "-"))
			if c.tamper {
				ents, err := os.ReadDir(entry)
				require.NoError(t, err)
				require.NotEmpty(t, ents)
				// A new file in the entry's place (the linked one is
				// the checkpoint's, shared): shorter by a page.
				p := filepath.Join(entry, ents[0].Name())
				info, err := os.Stat(p)
				require.NoError(t, err)
				require.NoError(t, os.Remove(p))
				require.NoError(t, os.WriteFile(p, make([]byte, max(info.Size()-4096, 0)), 0o600))
			}
			if c.cacheSize < 0 {
				_, err := os.Stat(cache)
				assert.ErrorIs(t, err, fs.ErrNotExist, "no cache")
			}

			if c.tamper {
				// Not lost: the pull gives the memory back.
				from := e.instance("web", types.CreateInstanceRequest{Checkpoint: res.Checkpoint.ID})
				assert.Equal(t, memory, e.memoryOf(from.ID), "resumed with the checkpoint's memory, pulled")
				_, err := os.Stat(entry)
				assert.ErrorIs(t, err, fs.ErrNotExist, "the entry that did not match is gone")
				return
			}
			e.loseChunks(res.Checkpoint.Memory.Image)
			if c.cacheSize < 0 {
				_, err := e.svc.Parts().Instances.CreateInstance(e.ctx, e.user, "web", types.CreateInstanceRequest{Checkpoint: res.Checkpoint.ID}, "")
				require.Error(t, err, "pulled from a registry that lost the chunks")
				return
			}
			from := e.instance("web", types.CreateInstanceRequest{Checkpoint: res.Checkpoint.ID})
			assert.Equal(t, memory, e.memoryOf(from.ID), "resumed with the checkpoint's memory, linked from the node's copy")
			ents, err := os.ReadDir(e.cfg.WorkDir)
			require.NoError(t, err)
			var left []string
			for _, d := range ents {
				if strings.HasPrefix(d.Name(), "resume-") {
					left = append(left, d.Name())
				}
			}
			assert.Empty(t, left, "the resume's links are removed after the start")
			_, err = os.Stat(entry)
			assert.NoError(t, err, "the node's copy stays for the next resume")
		})
	}
}

// The node's copies are bounded: with room for one image, the second
// checkpoint's image replaces the first's.
func TestCoreKeptMemoryImagesAreBounded(t *testing.T) {
	t.Parallel()
	e := newCoreEnvOn(t, func(cfg *envd.Config) { cfg.MemoryCacheBytes = 5 << 20 }, true)
	e.project("web")
	in := e.instance("web", types.CreateInstanceRequest{})
	var images []string
	for i := range 2 {
		e.write(in.ID, fakeruntime.MemoryFile, string(mib(t, 3)))
		res := e.checkpointed(in.ID, types.CheckpointRequest{Memory: true, Message: fmt.Sprint(i)})
		require.NotNil(t, res.Checkpoint.Memory)
		images = append(images, strings.ReplaceAll(strings.SplitN(res.Checkpoint.Memory.Image, "@", 2)[1], ":", "-"))
	}
	ents, err := os.ReadDir(filepath.Join(e.cfg.WorkDir, "memory-cache"))
	require.NoError(t, err)
	var kept []string
	for _, d := range ents {
		kept = append(kept, d.Name())
	}
	assert.Equal(t, []string{images[1]}, kept, "only the newer image is kept")
}
