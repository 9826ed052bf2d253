package snapshotter

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEstargzDiffID checks the DiffID that Encode computes without
// decompressing against a decompression of the blob (checkLayer), for
// several worker counts and with prioritized files.
func TestEstargzDiffID(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	upper := filepath.Join(dir, "upper")
	for i, name := range []string{"a/one.txt", "a/b/two.txt", "c/three.bin", "d/four.txt", "e/five.txt"} {
		p := filepath.Join(upper, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		data := make([]byte, (i+1)*700_000) // several parts, chunks of 4 MiB not reached
		for j := range data {
			data[j] = byte(j*(i+7)) ^ byte(j>>9)
		}
		require.NoError(t, os.WriteFile(p, data, 0o644))
	}
	spoolPath := spoolTree(t, upper, dir)

	var digests []string
	for _, tc := range []struct {
		name string
		opts EncodeOptions
	}{
		{"1 worker", EncodeOptions{Workers: 1}},
		{"2 workers", EncodeOptions{Workers: 2}},
		{"5 workers", EncodeOptions{Workers: 5}},
		{"prioritized", EncodeOptions{Workers: 3, PrioritizedFiles: []string{"/d/four.txt", "/a/one.txt"}}},
		{"first prioritized missing", EncodeOptions{Workers: 3, PrioritizedFiles: []string{"/not/there", "/e/five.txt"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			outDir := t.TempDir()
			tc.opts.Compression = Estargz
			layer, err := Encode(ctx, spoolPath, outDir, tc.opts)
			require.NoError(t, err)
			checkLayer(t, layer, Estargz, spoolPath) // decompresses and compares the DiffID
			if len(tc.opts.PrioritizedFiles) == 0 {
				digests = append(digests, layer.Digest.String())
			}
		})
	}
	// The blob does not depend on the number of workers.
	require.Len(t, digests, 3)
	assert.Equal(t, digests[0], digests[1])
	assert.Equal(t, digests[0], digests[2])
}
