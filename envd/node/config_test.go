package node

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

// Start fills a Config's zero fields from DefaultConfig, keeps what is
// given (a zero DefaultLimits stays "no limit"), names the node once, and
// a later start without external parts reaches those of the earlier one.
func TestWithDefaults(t *testing.T) {
	d := DefaultConfig()
	t.Run("zero fields", func(t *testing.T) {
		dir := t.TempDir()
		got, err := withDefaults(Config{DataDir: dir})
		require.NoError(t, err)
		assert.Equal(t, d.Listen, got.Listen)
		assert.Equal(t, d.Namespace, got.Namespace)
		assert.Equal(t, d.DefaultTTL, got.DefaultTTL)
		assert.Equal(t, types.Limits{}, got.DefaultLimits)
		assert.NotNil(t, got.Logger)
		require.NotEmpty(t, got.Node)
		again, err := withDefaults(Config{DataDir: dir})
		require.NoError(t, err)
		assert.Equal(t, got.Node, again.Node, "the node's name is kept")
	})
	t.Run("given fields", func(t *testing.T) {
		dir := t.TempDir()
		t.Chdir(dir)
		in := Config{DataDir: "data", Listen: "127.0.0.1:7000", Namespace: "other", DefaultTTL: time.Hour, Node: "n1",
			RegistryCredentialFile: "node.credential"}
		got, err := withDefaults(in)
		require.NoError(t, err)
		assert.Equal(t, filepath.Join(dir, "data"), got.DataDir)
		assert.Equal(t, filepath.Join(dir, "node.credential"), got.RegistryCredentialFile)
		assert.Equal(t, "127.0.0.1:7000", got.Listen)
		assert.Equal(t, "other", got.Namespace)
		assert.Equal(t, time.Hour, got.DefaultTTL)
		assert.Equal(t, "n1", got.Node)
	})
	t.Run("remembered parts", func(t *testing.T) {
		dir := t.TempDir()
		_, err := withDefaults(Config{DataDir: dir, DSN: "postgres://envd@192.0.2.10/envd", Registry: "192.0.2.11:5000",
			RegistryCredentialFile: "/etc/envd/node.credential", Namespace: "other"})
		require.NoError(t, err)
		got, err := withDefaults(Config{DataDir: dir})
		require.NoError(t, err)
		assert.Equal(t, "postgres://envd@192.0.2.10/envd", got.DSN)
		assert.Equal(t, "192.0.2.11:5000", got.Registry)
		assert.Equal(t, "/etc/envd/node.credential", got.RegistryCredentialFile)
		assert.Equal(t, "other", got.Namespace, "the default namespace is not a choice")
	})
}
