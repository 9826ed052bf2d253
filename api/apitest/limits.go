package apitest

import (
	"context"

	"github.com/envd-dev/envd/envd"
)

// SetProjectLimits answers the project with the limits as asked.
func (c *Core) SetProjectLimits(ctx context.Context, p envd.Principal, project string, l envd.Limits) (envd.Project, error) {
	c.record("SetProjectLimits", p, project, l)
	return envd.Project{Name: project, Current: 1, Limits: &l, CreatedAt: Epoch}, nil
}
