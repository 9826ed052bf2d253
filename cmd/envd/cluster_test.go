package main

import (
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
)

// The node's membership flags and variables: labels, capacity, lease,
// sweep interval, placement; bad values are refused before the node starts.
func TestClusterFlags(t *testing.T) {
	for _, name := range []string{"ENVD_LABELS", "ENVD_LEASE", "ENVD_SWEEP_INTERVAL", "ENVD_CAPACITY_CPUS", "ENVD_CAPACITY_MEMORY",
		"ENVD_CAPACITY_DISK", "ENVD_INSTANCE_SLOTS", "ENVD_PLACEMENT"} {
		t.Setenv(name, "")
	}
	tests := []struct {
		name      string
		env       map[string]string
		args      []string
		labels    map[string]string
		capacity  types.NodeCapacity
		lease     time.Duration
		placement string
		wantErr   string
	}{
		{name: "defaults", lease: envd.DefaultLease, placement: envd.PlacementSpread},
		{name: "flags", args: []string{"--label", "zone=a", "--label", "gpu=no", "--capacity-cpus", "1.5", "--capacity-memory", "2G",
			"--capacity-disk", "10G", "--instance-slots", "7", "--lease", "9s", "--placement", "local"},
			labels: map[string]string{"zone": "a", "gpu": "no"}, capacity: types.NodeCapacity{CPUs: 1.5, MemoryBytes: 2 << 30, DiskBytes: 10 << 30, InstanceSlots: 7},
			lease: 9 * time.Second, placement: envd.PlacementLocal},
		{name: "variables", env: map[string]string{"ENVD_LABELS": "zone=b,rack=r1", "ENVD_LEASE": "30s"},
			labels: map[string]string{"zone": "b", "rack": "r1"}, lease: 30 * time.Second, placement: envd.PlacementSpread},
		{name: "label without value", args: []string{"--label", "zone"}, wantErr: "--label"},
		{name: "bad cpus", args: []string{"--capacity-cpus", "many"}, wantErr: "--capacity-cpus"},
		{name: "bad memory", args: []string{"--capacity-memory", "lots"}, wantErr: "--capacity-memory"},
		{name: "negative slots", args: []string{"--instance-slots", "-1"}, wantErr: "--instance-slots"},
		{name: "bad placement", args: []string{"--placement", "random"}, wantErr: "--placement"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			f := &flags{}
			cmd := &cobra.Command{Use: "serve"}
			f.register(cmd, true)
			require.NoError(t, cmd.ParseFlags(tt.args))
			cfg, err := f.config()
			if tt.wantErr != "" {
				assert.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.labels, cfg.Labels)
			assert.Equal(t, tt.capacity, cfg.Capacity)
			assert.Equal(t, tt.lease, cfg.Lease)
			assert.Equal(t, tt.placement, cfg.Placement)
		})
	}
}
