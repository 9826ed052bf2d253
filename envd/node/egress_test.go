package node

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// TestEgressCA: the node's egress CA is made once in the data dir, kept
// private (0600) and read back the same at the next start; a named file
// must exist and hold a CA; an extra upstream bundle must hold a
// certificate.
func TestEgressCA(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca, err := egressCA(dir, "")
	require.NoError(t, err)
	fi, err := os.Stat(filepath.Join(dir, "egress-ca.pem"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the file holds the CA's key")
	again, err := egressCA(dir, "")
	require.NoError(t, err)
	assert.Equal(t, ca.CertPEM(), again.CertPEM(), "the same CA at the next start")

	_, err = egressCA(dir, filepath.Join(dir, "missing.pem"))
	assert.Error(t, err, "a named file is not made")
	bad := filepath.Join(dir, "bad.pem")
	require.NoError(t, os.WriteFile(bad, ca.CertPEM(), 0o600))
	_, err = egressCA(dir, bad)
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "a certificate without its key")

	_, err = upstreamRoots(bad)
	assert.NoError(t, err)
	empty := filepath.Join(dir, "empty.pem")
	require.NoError(t, os.WriteFile(empty, []byte("no certificate\n"), 0o600))
	_, err = upstreamRoots(empty)
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}
