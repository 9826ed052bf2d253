package cluster

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/envd-dev/envd/versions"
)

// What `envctl show` says of an instance failed with its node: what was
// lost and where to start again.
func TestLostMessage(t *testing.T) {
	at := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	n := versions.Member{Name: "c", LeaseExpiresAt: at}
	tests := []struct {
		name      string
		in        versions.Instance
		cp        *versions.InstanceCheckpoint
		says, not []string
	}{
		{"nothing saved", versions.Instance{Project: "p", Version: 1, Retain: true}, nil,
			[]string{"retained writable layer (unsaved since version 1 it started from)", "volumes stay with the node"}, []string{"--checkpoint"}},
		{"a periodic version", versions.Instance{Project: "p", Version: 1, Retain: true}, &versions.InstanceCheckpoint{Version: 3, At: at},
			[]string{"`envctl up p --version 3` starts from it", "volumes stay with the node"}, []string{"--checkpoint"}},
		{"a coordinated checkpoint", versions.Instance{Project: "p", Version: 1, Retain: true}, &versions.InstanceCheckpoint{Version: 3, At: at, Number: 2},
			[]string{"its checkpoint 2", "`envctl up p --checkpoint 2` starts from it, its volumes with it", "volumes as of checkpoint 2 are in object storage"},
			[]string{"volumes stay with the node"}},
		{"a save newer than the checkpoint", versions.Instance{Project: "p", Version: 1, LastSavedVersion: 5, Retain: true},
			&versions.InstanceCheckpoint{Version: 3, At: at, Number: 2},
			[]string{"its last save, version 5", "`envctl up p --checkpoint 2` restores them"}, []string{"volumes stay with the node"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := lostMessage(tt.in, n, tt.cp)
			for _, s := range tt.says {
				assert.Contains(t, m, s)
			}
			for _, s := range tt.not {
				assert.NotContains(t, m, s)
			}
		})
	}
}
