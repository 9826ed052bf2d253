package main

import (
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/envd/node"
)

// The SSH endpoint is on by default (a free loopback port), moved by
// --ssh-listen or ENVD_SSH_LISTEN, and off with an empty value of either.
func TestSSHListen(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"default", nil, nil, node.DefaultSSHListen},
		{"flag", []string{"--ssh-listen", "0.0.0.0:2222"}, nil, "0.0.0.0:2222"},
		{"variable", nil, map[string]string{"ENVD_SSH_LISTEN": "127.0.0.1:2222"}, "127.0.0.1:2222"},
		{"off by flag", []string{"--ssh-listen="}, nil, ""},
		{"off by variable", nil, map[string]string{"ENVD_SSH_LISTEN": ""}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			f := &flags{}
			cmd := &cobra.Command{Use: "up"}
			f.register(cmd, false)
			require.NoError(t, cmd.ParseFlags(tt.args))
			cfg, err := f.config()
			require.NoError(t, err)
			assert.Equal(t, tt.want, cfg.SSHListen)
		})
	}
}
