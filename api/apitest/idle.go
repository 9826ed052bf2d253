package apitest

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// Idle is the fake IdleCore.
type Idle struct{ *Recorder }

// SetProjectIdle answers the project with the setting asked.
func (c *Idle) SetProjectIdle(ctx context.Context, p types.Principal, project string, req types.IdleSetting) (types.Project, error) {
	return echo(c, "SetProjectIdle", p, types.Project{Name: project, Current: 1, CreatedAt: Epoch, Egress: "open", Idle: &req}, project, req)
}
