package workspace

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOwners(t *testing.T) {
	t.Parallel()
	m, err := NewManager(t.TempDir())
	require.NoError(t, err)
	got, err := m.Owners(context.Background())
	require.NoError(t, err)
	assert.Empty(t, got)
	for _, v := range []string{"t1/web/work", "t1/web/tools", "t2/api/data"} {
		dir := filepath.Join(m.Root(), v)
		require.NoError(t, os.MkdirAll(filepath.Join(dir, mountName), 0o700))
		require.NoError(t, os.WriteFile(filepath.Join(dir, imageName), nil, 0o600))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(m.Root(), "t3/empty"), 0o700)) // no volume in it
	// A file named like an image inside a volume's mounted file system is
	// the user's, not a volume.
	inner := filepath.Join(m.Root(), "t1/web/work", mountName, "x")
	require.NoError(t, os.MkdirAll(inner, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(inner, imageName), nil, 0o600))
	got, err = m.Owners(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"t1/web", "t2/api"}, got)
}
