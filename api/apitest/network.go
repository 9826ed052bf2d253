package apitest

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// SetProjectNetwork answers the project with the policy (egress "" as
// "open").
func (c *Core) SetProjectNetwork(ctx context.Context, p types.Principal, project string, n types.ProjectNetwork) (types.Project, error) {
	c.record("SetProjectNetwork", p, project, n)
	if n.Egress == "" {
		n.Egress = "open"
	}
	return types.Project{Name: project, Current: 1, Egress: n.Egress, IsolateInstances: n.IsolateInstances, CreatedAt: Epoch}, nil
}
