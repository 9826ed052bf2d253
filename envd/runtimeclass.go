package envd

import (
	"context"
	"fmt"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/runtime"
)

// checkProjectClass validates a project's runtime class and refuses one
// its tenant may not use (spec.CheckClass); it returns the class's name.
func (s *Service) checkProjectClass(ctx context.Context, tenant, class string) (string, error) {
	c, err := runtime.ParseClass(class)
	if err != nil {
		return "", err
	}
	m, err := s.store.Tenants.LimitMaxima(ctx, tenant)
	if err != nil {
		return "", err
	}
	return string(c), spec.CheckClass(string(c), m)
}

// SetProjectRuntimeClass sets the runtime class of a project's instances
// ("" = the node's default). Instances made afterwards, on any node, run on
// it (pools, builds, trials and restores included); those already made keep
// theirs until they are removed.
func (s *Service) SetProjectRuntimeClass(ctx context.Context, p types.Principal, project string, req types.ProjectRuntimeClass) (types.Project, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Project{}, err
	}
	class, err := s.checkProjectClass(ctx, p.Tenant, req.RuntimeClass)
	if err != nil {
		return types.Project{}, err
	}
	cur, err := s.store.Projects.GetProject(ctx, p.Tenant, project)
	if err != nil {
		return types.Project{}, err
	}
	if cur.Docker {
		if err := runtime.CheckDocker(runtime.Class(class)); err != nil {
			return types.Project{}, fmt.Errorf("project %q runs docker (set docker off first): %w", project, err)
		}
	}
	proj, err := s.store.Projects.SetProjectRuntimeClass(ctx, p.Tenant, project, class)
	if err != nil {
		return types.Project{}, err
	}
	return s.GetProject(ctx, p, proj.Name)
}

// SetProjectDocker sets whether a project's instances may run dockerd and
// nested containers (runtime.InstanceSpec.Docker). On is refused unless the
// project's runtime class is gvisor (runtime.CheckDocker: 409
// failed_precondition, with the reason and the way out). Instances made
// afterwards get it; those already made keep what they were made with.
func (s *Service) SetProjectDocker(ctx context.Context, p types.Principal, project string, req types.ProjectDocker) (types.Project, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Project{}, err
	}
	if req.Docker {
		cur, err := s.store.Projects.GetProject(ctx, p.Tenant, project)
		if err != nil {
			return types.Project{}, err
		}
		if err := runtime.CheckDocker(runtime.Class(cur.RuntimeClass)); err != nil {
			return types.Project{}, fmt.Errorf("project %q: docker: %w", project, err)
		}
	}
	proj, err := s.store.Projects.SetProjectDocker(ctx, p.Tenant, project, req.Docker)
	if err != nil {
		return types.Project{}, err
	}
	return s.GetProject(ctx, p, proj.Name)
}
