package atomicfile

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	require.NoError(t, Write(path, []byte("one"), 0o600))
	require.NoError(t, Write(path, []byte("two"), 0o640))
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "two", string(b))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temp file left beside it")

	assert.Error(t, Write(filepath.Join(dir, "missing", "f"), []byte("x"), 0o600))
	b, err = os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, "two", string(b), "a failed write touches nothing")
}
