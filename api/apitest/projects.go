package apitest

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// Projects is the fake ProjectCore.
type Projects struct {
	*Recorder
	GetProjectFunc func(ctx context.Context, name string) (types.Project, error)
}

func (c *Projects) CreateProject(ctx context.Context, p types.Principal, req types.CreateProjectRequest, key string) (types.Project, error) {
	comp := req.Compression
	if comp == "" {
		comp = "estargz"
	}
	return echo(c, "CreateProject", p, types.Project{Name: req.Name, BaseImage: req.Base, Current: 1, Excludes: req.Excludes,
		Compression: comp, CreatedAt: Epoch}, req, key)
}

func (c *Projects) ListProjects(ctx context.Context, p types.Principal) ([]types.Project, error) {
	return echo(c, "ListProjects", p, []types.Project(nil))
}

func (c *Projects) GetProject(ctx context.Context, p types.Principal, name string) (types.Project, error) {
	c.record("GetProject", p, name)
	if c.GetProjectFunc != nil {
		return c.GetProjectFunc(ctx, name)
	}
	return types.Project{Name: name, BaseImage: "busybox", Current: 1, Compression: "estargz", CreatedAt: Epoch}, nil
}

func (c *Projects) DeleteProject(ctx context.Context, p types.Principal, name string) error {
	_, err := echo(c, "DeleteProject", p, 0, name)
	return err
}

func (c *Projects) SetRetention(ctx context.Context, p types.Principal, project string, r types.Retention) (types.Project, error) {
	return echo(c, "SetRetention", p, types.Project{Name: project, Current: 1, Retention: &r, CreatedAt: Epoch}, project, r)
}

func (c *Projects) SetProjectLimits(ctx context.Context, p types.Principal, project string, l types.Limits) (types.Project, error) {
	return echo(c, "SetProjectLimits", p, types.Project{Name: project, Current: 1, Limits: &l, CreatedAt: Epoch}, project, l)
}

// SetProjectNetwork answers the policy with egress "" as "open".
func (c *Projects) SetProjectNetwork(ctx context.Context, p types.Principal, project string, n types.ProjectNetwork) (types.Project, error) {
	egress := n.Egress
	if egress == "" {
		egress = "open"
	}
	return echo(c, "SetProjectNetwork", p, types.Project{Name: project, Current: 1, Egress: egress,
		IsolateInstances: n.IsolateInstances, CreatedAt: Epoch}, project, n)
}

func (c *Projects) SetProjectRuntimeClass(ctx context.Context, p types.Principal, project string, rc types.ProjectRuntimeClass) (types.Project, error) {
	return echo(c, "SetProjectRuntimeClass", p, types.Project{Name: project, Current: 1, RuntimeClass: rc.RuntimeClass,
		CreatedAt: Epoch}, project, rc)
}

func (c *Projects) SetProjectDocker(ctx context.Context, p types.Principal, project string, d types.ProjectDocker) (types.Project, error) {
	return echo(c, "SetProjectDocker", p, types.Project{Name: project, Current: 1, RuntimeClass: "gvisor", Docker: d.Docker,
		CreatedAt: Epoch}, project, d)
}
