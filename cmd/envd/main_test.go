package main

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/node"
)

// The node a command starts: without flags or variables it is
// node.DefaultConfig, a variable overrides a default, a flag overrides a
// variable, and a bad value is an error naming it.
func TestFlagsConfig(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "ENVD_") {
			t.Setenv(name, "") // env treats empty as unset
		}
	}
	withTTL := func(ttl time.Duration) node.Config {
		c := node.DefaultConfig()
		c.DefaultTTL = ttl
		return c
	}
	tests := []struct {
		name    string
		cmd     string
		env     map[string]string
		args    []string
		want    node.Config
		wantErr string
	}{
		{name: "up defaults", cmd: "up", want: node.DefaultConfig()},
		{name: "serve defaults", cmd: "serve", want: node.DefaultConfig()},
		{name: "variable", cmd: "up", env: map[string]string{"ENVD_DEFAULT_TTL": "2h"}, want: withTTL(2 * time.Hour)},
		{name: "flag over variable", cmd: "up", env: map[string]string{"ENVD_DEFAULT_TTL": "2h"}, args: []string{"--default-ttl", "3h"}, want: withTTL(3 * time.Hour)},
		{name: "limits", cmd: "serve", args: []string{"--default-disk", "", "--default-pids", "0", "--default-memory", "1G", "--namespace", "other", "--max-saves-per-tenant", "-1"},
			want: func() node.Config {
				c := node.DefaultConfig()
				c.DefaultLimits = types.Limits{MemoryBytes: 1 << 30}
				c.Namespace = "other"
				c.Limits.Saves = -1
				return c
			}()},
		{name: "bad duration variable", cmd: "up", env: map[string]string{"ENVD_MAX_TTL": "soon"}, wantErr: `ENVD_MAX_TTL="soon": not a duration`},
		{name: "bad integer variable", cmd: "up", env: map[string]string{"ENVD_MAX_EXEC_PER_TENANT": "many"}, wantErr: `ENVD_MAX_EXEC_PER_TENANT="many": not an integer`},
		{name: "bad size", cmd: "up", args: []string{"--default-disk", "big"}, wantErr: "--default-disk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			f := &flags{}
			cmd := &cobra.Command{Use: tt.cmd}
			f.register(cmd, tt.cmd == "serve")
			require.NoError(t, cmd.ParseFlags(tt.args))
			got, err := f.config()
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}
