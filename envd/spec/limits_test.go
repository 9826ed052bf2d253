package spec

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

func TestEffectiveLimitsRules(t *testing.T) {
	def := types.Limits{MemoryBytes: 4 << 30, Pids: 4096, CPUWeight: 100}
	maxima := versions.LimitMaxima{MemoryBytes: 2 << 30, Pids: 1024, CPUs: 2}
	for _, tc := range []struct {
		name string
		proj *types.Limits
		want types.Limits
	}{
		{"defaults cut to the maxima, unset under a maximum becomes it", nil,
			types.Limits{MemoryBytes: 2 << 30, Pids: 1024, CPUs: 2, CPUWeight: 100}},
		{"project values within the maxima win", &types.Limits{MemoryBytes: 1 << 30, CPUs: 0.5, IOWeight: 200, AllowPrivilegeEscalation: true},
			types.Limits{MemoryBytes: 1 << 30, Pids: 1024, CPUs: 0.5, CPUWeight: 100, IOWeight: 200, AllowPrivilegeEscalation: true}},
		{"a project value above a lowered maximum is cut at start", &types.Limits{Pids: 5000},
			types.Limits{MemoryBytes: 2 << 30, Pids: 1024, CPUs: 2, CPUWeight: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := def
			if tc.proj != nil {
				l = Over(l, *tc.proj)
			}
			assert.Equal(t, tc.want, CapTo(l, maxima))
		})
	}
}

func TestCheckMaxima(t *testing.T) {
	maxima := versions.LimitMaxima{MemoryBytes: 2 << 30, Pids: 1024, CPUs: 2, DiskBytes: 10 << 30}
	for _, tc := range []struct {
		name  string
		l     types.Limits
		quota string
	}{
		{"within", types.Limits{MemoryBytes: 2 << 30, Pids: 1024, CPUs: 2, DiskBytes: 10 << 30}, ""},
		{"memory", types.Limits{MemoryBytes: 3 << 30}, "memory_bytes"},
		{"pids", types.Limits{Pids: 1025}, "pids"},
		{"cpus", types.Limits{CPUs: 2.5}, "cpus"},
		{"disk", types.Limits{DiskBytes: 11 << 30}, "disk_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckMaxima(tc.l, maxima)
			if tc.quota == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, errdefs.ErrQuotaExceeded)
			assert.Equal(t, tc.quota, errdefs.Details(err)["quota"])
		})
	}
	assert.NoError(t, CheckMaxima(types.Limits{MemoryBytes: 1 << 40}, versions.LimitMaxima{}), "no maxima, no refusal")
}
