package stargz

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/containerd/v2/pkg/reference"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
)

func TestCredentialsFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), credentialsFileName)
	node := registry.Credential{User: "envd-node", Password: "pw:with:colons"}
	require.NoError(t, WriteCredentials(path, map[string]registry.Credential{
		"127.0.0.1:5000": node, "10.0.0.1:443": {User: "other", Password: "x"},
	}))
	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	cfg := Config{CredentialsFile: path}
	tests := []struct {
		name, host, user, pass string
	}{
		{"listed host", "127.0.0.1:5000", node.User, node.Password},
		{"another listed host", "10.0.0.1:443", "other", "x"},
		{"unlisted host is anonymous", "127.0.0.1:5001", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, p, err := cfg.credentials(tt.host, refSpec(t))
			require.NoError(t, err)
			assert.Equal(t, tt.user, u)
			assert.Equal(t, tt.pass, p)
		})
	}

	t.Run("no file is anonymous", func(t *testing.T) {
		u, p, err := Config{CredentialsFile: filepath.Join(t.TempDir(), "none")}.credentials("127.0.0.1:5000", refSpec(t))
		require.NoError(t, err)
		assert.Empty(t, u+p)
	})
	t.Run("a file others can read is refused", func(t *testing.T) {
		require.NoError(t, os.Chmod(path, 0o644))
		_, _, err := cfg.credentials("127.0.0.1:5000", refSpec(t))
		assert.ErrorIs(t, err, errdefs.ErrPermissionDenied)
	})
	t.Run("bad credentials are refused before they are written", func(t *testing.T) {
		o := startOptions{creds: map[string]registry.Credential{}}
		for _, bad := range []registry.Credential{{User: "a b", Password: "p"}, {User: "u"}, {User: "u", Password: "p\nq"}} {
			assert.ErrorIs(t, WithRegistryCredential("h:1", bad)(&o), errdefs.ErrInvalidArgument)
		}
		assert.ErrorIs(t, WithRegistryCredential("h 1", node)(&o), errdefs.ErrInvalidArgument)
		assert.Empty(t, o.creds)
	})
}

func refSpec(t *testing.T) reference.Spec {
	t.Helper()
	s, err := reference.Parse("127.0.0.1:5000/envd/images/x:latest")
	require.NoError(t, err)
	return s
}
