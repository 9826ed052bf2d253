package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// Two manifests that share a layer travel in one layout: each blob once,
// the manifests' bytes (so digests) kept; pushed to another registry they
// are the same images there. A blob changed or missing in the tar is
// refused before anything is pushed.
func TestLayoutOfSeveralManifests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := startRegistry(t)
	c := clientOf(t, srv)
	base, err := c.PushRootfsLayer(ctx, makeLayerFile(t, map[string]string{"etc/os-release": "ID=test\n"}, nil), "envd/images/base", "")
	require.NoError(t, err)
	top, err := c.Append(ctx, base, makeLayerFile(t, map[string]string{"home/u/a": "A"}, nil), "envd/projects/t/p", "", nil)
	require.NoError(t, err)

	var buf bytes.Buffer
	require.NoError(t, c.ExportManifests(ctx, []LayoutManifest{
		{Image: top, Platform: true, Annotations: map[string]string{"k": "v"}},
		{Image: base},
	}, &buf))
	names := map[string]int{}
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		names[h.Name]++
	}
	for n, k := range names {
		assert.Equal(t, 1, k, "%s written %d times", n, k)
	}
	assert.Contains(t, names, "blobs/sha256/"+base.Layers[0].Digest[len("sha256:"):], "the shared layer")

	src := filepath.Join(t.TempDir(), "layout.tar")
	require.NoError(t, os.WriteFile(src, buf.Bytes(), 0o600))
	l, err := ReadLayout(src, t.TempDir())
	require.NoError(t, err)
	require.Len(t, l.Manifests, 2)
	assert.Equal(t, top.Digest, l.Manifests[0].Descriptor.Digest.String())
	assert.Equal(t, "v", l.Manifests[0].Descriptor.Annotations["k"])
	assert.NotNil(t, l.Manifests[0].Descriptor.Platform)
	assert.Nil(t, l.Manifests[1].Descriptor.Platform)

	other := clientOf(t, startRegistry(t))
	missing, err := other.MissingBytes(ctx, "envd/projects/t/q", l.Manifests[0])
	require.NoError(t, err)
	assert.Equal(t, top.Size, missing, "everything is new there")
	pushed, err := other.PushLayoutManifest(ctx, l, l.Manifests[0], "envd/projects/t/q")
	require.NoError(t, err)
	assert.Equal(t, top.Digest, pushed.Digest)
	again, err := other.MissingBytes(ctx, "envd/projects/t/q", l.Manifests[0])
	require.NoError(t, err)
	assert.Equal(t, int64(len(l.Manifests[0].Raw)), again, "only the manifest is counted once its blobs are there")

	// Refusals: a byte of a layer changed, a blob missing, no manifest.
	corrupt := func(t *testing.T, edit func(name string, body []byte) ([]byte, bool)) {
		t.Helper()
		var out bytes.Buffer
		tw := tar.NewWriter(&out)
		tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			body, err := io.ReadAll(tr)
			require.NoError(t, err)
			body, keep := edit(h.Name, body)
			if !keep {
				continue
			}
			h.Size = int64(len(body))
			require.NoError(t, tw.WriteHeader(h))
			_, err = tw.Write(body)
			require.NoError(t, err)
		}
		require.NoError(t, tw.Close())
		p := filepath.Join(t.TempDir(), "bad.tar")
		require.NoError(t, os.WriteFile(p, out.Bytes(), 0o600))
		_, err := ReadLayout(p, t.TempDir())
		require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		assert.Equal(t, map[string]any{"reason": "archive_corrupt"}, errdefs.Details(err))
	}
	layer := "blobs/sha256/" + top.Layers[1].Digest[len("sha256:"):]
	t.Run("a layer changed", func(t *testing.T) {
		corrupt(t, func(name string, body []byte) ([]byte, bool) {
			if name == layer {
				body[len(body)/2] ^= 1
			}
			return body, true
		})
	})
	t.Run("a layer missing", func(t *testing.T) {
		corrupt(t, func(name string, body []byte) ([]byte, bool) { return body, name != layer })
	})
	t.Run("an index without manifests", func(t *testing.T) {
		corrupt(t, func(name string, body []byte) ([]byte, bool) {
			if name == "index.json" {
				body, _ = json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{}})
			}
			return body, true
		})
	})
}
