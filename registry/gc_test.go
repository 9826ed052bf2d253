package registry

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// startRegistryIn is startRegistry with a storage directory the test can look into.
func startRegistryIn(t *testing.T, root string) *Server {
	t.Helper()
	s, err := Serve(context.Background(), root, "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		assert.NoError(t, s.Close(ctx))
	})
	return s
}

// blobFile is where the filesystem driver under root keeps a blob's bytes.
func blobFile(root, digest string) string {
	hex := strings.TrimPrefix(digest, "sha256:")
	return filepath.Join(root, "docker/registry/v2/blobs/sha256", hex[:2], hex, "data")
}

// getBlob fetches a blob through the registry API: status and body.
func getBlob(t *testing.T, srv *Server, repo, digest string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/v2/%s/blobs/%s", srv.Addr(), repo, digest), nil)
	require.NoError(t, err)
	req.SetBasicAuth(srv.Access().Node.User, srv.Access().Node.Password)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

// configDigest returns the digest of img's config blob.
func configDigest(t *testing.T, srv *Server, img Image) string {
	t.Helper()
	d, err := remoteImage(t, srv, img).ConfigName()
	require.NoError(t, err)
	return d.String()
}

// requirePullable pulls img's config and layers and checks their digests.
func requirePullable(t *testing.T, srv *Server, img Image) {
	t.Helper()
	for _, d := range append([]string{configDigest(t, srv, img)}, layerDigests(img)...) {
		status, body := getBlob(t, srv, img.Repo, d)
		require.Equal(t, http.StatusOK, status, "blob %s", d)
		assert.Equal(t, d, fmt.Sprintf("sha256:%x", sha256.Sum256(body)), "content of blob %s", d)
	}
}

func layerDigests(img Image) []string {
	var out []string
	for _, l := range img.Layers {
		out = append(out, l.Digest)
	}
	return out
}

// TestGarbageCollect deletes two of three images sharing a base layer and
// checks that exactly their own blobs are swept.
func TestGarbageCollect(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	srv := startRegistryIn(t, root)
	c := clientOf(t, srv)
	ctx := context.Background()

	// base holds the shared layer; a and b mount it and add one layer each.
	shared := makeLayerFile(t, map[string]string{"shared.txt": strings.Repeat("shared ", 100)}, nil)
	base, err := c.PushRootfsLayer(ctx, shared, "envd/gc/base", "")
	require.NoError(t, err)
	a, err := c.Append(ctx, base, makeLayerFile(t, map[string]string{"a.txt": "only in a"}, nil), "envd/gc/a", "", nil)
	require.NoError(t, err)
	b, err := c.Append(ctx, base, makeLayerFile(t, map[string]string{"b.txt": "only in b"}, nil), "envd/gc/b", "", nil)
	require.NoError(t, err)
	baseConfig, aConfig, bConfig := configDigest(t, srv, base), configDigest(t, srv, a), configDigest(t, srv, b)
	aLayer, bLayer := a.Layers[1].Digest, b.Layers[1].Digest

	require.NoError(t, c.DeleteManifest(ctx, a))
	require.NoError(t, c.DeleteManifest(ctx, base))
	status, _ := getBlob(t, srv, a.Repo, aLayer)
	require.Equal(t, http.StatusOK, status, "deleting a manifest leaves its blobs")

	st, err := srv.GarbageCollect(ctx, GCOptions{})
	require.NoError(t, err)
	// Image.Size is the bytes of its manifest, config and layers; the
	// shared layer is stored once.
	assert.Equal(t, GCStats{
		BlobsBefore: 9, BytesBefore: base.Size + a.Size + b.Size - 2*shared.Size,
		BlobsAfter: 4, BytesAfter: b.Size,
	}, st)

	tests := []struct {
		name   string
		digest string
		kept   bool
	}{
		{"a's layer", aLayer, false},
		{"a's config", aConfig, false},
		{"a's manifest", a.Digest, false},
		{"base's config", baseConfig, false},
		{"base's manifest", base.Digest, false},
		{"shared layer", shared.Digest, true},
		{"b's layer", bLayer, true},
		{"b's config", bConfig, true},
		{"b's manifest", b.Digest, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := os.Stat(blobFile(root, tt.digest))
			if tt.kept {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, fs.ErrNotExist)
			}
		})
	}

	status, _ = getBlob(t, srv, a.Repo, aLayer)
	assert.Equal(t, http.StatusNotFound, status, "a's swept layer through the API")
	got, err := c.Get(ctx, b.Ref())
	require.NoError(t, err)
	assert.Equal(t, b, got)
	assert.NoError(t, c.Verify(ctx, b))
	requirePullable(t, srv, b)

	again, err := srv.GarbageCollect(ctx, GCOptions{})
	require.NoError(t, err)
	assert.Equal(t, GCStats{BlobsBefore: 4, BytesBefore: b.Size, BlobsAfter: 4, BytesAfter: b.Size}, again,
		"a second sweep deletes nothing")
}

// TestGarbageCollectThenPushAgain pushes a swept layer again: the registry
// must not take it for present (a stale blob cache would), so it is
// uploaded and served.
func TestGarbageCollectThenPushAgain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		repo string
	}{
		{"same repository", "envd/gc/x"},
		{"other repository", "envd/gc/y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			srv := startRegistryIn(t, root)
			rec := &recorder{next: http.DefaultTransport}
			c := clientOf(t, srv, WithTransport(rec))
			ctx := context.Background()

			layer := makeLayerFile(t, map[string]string{"f.txt": "swept then pushed again"}, nil)
			img, err := c.PushRootfsLayer(ctx, layer, "envd/gc/x", "")
			require.NoError(t, err)
			requirePullable(t, srv, img) // pulled once, as a cache would remember it
			require.NoError(t, c.DeleteManifest(ctx, img))
			st, err := srv.GarbageCollect(ctx, GCOptions{})
			require.NoError(t, err)
			require.Zero(t, st.BlobsAfter)
			require.NoFileExists(t, blobFile(root, layer.Digest))

			start := rec.len()
			again, err := c.PushRootfsLayer(ctx, layer, tt.repo, "")
			require.NoError(t, err)
			uploaded, _ := rec.blobTraffic(start)
			assert.True(t, uploaded[layer.Digest], "the swept layer is uploaded again")
			requirePullable(t, srv, again)
			want, err := os.ReadFile(layer.Path)
			require.NoError(t, err)
			_, body := getBlob(t, srv, tt.repo, layer.Digest)
			assert.Equal(t, want, body)
		})
	}
}

func TestGarbageCollectEmpty(t *testing.T) {
	t.Parallel()
	srv := startRegistry(t)
	st, err := srv.GarbageCollect(context.Background(), GCOptions{})
	require.NoError(t, err)
	assert.Equal(t, GCStats{}, st)
}

// TestGarbageCollectStorageFailure breaks the storage with a file where the
// blobs directory should be (permissions would not stop root).
func TestGarbageCollectStorageFailure(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	srv := startRegistryIn(t, root)
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644))
	_, err := clientOf(t, srv).ImportRootfs(context.Background(), src, "envd/gc/broken", "")
	require.NoError(t, err)
	blobs := filepath.Join(root, "docker/registry/v2/blobs")
	require.NoError(t, os.RemoveAll(blobs))
	require.NoError(t, os.WriteFile(blobs, []byte("not a directory"), 0o644))

	_, err = srv.GarbageCollect(context.Background(), GCOptions{})
	assert.ErrorIs(t, err, errdefs.ErrUnavailable, "error: %v", err)
}

// A sweep with an orphan scan deletes the manifests of the scanned
// repositories that no row owns, and their blobs with them; owned ones and
// repositories not scanned are untouched.
func TestGarbageCollectOrphanManifests(t *testing.T) {
	t.Parallel()
	srv := startRegistryIn(t, t.TempDir())
	c := clientOf(t, srv)
	ctx := context.Background()
	base, err := c.PushRootfsLayer(ctx, makeLayerFile(t, map[string]string{"base.txt": "base"}, nil), "envd/images/base", "")
	require.NoError(t, err)
	owned, err := c.Append(ctx, base, makeLayerFile(t, map[string]string{"owned.txt": "owned"}, nil), "envd/t/owned", "", nil)
	require.NoError(t, err)
	orphan, err := c.Append(ctx, base, makeLayerFile(t, map[string]string{"orphan.txt": "orphan"}, nil), "envd/t/orphan", "", nil)
	require.NoError(t, err)
	outside, err := c.Append(ctx, base, makeLayerFile(t, map[string]string{"outside.txt": "outside"}, nil), "other/x", "", nil)
	require.NoError(t, err)

	st, err := srv.GarbageCollect(ctx, GCOptions{
		OrphanRepos: func(repo string) bool { return strings.HasPrefix(repo, "envd/t/") },
		Owned:       func(ref string) bool { return ref == owned.Ref() },
	})
	require.NoError(t, err)
	assert.Equal(t, []string{orphan.Ref()}, st.OrphanManifests)
	_, err = c.Get(ctx, orphan.Ref())
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "the orphan manifest is deleted")
	status, _ := getBlob(t, srv, orphan.Repo, orphan.Layers[1].Digest)
	assert.Equal(t, http.StatusNotFound, status, "and its own layer swept")
	for _, img := range []Image{base, owned, outside} {
		assert.NoError(t, c.Verify(ctx, img), img.Ref())
	}
}
