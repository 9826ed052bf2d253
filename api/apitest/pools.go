package apitest

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// Pools is the fake PoolCore.
type Pools struct{ *Recorder }

func (c *Pools) SetProjectPool(ctx context.Context, p types.Principal, project string, req types.PoolSetting) (types.Project, error) {
	return echo(c, "SetProjectPool", p, types.Project{Name: project, Pool: &req}, project, req)
}
