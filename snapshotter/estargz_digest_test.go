package snapshotter

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/stargz-snapshotter/estargz"
	digest "github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEstargzChunkedFileDigest checks the layer without whole-file digests
// (the default): a file of several chunks has no TOC digest, every other
// TOC field is what estargz writes (the layer with whole-file digests is
// Build's, TestEstargzSameAsBuild), every chunk of every file verifies
// against its chunk digest as the stargz snapshotter checks it, and the
// files read back whole.
func TestEstargzChunkedFileDigest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	upper := filepath.Join(dir, "upper")
	esgzTestTree(t, upper)
	spoolPath := spoolTree(t, upper, dir)

	open := func(whole bool) (*estargz.Reader, estargz.TOCEntryVerifier) {
		layer, err := Encode(ctx, spoolPath, t.TempDir(), EncodeOptions{Compression: Estargz, wholeFileDigests: whole})
		require.NoError(t, err)
		checkLayer(t, layer, Estargz, spoolPath) // DiffID: sha256 of the uncompressed blob
		blob, err := os.ReadFile(layer.Path)
		require.NoError(t, err)
		r, err := estargz.Open(io.NewSectionReader(bytes.NewReader(blob), 0, int64(len(blob))))
		require.NoError(t, err)
		v, err := r.VerifyTOC(digest.Digest(layer.Annotations[estargz.TOCJSONDigestAnnotation]))
		require.NoError(t, err)
		return r, v
	}
	plain, verifier := open(false)
	whole, _ := open(true)

	for _, name := range []string{"usr/lib/big.so", "usr/lib/exact.bin", "usr/bin/tool", "etc/app.conf", "etc/empty"} {
		t.Run(name, func(t *testing.T) {
			content, err := os.ReadFile(filepath.Join(upper, name))
			require.NoError(t, err)
			pe, ok := plain.Lookup(name)
			require.True(t, ok)
			we, ok := whole.Lookup(name)
			require.True(t, ok)
			chunks := (len(content) + esgzChunkSize - 1) / esgzChunkSize
			assert.Equal(t, digest.FromBytes(content).String(), we.Digest)
			if chunks > 1 {
				assert.Empty(t, pe.Digest, "no whole-file digest for a file of %d chunks", chunks)
			} else {
				assert.Equal(t, we.Digest, pe.Digest)
			}
			// Everything else as estargz writes it.
			pc, wc := *pe, *we
			pc.Digest, wc.Digest = "", ""
			assert.Equal(t, wc.Name, pc.Name)
			assert.Equal(t, wc.Offset, pc.Offset)
			assert.Equal(t, wc.ChunkDigest, pc.ChunkDigest)
			assert.Equal(t, wc.ChunkSize, pc.ChunkSize)
			assert.Equal(t, wc.Size, pc.Size)
			assert.Equal(t, wc.Mode, pc.Mode)
			assert.Equal(t, wc.Xattrs, pc.Xattrs)

			// Every chunk verifies against its digest; the file reads back.
			fr, err := plain.OpenFile(name)
			require.NoError(t, err)
			got, err := io.ReadAll(fr)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(content, got), "content read back")
			seen := 0
			for off := int64(0); off < int64(len(content)); {
				ce, ok := plain.ChunkEntryForOffset(name, off)
				require.True(t, ok, "chunk at %d", off)
				size := ce.ChunkSize
				if size == 0 {
					size = ce.Size
				}
				size = min(size, int64(len(content))-ce.ChunkOffset)
				dv, err := verifier.Verifier(ce)
				require.NoError(t, err)
				_, err = dv.Write(got[ce.ChunkOffset : ce.ChunkOffset+size])
				require.NoError(t, err)
				assert.True(t, dv.Verified(), "chunk at %d verifies", ce.ChunkOffset)
				off = ce.ChunkOffset + size
				seen++
			}
			assert.Equal(t, chunks, seen)
		})
	}
}
