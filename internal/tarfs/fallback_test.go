package tarfs

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// TestOlderKernelFallbacks runs the paths taken on kernels without the
// *xattrat calls (before 6.13) and without openat2 (before 5.6): the same
// xattrs are read, and escapes are still refused.
func TestOlderKernelFallbacks(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), nil, 0o644))
	require.NoError(t, unix.Setxattr(filepath.Join(dir, "f"), "user.a", []byte("1"), 0))
	require.NoError(t, unix.Setxattr(dir, "user.root", []byte("r"), 0))
	d, err := OpenDir(dir)
	require.NoError(t, err)
	defer d.Close()
	read := func() [2]map[string]string {
		f, err := d.Xattrs("f")
		require.NoError(t, err)
		r, err := d.Xattrs("")
		require.NoError(t, err)
		return [2]map[string]string{f, r}
	}
	want := [2]map[string]string{{"user.a": "1"}, {"user.root": "r"}}
	assert.Equal(t, want, read())

	noXattrat.Store(true)
	noOpenat2.Store(true)
	t.Cleanup(func() { noXattrat.Store(false); noOpenat2.Store(false) })
	assert.Equal(t, want, read())

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "in/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "alias", Typeflag: tar.TypeSymlink, Linkname: "in"},
		{Name: "out", Typeflag: tar.TypeSymlink, Linkname: t.TempDir()},
		{Name: "in/f", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "out/escaped", Typeflag: tar.TypeReg, Mode: 0o644},
	} {
		h.Uid, h.Gid = os.Getuid(), os.Getgid()
		require.NoError(t, tw.WriteHeader(h))
	}
	require.NoError(t, tw.Close())
	n, err := Extract(context.Background(), t.TempDir(), &buf, ExtractOptions{})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	assert.Equal(t, 4, n, "everything before the escape")
}
