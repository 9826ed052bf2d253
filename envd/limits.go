package envd

import (
	"context"
	"encoding/json"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/envd/views"
	"github.com/envd-dev/envd/versions"
)

// ValidateLimits refuses values the kernel cannot take.
func ValidateLimits(l types.Limits) error { return spec.ValidateLimits(l) }

// checkProjectLimits validates a project's limits and refuses them beyond
// the tenant's maxima.
func (s *Service) checkProjectLimits(ctx context.Context, tenant string, l *types.Limits) error {
	if l == nil {
		return nil
	}
	if err := ValidateLimits(*l); err != nil {
		return err
	}
	m, err := s.store.Tenants.LimitMaxima(ctx, tenant)
	if err != nil {
		return err
	}
	return spec.CheckMaxima(*l, m)
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
	proj, err := s.store.Projects.SetProjectSpec(ctx, p.Tenant, project, raw)
	if err != nil {
		return types.Project{}, err
	}
	return views.Project(proj), nil
}

// setLimitMaxima stores the limit maxima of a quota.
func (s *Service) setLimitMaxima(ctx context.Context, tenant string, q types.Quota) (versions.LimitMaxima, error) {
	m := versions.LimitMaxima{MemoryBytes: q.MaxMemoryBytes, Pids: q.MaxPids, CPUs: q.MaxCPUs, DiskBytes: q.MaxDiskBytes,
		RuntimeClasses: q.RuntimeClasses} // checked by SetQuota
	if err := s.store.Tenants.SetLimitMaxima(ctx, tenant, m); err != nil {
		return versions.LimitMaxima{}, err
	}
	return s.store.Tenants.LimitMaxima(ctx, tenant)
}

func withMaxima(q types.Quota, m versions.LimitMaxima) types.Quota {
	q.MaxMemoryBytes, q.MaxPids, q.MaxCPUs, q.MaxDiskBytes = m.MemoryBytes, m.Pids, m.CPUs, m.DiskBytes
	q.RuntimeClasses = m.RuntimeClasses
	return q
}
