package nodeimage

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

func TestWriteImage(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	require.NoError(t, os.MkdirAll(filepath.Join(base, "usr", "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(base, "usr", "bin", "tool"), []byte("#!/bin/sh\necho base\n"), 0o755))
	require.NoError(t, os.Symlink("usr/bin", filepath.Join(base, "bin")))
	top := filepath.Join(dir, "top")
	require.NoError(t, os.MkdirAll(filepath.Join(top, "usr", "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(top, "usr", "bin", "tool"), []byte("#!/bin/sh\necho top\n"), 0o700))

	l1, l2 := filepath.Join(dir, "l1.tar.gz"), filepath.Join(dir, "l2.tar.gz")
	require.NoError(t, WriteLayer(base, l1))
	require.NoError(t, WriteLayer(top, l2))
	out := filepath.Join(dir, "img.tar")
	require.NoError(t, Write(Config{
		Ref: "envd.local/test:dev", Layers: []string{l1, l2},
		Entrypoint: []string{"/usr/bin/tool"}, Cmd: []string{"serve"},
		Labels: map[string]string{"k": "v"},
	}, out))

	img, err := Read(out)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "linux", cf.OS)
	assert.Equal(t, goruntime.GOARCH, cf.Architecture, "images without an architecture are dropped by platform matching")
	assert.Equal(t, []string{"/usr/bin/tool"}, cf.Config.Entrypoint)
	assert.Equal(t, []string{"serve"}, cf.Config.Cmd)
	assert.Equal(t, []string{DefaultPath}, cf.Config.Env)
	assert.Equal(t, "v", cf.Config.Labels["k"])
	layers, err := img.Layers()
	require.NoError(t, err)
	assert.Len(t, layers, 2)

	// The flattened filesystem: the top layer's file wins, modes and the
	// symlink are kept.
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	seen := map[string]*tar.Header{}
	content := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		seen[h.Name] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			require.NoError(t, err)
			content[h.Name] = string(b)
		}
	}
	require.Contains(t, seen, "usr/bin/tool")
	assert.Equal(t, "#!/bin/sh\necho top\n", content["usr/bin/tool"])
	assert.Equal(t, int64(0o700), seen["usr/bin/tool"].Mode&0o777)
	require.Contains(t, seen, "bin")
	assert.Equal(t, byte(tar.TypeSymlink), seen["bin"].Typeflag)
	assert.Equal(t, "usr/bin", seen["bin"].Linkname)
}

func TestWriteRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	layer := filepath.Join(dir, "l.tar.gz")
	require.NoError(t, WriteLayer(t.TempDir(), layer))
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no layers", Config{Ref: "envd.local/x:dev"}},
		{"bad name", Config{Ref: "UPPER CASE", Layers: []string{layer}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Write(tc.cfg, filepath.Join(dir, "out.tar"))
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			_, statErr := os.Stat(filepath.Join(dir, "out.tar"))
			assert.ErrorIs(t, statErr, os.ErrNotExist, "nothing written")
		})
	}
	t.Run("layer of a file", func(t *testing.T) {
		require.ErrorIs(t, WriteLayer(layer, filepath.Join(dir, "x.tar.gz")), errdefs.ErrInvalidArgument)
	})
}
