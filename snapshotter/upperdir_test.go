package snapshotter

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

func TestUpperDir(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		mounts  []mount.Mount
		want    string
		wantErr error
	}{
		{
			name: "overlay",
			mounts: []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{
				"index=off", "workdir=/s/1/work", "upperdir=/s/1/fs", "lowerdir=/s/0/fs"}}},
			want: "/s/1/fs",
		},
		{
			name: "comma-joined fragment",
			mounts: []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{
				"lowerdir=/l,upperdir=/s/2/fs,workdir=/s/2/work"}}},
			want: "/s/2/fs",
		},
		{
			name: "escaped comma in path",
			mounts: []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{
				`upperdir=/s/a\,b/fs,workdir=/w`}}},
			want: "/s/a,b/fs",
		},
		{
			name: "type with mount manager modifiers",
			mounts: []mount.Mount{{Type: "mkdir/overlay", Source: "overlay", Options: []string{
				"upperdir=/s/3/fs", "lowerdir=/l"}}},
			want: "/s/3/fs",
		},
		{
			name:   "bind mount of a snapshot without parent",
			mounts: []mount.Mount{{Type: "bind", Source: "/s/4/fs", Options: []string{"rbind", "rw"}}},
			want:   "/s/4/fs",
		},
		{
			name:   "bind by option",
			mounts: []mount.Mount{{Type: "none", Source: "/s/5/fs", Options: []string{"rw", "rbind"}}},
			want:   "/s/5/fs",
		},
		{
			name:    "read-only view",
			mounts:  []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{"lowerdir=/a:/b"}}},
			wantErr: errdefs.ErrInvalidArgument,
		},
		{
			name:    "templated upperdir",
			mounts:  []mount.Mount{{Type: "format/overlay", Options: []string{"upperdir={{ mount 0 }}/upper"}}},
			wantErr: errdefs.ErrInvalidArgument,
		},
		{name: "no mounts", wantErr: errdefs.ErrInvalidArgument},
		{
			name:    "unknown type",
			mounts:  []mount.Mount{{Type: "erofs", Source: "/dev/loop0"}},
			wantErr: errdefs.ErrInvalidArgument,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := UpperDir(tc.mounts)
			if tc.wantErr != nil {
				assert.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestSpoolErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()

	_, err := Spool(ctx, filepath.Join(dir, "missing"), nil, SpoolOptions{})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	_, err = Spool(ctx, dir, nil, SpoolOptions{Excludes: []string{"relative/path"}})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)

	_, err = Spool(ctx, dir, nil, SpoolOptions{Excludes: []string{"/"}})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644))
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = Spool(canceled, dir, &countingWriter{w: discard{}}, SpoolOptions{})
	assert.ErrorIs(t, err, context.Canceled)
}

func TestEncodeErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	tarPath := filepath.Join(dir, "spool.tar")
	require.NoError(t, os.WriteFile(tarPath, make([]byte, 1024), 0o644))

	_, err := Encode(ctx, tarPath, dir, EncodeOptions{Compression: "lz4"})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	_, err = Encode(ctx, tarPath, dir, EncodeOptions{Compression: Gzip, Level: 12})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	_, err = Encode(ctx, filepath.Join(dir, "missing.tar"), dir, EncodeOptions{Compression: Zstd})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []Compression{Zstd, Gzip, Estargz} {
		_, err = Encode(canceled, tarPath, dir, EncodeOptions{Compression: c})
		assert.ErrorIs(t, err, context.Canceled, c)
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "failed encodes leave no files behind")
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
