package sshd_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/envd-dev/envd/sshd"
)

// The host key is made once (ed25519, 0600) and the same at every start
// after; a key file others may read is refused.
func TestHostKeyPersists(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ssh_host_ed25519_key")
	first, err := sshd.LoadOrCreateHostKey(path)
	require.NoError(t, err)
	assert.Equal(t, ssh.KeyAlgoED25519, first.PublicKey().Type())
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	again, err := sshd.LoadOrCreateHostKey(path)
	require.NoError(t, err)
	assert.Equal(t, ssh.FingerprintSHA256(first.PublicKey()), ssh.FingerprintSHA256(again.PublicKey()))

	info := sshd.HostKeyInfo("127.0.0.1:2222", again.PublicKey())
	assert.Equal(t, ssh.FingerprintSHA256(first.PublicKey()), info.HostKeyFingerprint)
	parsed, _, _, _, err := ssh.ParseAuthorizedKey([]byte(info.HostKey))
	require.NoError(t, err)
	assert.Equal(t, info.HostKeyFingerprint, ssh.FingerprintSHA256(parsed))

	require.NoError(t, os.Chmod(path, 0o644))
	_, err = sshd.LoadOrCreateHostKey(path)
	assert.ErrorContains(t, err, "chmod 600")
}
