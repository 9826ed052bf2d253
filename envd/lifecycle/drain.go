package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/versions"
)

// ReasonDrain is the reason of an instance stopped and hibernated because
// its node drains.
const ReasonDrain = "node_drain"

// Evacuate moves one live instance of this draining node off it, keeping
// its work: a retained one is stopped and hibernated (its layer becomes a
// non-current version that wakes on any node); any other running one is
// saved as a non-current version and hibernated, as the idle stop does
// (activity during that save cancels it: the next round tries again). It
// reports done when the instance no longer holds anything on this node;
// an instance in a transitional state is left for the next round.
func (m *Manager) Evacuate(ctx context.Context, in versions.Instance) (done bool, err error) {
	if in.Node != m.Node || !in.State.Live() || in.HibernatedVersion > 0 {
		return true, nil
	}
	p := types.Principal{Tenant: in.Tenant}
	switch {
	case in.Retain && (in.State == types.StateRunning || in.State == types.StatePaused):
		if _, err := m.stopInstance(ctx, p, in.ID, ReasonDrain, "node "+m.Node+" drains"); err != nil {
			return false, err
		}
		if in, err = m.Store.GetInstance(ctx, "", in.ID); err != nil {
			return false, err
		}
		fallthrough
	case in.Retain && in.State == types.StateStopped:
		_, err := m.hibernate(ctx, in, versions.QuotaExempt)
		return err == nil, err
	case in.State == types.StatePaused:
		if _, err := m.ResumeInstance(ctx, p, in.ID); err != nil {
			return false, err
		}
		return false, nil
	case in.State == types.StateRunning:
		err := m.idle(ctx, in, versions.IdleHibernate, time.Now())
		if err != nil {
			return false, fmt.Errorf("save instance %s before the drain: %w", in.ID, err)
		}
		return true, nil
	}
	return false, nil
}

// EffectiveLimits are the limits an instance of proj starts with (the
// project's, else the node's defaults, within the tenant's maxima):
// placement fits them in a node's free capacity.
func (m *Manager) EffectiveLimits(ctx context.Context, proj versions.Project) (types.Limits, error) {
	ps, _ := spec.Parse(proj.Spec)
	return m.effectiveLimits(ctx, proj.Tenant, ps.Limits)
}
