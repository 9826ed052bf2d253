package envd

import (
	"context"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/views"
	"github.com/envd-dev/envd/runtime"
)

// normalizeEgress validates an egress policy and returns its normal text
// form ("" = open).
func normalizeEgress(s string) (string, error) {
	e, err := runtime.ParseEgress(s)
	if err != nil {
		return "", err
	}
	return e.String(), nil
}

// SetProjectNetwork sets a project's network policy. It applies at once to
// the project's running instances on this node, and to others when they
// next start; connections already open are not cut.
func (s *Service) SetProjectNetwork(ctx context.Context, p types.Principal, project string, req types.ProjectNetwork) (types.Project, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Project{}, err
	}
	egress, err := normalizeEgress(req.Egress)
	if err != nil {
		return types.Project{}, err
	}
	proj, err := s.store.Projects.SetProjectNetwork(ctx, p.Tenant, project, egress, req.IsolateInstances)
	if err != nil {
		return types.Project{}, err
	}
	if err := s.life.ApplyNetwork(ctx, proj); err != nil {
		return types.Project{}, err
	}
	return views.Project(proj), nil
}
