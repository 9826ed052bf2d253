package apitest

import (
	"context"

	"github.com/envd-dev/envd/envd"
)

// SetProjectNetwork answers the project with the policy (egress "" as
// "open").
func (c *Core) SetProjectNetwork(ctx context.Context, p envd.Principal, project string, n envd.ProjectNetwork) (envd.Project, error) {
	c.record("SetProjectNetwork", p, project, n)
	if n.Egress == "" {
		n.Egress = "open"
	}
	return envd.Project{Name: project, Current: 1, Egress: n.Egress, IsolateInstances: n.IsolateInstances, CreatedAt: Epoch}, nil
}
