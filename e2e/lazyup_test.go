package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/syncbuf"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/snapshotter/stargz"
)

// Lazy up (issue 15, item 8): a lazy start does not wait for a large
// prefetch range, and a save's prefetch range holds what instances read
// from the image, not what the saving instance wrote and read back.

// blobReaderAt reads a blob of the node's registry with ranged GETs.
type blobReaderAt struct {
	t   *testing.T
	url string
}

func (b blobReaderAt) ReadAt(p []byte, off int64) (int, error) {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, b.url, nil)
	if err != nil {
		return 0, err
	}
	setNodeAuth(b.t, req, env.node)
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusPartialContent {
		return 0, fmt.Errorf("ranged GET: %s", resp.Status)
	}
	n, err := io.ReadFull(resp.Body, p)
	if err == io.ErrUnexpectedEOF {
		err = io.EOF
	}
	return n, err
}

// savedPrefetchRange is the prefetch range of the top layer of a version.
func savedPrefetchRange(t *testing.T, project string, version int) (stargz.PrefetchRange, registry.LayerInfo) {
	t.Helper()
	img, _ := topLayer(t, project, version)
	l := img.Layers[len(img.Layers)-1]
	repo := strings.SplitN(img.Repo, "@", 2)[0]
	pr, err := stargz.LayerPrefetchRange(blobReaderAt{t, fmt.Sprintf("http://%s/v2/%s/blobs/%s", env.node.RegistryAddr(), repo, l.Digest)}, l.Size)
	require.NoError(t, err)
	return pr, l
}

func prefetchPaths(pr stargz.PrefetchRange) []string {
	var out []string
	for _, f := range pr.Files {
		out = append(out, f.Path)
	}
	return out
}

// waitFirstRead waits until the project's recorded first reads hold path.
func waitFirstRead(t *testing.T, project, path string) types.Project {
	t.Helper()
	var proj types.Project
	require.Eventually(t, func() bool {
		var err error
		proj, err = env.c.GetProject(ctx(t), project)
		return err == nil && slices.Contains(proj.Prefetch, path)
	}, prefetchWindow+15*time.Second, 200*time.Millisecond, "%s recorded as a first read", path)
	return proj
}

// TestRootSavePrefetchHoldsImageReads: an instance that downloads a file
// to a temporary name, renames it and reads it back (as apt does with its
// lists and packages, dpkg with what it unpacks) and reads a file of its
// image and changes it: the project's first reads and the saved layer's
// prefetch range hold the image's file, not the instance's own output.
func TestRootSavePrefetchHoldsImageReads(t *testing.T) {
	t.Parallel()
	p := newProject(t, "pfimage")
	in := up(t, p, 0)
	mustSh(t, in.ID, "mkdir -p /var/lists/partial && head -c 4194304 /dev/urandom > /var/lists/partial/big && "+
		"mv /var/lists/partial/big /var/lists/big && cat /var/lists/big > /dev/null && "+
		"cat /fixtures/keep/untouched > /dev/null && echo more >> /fixtures/keep/untouched")
	proj := waitFirstRead(t, p, "/fixtures/keep/untouched")
	assert.NotContains(t, proj.Prefetch, "/var/lists/big", "read back after the instance wrote it")
	_, res := save(t, in.ID, "own output and an image file")

	pr, l := savedPrefetchRange(t, p, res.Version)
	paths := prefetchPaths(pr)
	t.Logf("prefetch range %d of %d bytes: %v", pr.Bytes, l.Size, paths)
	assert.Contains(t, paths, "/fixtures/keep/untouched")
	assert.NotContains(t, paths, "/var/lists/big")
	assert.Less(t, pr.Bytes, int64(1<<20), "4 MB of random own output is not in the prefetch range")
	b := up(t, p, res.Version)
	assert.Equal(t, "stays\nmore", mustSh(t, b.ID, "cat /fixtures/keep/untouched"))

	// The read-ahead at the pull reads the layers' own mounts, top first.
	v, err := env.c.GetVersion(ctx(t), p, res.Version)
	require.NoError(t, err)
	rt := env.node.Runtime()
	dirs, err := rt.LayerDirs(ctx(t), env.node.RegistryAddr()+"/"+v.Image)
	require.NoError(t, err)
	require.Len(t, dirs, 2, "the base's layer and the saved one")
	_, err = os.Stat(filepath.Join(dirs[0], "var/lists/big"))
	assert.NoError(t, err, "the saved layer is on top")
	_, err = os.Stat(filepath.Join(dirs[1], "var/lists/big"))
	assert.True(t, os.IsNotExist(err), "the base has no /var/lists/big: %v", err)
	// The view it asked for is gone again.
	cctx := namespaces.WithNamespace(ctx(t), "envd")
	walked := 0
	require.NoError(t, rt.Client().SnapshotService(stargz.Name).Walk(cctx, func(_ context.Context, info snapshots.Info) error {
		walked++
		assert.False(t, strings.HasPrefix(info.Name, "envd-layers-"), "view %s left behind", info.Name)
		return nil
	}))
	assert.Positive(t, walked, "the instances' snapshots are listed")
}

// TestRootLazyStartDoesNotWaitForPrefetch: a version whose layer has a
// 48 MB prefetch range (a big file a restored instance read first and then
// changed) starts lazily, through a registry throttled to 6 MB/s, without
// waiting for that range: the start returns, and the first command answers,
// while the range is still being fetched. (The library waits for any
// prefetch up to 10 s; an install's own files, 90 MB before the landmark,
// held every lazy start of its version about 5 s.)
func TestRootLazyStartDoesNotWaitForPrefetch(t *testing.T) {
	require.Equal(t, stargz.Name, env.node.Runtime().LazySnapshotter())
	// Four files of 12 MiB: a range of 48 MiB within the encoder's bounds
	// (16 MiB a file, 64 MiB in all).
	const big = 48 << 20
	p := newProject(t, "pfwait")
	in := up(t, p, 0)
	mustSh(t, in.ID, fmt.Sprintf("mkdir /big && for i in 1 2 3 4; do head -c %d /dev/urandom > /big/$i; done", big/4))
	_, res := save(t, in.ID, "48 MB in four files")
	// Removed, so that its first reads (the window of an instance still
	// running at its end replaces the project's list) never replace
	// in1's, which a CI run saw when in's window ended after in1's first
	// store and before its save.
	_, err := env.c.DeleteInstance(ctx(t), in.ID)
	require.NoError(t, err)
	// A restored instance reads them from its image (first reads) and
	// changes them, so the next save stores them first, before the
	// landmark.
	in1 := up(t, p, res.Version)
	mustSh(t, in1.ID, "cat /big/1 /big/2 /big/3 /big/4 > /dev/null && touch /big/*")
	waitFirstRead(t, p, "/big/4")
	_, res2 := save(t, in1.ID, "48 MB read first")
	pr, l := savedPrefetchRange(t, p, res2.Version)
	require.Subset(t, prefetchPaths(pr), []string{"/big/1", "/big/2", "/big/3", "/big/4"})
	require.Greater(t, pr.Bytes, int64(big)*9/10, "the saved layer's prefetch range holds the four files (random bytes: compressed about as big)")
	v, err := env.c.GetVersion(ctx(t), p, res2.Version)
	require.NoError(t, err)

	// A second runtime on the node's containerd and lazy snapshotter pulls
	// through a proxy that passes 6 MB/s per connection: the prefetch
	// range takes about 8 s to come, less than the library's 10 s bound.
	px, rt := proxiedRuntime(t, "pfwait", 6<<20)

	ref := px.addr + "/" + v.Image
	start := time.Now()
	require.NoError(t, rt.Pull(ctx(t), ref))
	require.NoError(t, rt.Create(ctx(t), runtime.InstanceSpec{ID: "pfwait-1", Image: ref}))
	var out syncbuf.Buffer // written by two copy goroutines
	code, err := rt.Exec(ctx(t), "pfwait-1", runtime.ExecSpec{Args: []string{"/bin/sh", "-c", "echo ok"}, Stdout: &out, Stderr: &out})
	require.NoError(t, err)
	require.Equal(t, 0, code, out.String())
	took := time.Since(start)
	_, st := lazyLayer(t, stargzRoot(), l.Digest)
	t.Logf("pull, start and first command in %v; layer fetched %d of %d bytes, prefetch range %d", took, st.FetchedSize, st.Size, pr.Bytes)
	assert.Less(t, st.FetchedSize, pr.Bytes, "the start waited for the layer's prefetch range")
	assert.Equal(t, "ok", strings.TrimSpace(out.String()))
}
