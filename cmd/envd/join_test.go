package main

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/envd/node"
)

// envd serve --join URL --token T takes the database and registry from
// the node at URL, once per token, and keeps them for its restarts.
func TestServeJoin(t *testing.T) {
	for _, name := range []string{"ENVD_JOIN", "ENVD_JOIN_TOKEN", "ENVD_JOIN_CA", "ENVD_DATABASE_URL", "ENVD_REGISTRY", "ENVD_LEASE"} {
		t.Setenv(name, "")
	}
	h, err := api.New(apitest.New().Parts())
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	config := func(args ...string) (node.Config, error) {
		f := &flags{}
		cmd := &cobra.Command{Use: "serve"}
		f.register(cmd, true)
		require.NoError(t, cmd.ParseFlags(args))
		return f.config()
	}

	dir := t.TempDir()
	cfg, err := config("--data-dir", dir, "--join", srv.URL, "--token", apitest.JoinToken)
	require.NoError(t, err)
	assert.Equal(t, "postgres://envd:pw@db/envd", cfg.DSN)
	assert.Equal(t, "registry:5000", cfg.Registry)
	cred, err := os.ReadFile(cfg.RegistryCredentialFile)
	require.NoError(t, err)
	assert.Equal(t, "envd-node:secret\n", string(cred))
	for _, f := range []string{cfg.RegistryCredentialFile, filepath.Join(dir, joinFile)} {
		st, err := os.Stat(f)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
	}

	// A restart with the same flags: the token is spent, the data dir
	// remembers the answer.
	again, err := config("--data-dir", dir, "--join", srv.URL, "--token", apitest.JoinToken)
	require.NoError(t, err)
	assert.Equal(t, cfg.DSN, again.DSN)

	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"used token", []string{"--join", srv.URL, "--token", apitest.JoinToken}, "join_token_invalid"},
		{"unknown token", []string{"--join", srv.URL, "--token", "envdjoin_other"}, "join_token_invalid"},
		{"no token", []string{"--join", srv.URL}, "--join needs --token"},
		{"token alone", []string{"--token", "x"}, "--token is the join token of --join"},
		{"database too", []string{"--join", srv.URL, "--token", "x", "--database", "postgres://x"}, "do not give --database"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := config(append([]string{"--data-dir", t.TempDir()}, tt.args...)...)
			assert.ErrorContains(t, err, tt.wantErr)
		})
	}
}
