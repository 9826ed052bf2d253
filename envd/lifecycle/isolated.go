package lifecycle

import (
	"context"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/versions"
)

// Isolated instances are a build's and a validation's containers: started
// from a version like any instance, but without volumes, with the node's
// build egress policy, isolated from other instances, their reads not
// recorded for prefetch, and removed by their build.

// CheckStart refuses what starting an instance of project from version n
// would refuse (the version, the tenant's quota); it changes nothing.
func (m *Manager) CheckStart(ctx context.Context, p types.Principal, project string, n int) error {
	_, err := m.planInstance(ctx, p, project, types.CreateInstanceRequest{Version: n})
	return err
}

// StartIsolated starts isolated instance id of project from version n,
// with a TTL that outlives no build.
func (m *Manager) StartIsolated(ctx context.Context, p types.Principal, id, project string, n int) (versions.Instance, error) {
	plan, err := m.planInstance(ctx, p, project, types.CreateInstanceRequest{Version: n})
	if err != nil {
		return versions.Instance{}, err
	}
	plan.isolated = true
	plan.expires = nil // the build removes it; a tenant's short max TTL must not cut a long install
	if _, err := m.startPlanned(ctx, p, id, plan); err != nil {
		return versions.Instance{}, err
	}
	return m.Store.GetInstance(ctx, p.Tenant, id)
}

// RemoveIsolated terminates an isolated instance, whatever happened, also
// after the caller's context ended.
func (m *Manager) RemoveIsolated(id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), time.Minute)
	defer cancel()
	in, err := m.Store.GetInstance(ctx, "", id)
	if err != nil {
		return // never recorded
	}
	if in.State == types.StateTerminated {
		return
	}
	if _, err := m.terminate(ctx, in, types.ReasonBuildFinished, "removed when its build ended"); err != nil {
		m.Log.Warn("remove build container", "instance", id, "err", err)
	}
}
