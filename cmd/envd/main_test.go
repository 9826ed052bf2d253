package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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
// node.DefaultConfig, a config file overrides a default, a variable
// overrides the file, a flag overrides a variable, and a bad value or an
// unknown key is an error naming it.
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
		file    string // a config file's content, given with --config
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
		{name: "dense defaults", cmd: "up", args: nil,
			want: func() node.Config {
				c := node.DefaultConfig()
				// Every instance gets a memory limit unless its project sets one.
				require.Equal(t, int64(2<<30), c.DefaultLimits.MemoryBytes)
				require.Equal(t, 50.0, c.DiskOvercommit)
				require.Equal(t, 10.0, c.MemoryOvercommit)
				return c
			}()},
		{name: "density flags", cmd: "up", args: []string{"--disk-overcommit", "4", "--memory-overcommit", "1.5", "--disk-reserve", "20G", "--default-memory", ""},
			want: func() node.Config {
				c := node.DefaultConfig()
				c.DiskOvercommit, c.MemoryOvercommit, c.DiskReserveBytes = 4, 1.5, 20<<30
				c.DefaultLimits.MemoryBytes = 0
				return c
			}()},
		{name: "overcommit below 1", cmd: "up", args: []string{"--disk-overcommit", "0.5"}, wantErr: "--disk-overcommit"},
		{name: "a shim per instance", cmd: "up", args: []string{"--shim-group-size", "1"},
			want: func() node.Config {
				c := node.DefaultConfig()
				c.ShimGroupSize = 1
				return c
			}()},
		{name: "shim group size 0", cmd: "up", args: []string{"--shim-group-size", "0"}, wantErr: "--shim-group-size"},
		{name: "config file", cmd: "serve", file: "default-ttl: 5h\nlisten: 0.0.0.0:7443\ninstance-deny: [10.9.0.0/16, other:7443]\nuserns: true\nmax-saves-per-tenant: -1\ndefault-disk: 20G\nshutdown-grace: 1m\nnamespace:\n",
			want: func() node.Config {
				c := withTTL(5 * time.Hour)
				c.Listen = "0.0.0.0:7443"
				c.InstanceDeny = []string{"10.9.0.0/16", "other:7443"}
				c.UserNS = true
				c.Limits.Saves = -1
				c.DefaultLimits.DiskBytes = 20 << 30
				c.ShutdownGrace = time.Minute
				c.Namespace = ""
				return c
			}()},
		{name: "variable over config file", cmd: "up", env: map[string]string{"ENVD_DEFAULT_TTL": "2h"}, file: "default-ttl: 5h\n", want: withTTL(2 * time.Hour)},
		{name: "flag over variable over config file", cmd: "up", env: map[string]string{"ENVD_DEFAULT_TTL": "2h"}, args: []string{"--default-ttl", "3h"}, file: "default-ttl: 5h\n", want: withTTL(3 * time.Hour)},
		{name: "config file from ENVD_CONFIG", cmd: "up", env: map[string]string{"ENVD_CONFIG": "FILE"}, file: "default-ttl: 6h\n", want: withTTL(6 * time.Hour)},
		{name: "TLS and grace", cmd: "up", env: map[string]string{"ENVD_TLS_KEY": "/k.pem"}, args: []string{"--tls-cert", "/c.pem", "--shutdown-grace", "5s"},
			want: func() node.Config {
				c := node.DefaultConfig()
				c.TLSCert, c.TLSKey, c.ShutdownGrace = "/c.pem", "/k.pem", 5*time.Second
				return c
			}()},
		{name: "no grace", cmd: "up", args: []string{"--shutdown-grace", "0"},
			want: func() node.Config {
				c := node.DefaultConfig()
				c.ShutdownGrace = -1
				return c
			}()},
		{name: "unknown key", cmd: "up", file: "default-ttl: 5h\nlissten: :7443\n", wantErr: `unknown key "lissten"`},
		{name: "serve's key in up's file", cmd: "up", file: "database: postgres://x\n", wantErr: `unknown key "database"`},
		{name: "bad value", cmd: "up", file: "default-ttl: 3600\n", wantErr: `key "default-ttl"`},
		{name: "a map", cmd: "up", file: "listen: {host: x}\n", wantErr: `key "listen": map`},
		{name: "not YAML", cmd: "up", file: "listen: [\n", wantErr: "config file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				path := filepath.Join(t.TempDir(), "envd.yaml")
				require.NoError(t, os.WriteFile(path, []byte(tt.file), 0o600))
				if tt.env["ENVD_CONFIG"] == "FILE" {
					tt.env["ENVD_CONFIG"] = path
				} else {
					args = append(args, "--config", path)
				}
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			f := &flags{}
			cmd := &cobra.Command{Use: tt.cmd}
			f.register(cmd, tt.cmd == "serve")
			require.NoError(t, cmd.ParseFlags(args))
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

// --log-format (or ENVD_LOG_FORMAT) picks how the node logs: text by
// default, JSON objects a line, anything else an error before the node
// starts.
func TestLogFormat(t *testing.T) {
	t.Setenv("ENVD_LOG_FORMAT", "")
	tests := []struct {
		name    string
		env     string
		args    []string
		want    string // the first bytes of a line
		wantErr string
	}{
		{name: "default", want: "time="},
		{name: "flag json", args: []string{"--log-format", "json"}, want: `{"time":`},
		{name: "variable json", env: "json", want: `{"time":`},
		{name: "flag over variable", env: "json", args: []string{"--log-format", "text"}, want: "time="},
		{name: "unknown", args: []string{"--log-format", "xml"}, wantErr: `log format "xml": must be text or json`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("ENVD_LOG_FORMAT", tt.env)
			f := &flags{}
			cmd := &cobra.Command{Use: "serve"}
			f.register(cmd, true)
			require.NoError(t, cmd.ParseFlags(tt.args))
			cfg, err := f.config()
			require.NoError(t, err)
			var buf bytes.Buffer
			log, err := node.NewLogger(&buf, cfg.LogFormat)
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			log.Info("http request", "status", 200)
			log.Debug("below the level")
			assert.True(t, strings.HasPrefix(buf.String(), tt.want), buf.String())
			assert.Equal(t, 1, strings.Count(buf.String(), "\n"), "Info and above only: %s", buf.String())
			if tt.want[0] == '{' {
				var rec map[string]any
				require.NoError(t, json.Unmarshal(buf.Bytes(), &rec))
				assert.Equal(t, "http request", rec["msg"])
				assert.EqualValues(t, 200, rec["status"])
			}
		})
	}
}
