// Package spec reads and writes what a project declares beyond its base
// (its volumes and resource limits, stored as the project's spec
// document), what an instance records of how it was started (its limits),
// and the rules that turn node defaults, project limits and a tenant's
// maxima into an instance's limits. It needs only the wire types and the
// store's record types.
package spec

import (
	"encoding/json"
	"fmt"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// Project is a project's spec document (versions.Project.Spec).
type Project struct {
	Volumes []types.Volume `json:"volumes,omitempty"`
	Limits  *types.Limits  `json:"limits,omitempty"`
}

// Parse reads a project's spec document; an empty one declares nothing.
func Parse(raw json.RawMessage) (Project, error) {
	var ps Project
	if len(raw) == 0 {
		return ps, nil
	}
	if err := json.Unmarshal(raw, &ps); err != nil {
		return ps, fmt.Errorf("project spec: %w", err)
	}
	return ps, nil
}

// VolumeBytes is the declared size of vs.
func VolumeBytes(vs []types.Volume) int64 {
	var n int64
	for _, v := range vs {
		n += v.SizeBytes
	}
	return n
}

// instance is what an instance row records of how it was started
// (versions.Instance.Spec).
type instance struct {
	Limits *types.Limits `json:"limits,omitempty"`
}

// InstanceLimits are the limits an instance was started with; nil when
// it recorded none.
func InstanceLimits(raw json.RawMessage) *types.Limits {
	var is instance
	if len(raw) == 0 || json.Unmarshal(raw, &is) != nil {
		return nil
	}
	return is.Limits
}

// MarshalInstance is the spec an instance started with limits l records.
func MarshalInstance(l types.Limits) json.RawMessage {
	b, _ := json.Marshal(instance{Limits: &l})
	return b
}

// RuntimeLimits is l in the runtime's terms.
func RuntimeLimits(l types.Limits) runtime.Limits {
	return runtime.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUWeight: l.CPUWeight, CPUQuota: l.CPUs,
		IOWeight: l.IOWeight, DiskBytes: l.DiskBytes}
}

// ValidateLimits refuses values the kernel cannot take.
func ValidateLimits(l types.Limits) error { return RuntimeLimits(l).Validate() }

// Over is l with every field set in o taken from o.
func Over(l, o types.Limits) types.Limits {
	set := func(dst *int64, v int64) {
		if v != 0 {
			*dst = v
		}
	}
	set(&l.MemoryBytes, o.MemoryBytes)
	set(&l.Pids, o.Pids)
	set(&l.DiskBytes, o.DiskBytes)
	if o.CPUs != 0 {
		l.CPUs = o.CPUs
	}
	if o.CPUWeight != 0 {
		l.CPUWeight = o.CPUWeight
	}
	if o.IOWeight != 0 {
		l.IOWeight = o.IOWeight
	}
	l.AllowPrivilegeEscalation = o.AllowPrivilegeEscalation
	return l
}

// CheckMaxima refuses a project's limits above the tenant's maxima:
// quota_exceeded (507) naming the limit.
func CheckMaxima(l types.Limits, m versions.LimitMaxima) error {
	for _, c := range []struct {
		what     string
		max, ask float64
	}{
		{"memory_bytes", float64(m.MemoryBytes), float64(l.MemoryBytes)},
		{"pids", float64(m.Pids), float64(l.Pids)},
		{"cpus", m.CPUs, l.CPUs},
		{"disk_bytes", float64(m.DiskBytes), float64(l.DiskBytes)},
	} {
		if c.max > 0 && c.ask > c.max {
			return versions.QuotaError(c.what, int64(c.max), 0, int64(c.ask))
		}
	}
	return nil
}

// CapTo cuts every limit to the tenant's maxima; an unset limit under a
// maximum becomes the maximum.
func CapTo(l types.Limits, m versions.LimitMaxima) types.Limits {
	cut := func(v *int64, max int64) {
		if max > 0 && (*v == 0 || *v > max) {
			*v = max
		}
	}
	cut(&l.MemoryBytes, m.MemoryBytes)
	cut(&l.Pids, m.Pids)
	cut(&l.DiskBytes, m.DiskBytes)
	if m.CPUs > 0 && (l.CPUs == 0 || l.CPUs > m.CPUs) {
		l.CPUs = m.CPUs
	}
	return l
}

// Effective are the limits of a new instance: the node's defaults, with
// the project's limits (nil = none) over them, cut to the tenant's maxima.
// A maximum lowered after the project's limits were set cuts them here
// rather than refusing the start.
func Effective(defaults types.Limits, proj *types.Limits, m versions.LimitMaxima) types.Limits {
	l := defaults
	if proj != nil {
		l = Over(l, *proj)
	}
	return CapTo(l, m)
}
