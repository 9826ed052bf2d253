package apitest

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// SetProjectLimits answers the project with the limits as asked.
func (c *Core) SetProjectLimits(ctx context.Context, p types.Principal, project string, l types.Limits) (types.Project, error) {
	c.record("SetProjectLimits", p, project, l)
	return types.Project{Name: project, Current: 1, Limits: &l, CreatedAt: Epoch}, nil
}
