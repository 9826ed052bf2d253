package envd

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// runtimeLimits is l in the runtime's terms.
func runtimeLimits(l types.Limits) runtime.Limits {
	return runtime.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUWeight: l.CPUWeight, CPUQuota: l.CPUs,
		IOWeight: l.IOWeight, DiskBytes: l.DiskBytes}
}

// ValidateLimits refuses values the kernel cannot take.
func ValidateLimits(l types.Limits) error { return runtimeLimits(l).Validate() }

// overLimits is l with every field set in o taken from o.
func overLimits(l, o types.Limits) types.Limits {
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

// checkMaxima refuses a project's limits above the tenant's maxima:
// quota_exceeded (507) naming the limit.
func checkMaxima(l types.Limits, m versions.LimitMaxima) error {
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

// capTo cuts every limit to the tenant's maxima; an unset limit under a
// maximum becomes the maximum.
func capTo(l types.Limits, m versions.LimitMaxima) types.Limits {
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

// checkProjectLimits validates a project's limits and refuses them beyond
// the tenant's maxima.
func (s *Service) checkProjectLimits(ctx context.Context, tenant string, l *types.Limits) error {
	if l == nil {
		return nil
	}
	if err := ValidateLimits(*l); err != nil {
		return err
	}
	m, err := s.store.LimitMaxima(ctx, tenant)
	if err != nil {
		return err
	}
	return checkMaxima(*l, m)
}

// effectiveLimits are the limits a new instance of a project with limits
// proj gets (see Limits). A maximum lowered after the project's limits
// were set cuts them here rather than refusing the start.
func (s *Service) effectiveLimits(ctx context.Context, tenant string, proj *types.Limits) (types.Limits, error) {
	l := s.cfg.DefaultLimits
	if proj != nil {
		l = overLimits(l, *proj)
	}
	m, err := s.store.LimitMaxima(ctx, tenant)
	if err != nil {
		return types.Limits{}, err
	}
	return capTo(l, m), nil
}

// instanceSpec is what an instance row records of how it was started
// (versions.Instance.Spec).
type instanceSpec struct {
	Limits *types.Limits `json:"limits,omitempty"`
}

func instanceLimits(raw json.RawMessage) *types.Limits {
	var is instanceSpec
	if len(raw) == 0 || json.Unmarshal(raw, &is) != nil {
		return nil
	}
	return is.Limits
}

func marshalInstanceSpec(l types.Limits) json.RawMessage {
	b, _ := json.Marshal(instanceSpec{Limits: &l})
	return b
}

// SetProjectLimits replaces a project's resource limits (an empty body
// clears them: the node's defaults apply). Instances started afterwards get
// them; running ones keep theirs.
func (s *Service) SetProjectLimits(ctx context.Context, p types.Principal, project string, l types.Limits) (types.Project, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Project{}, err
	}
	if err := s.checkProjectLimits(ctx, p.Tenant, &l); err != nil {
		return types.Project{}, err
	}
	_, ps, err := s.projectSpec(ctx, p.Tenant, project)
	if err != nil {
		return types.Project{}, err
	}
	ps.Limits = &l
	if l == (types.Limits{}) {
		ps.Limits = nil
	}
	raw, err := json.Marshal(ps)
	if err != nil {
		return types.Project{}, err
	}
	proj, err := s.store.SetProjectSpec(ctx, p.Tenant, project, raw)
	if err != nil {
		return types.Project{}, err
	}
	return toProject(proj), nil
}

// setLimitMaxima stores the limit maxima of a quota.
func (s *Service) setLimitMaxima(ctx context.Context, tenant string, q types.Quota) (versions.LimitMaxima, error) {
	m := versions.LimitMaxima{MemoryBytes: q.MaxMemoryBytes, Pids: q.MaxPids, CPUs: q.MaxCPUs, DiskBytes: q.MaxDiskBytes}
	if err := s.store.SetLimitMaxima(ctx, tenant, m); err != nil {
		return versions.LimitMaxima{}, err
	}
	return s.store.LimitMaxima(ctx, tenant)
}

func withMaxima(q types.Quota, m versions.LimitMaxima) types.Quota {
	q.MaxMemoryBytes, q.MaxPids, q.MaxCPUs, q.MaxDiskBytes = m.MemoryBytes, m.Pids, m.CPUs, m.DiskBytes
	return q
}

// watchOOM turns an OOM kill reported by the runtime into an instance
// failure (reason oom_killed) when it took the instance's init; a kill of
// an exec'd process shows in that exec's result (ExecResult.OOMKilled).
func (s *Service) watchOOM() {
	w, ok := s.rt.(interface{ OnOOM(func(id string)) })
	if !ok {
		return
	}
	w.OnOOM(func(id string) {
		// The init's exit follows the OOM event: give the task a moment.
		for range 20 {
			select {
			case <-s.ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			st, err := s.rt.Status(s.ctx, id)
			if err != nil || !st.Exists || st.Task == "running" || st.Task == "paused" {
				continue
			}
			if st.OOMKilled {
				s.failOOM(s.ctx, id)
			}
			return
		}
	})
}

// failOOM marks a Running instance whose init the OOM killer took as Failed.
func (s *Service) failOOM(ctx context.Context, id string) {
	in, err := s.store.GetInstance(ctx, "", id)
	if err != nil || in.State != types.StateRunning || in.Node != s.cfg.Node {
		return
	}
	msg := "killed by the OOM killer: the instance's memory limit was reached; the writable layer is kept until removal"
	if l := instanceLimits(in.Spec); l != nil && l.MemoryBytes > 0 {
		msg = fmt.Sprintf("killed by the OOM killer at its memory limit of %d bytes; the writable layer is kept until removal", l.MemoryBytes)
	}
	s.fail(ctx, id, in.State, types.ReasonOOMKilled, msg)
}

// oomKilledSince reports whether the runtime saw an OOM kill in instance id
// at or after t.
func (s *Service) oomKilledSince(id string, t time.Time) bool {
	w, ok := s.rt.(interface {
		OOMKilledSince(id string, t time.Time) bool
	})
	return ok && w.OOMKilledSince(id, t)
}

// checkDiskQuota refuses an instance whose writable layer of diskBytes
// would take the tenant past max_stored_bytes (as a volume would).
func (s *Service) checkDiskQuota(ctx context.Context, tenant string, diskBytes int64) error {
	if diskBytes == 0 {
		return nil
	}
	return s.checkVolumeQuota(ctx, tenant, diskBytes)
}
