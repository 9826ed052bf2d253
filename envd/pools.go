package envd

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// SetProjectPool sets a project's warm pool size (envd/lifecycle/pool.go
// fills and drains it).
func (s *Service) SetProjectPool(ctx context.Context, p types.Principal, project string, req types.PoolSetting) (types.Project, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Project{}, err
	}
	if err := s.store.Projects.SetPoolSize(ctx, p.Tenant, project, req.Size); err != nil {
		return types.Project{}, err
	}
	s.life.PokePools()
	return s.GetProject(ctx, p, project)
}

// withPool adds the project's pool setting to out.
func (s *Service) withPool(ctx context.Context, tenant string, out types.Project) types.Project {
	if n, err := s.store.Projects.PoolSize(ctx, tenant, out.Name); err == nil && n > 0 {
		out.Pool = &types.PoolSetting{Size: n}
	}
	return out
}
