package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/save"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// ReasonHibernated is the reason of a stopped instance whose layer was
// saved as a version and freed.
const ReasonHibernated = "hibernated"

// hibernateIdle hibernates the retained instances of this node that have
// been stopped longer than HibernateAfter.
func (m *Manager) hibernateIdle(ctx context.Context) {
	if m.HibernateAfter <= 0 {
		return
	}
	ins, err := m.Store.IdleRetained(ctx, m.Node, time.Now().Add(-m.HibernateAfter))
	if err != nil {
		m.Log.Warn("list idle retained instances", "err", err)
		return
	}
	for _, in := range ins {
		if _, err := m.hibernate(ctx, in, versions.QuotaExempt); err != nil {
			m.Log.Warn("hibernate", "instance", in.ID, "err", err)
		}
	}
}

// HibernateInstance hibernates a stopped retained instance now, instead of
// waiting for HibernateAfter; with req.Memory, a Running instance with its
// processes (hibernate_memory.go). Asked by the user, it is checked against
// the tenant's quota like a save: only the node's own idle hibernation is
// exempt.
func (m *Manager) HibernateInstance(ctx context.Context, p types.Principal, id string, req types.HibernateRequest) (types.Instance, error) {
	in, err := m.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	if req.Memory {
		return m.hibernateMemoryInstance(ctx, p, in)
	}
	in, err = m.hibernate(ctx, in, versions.QuotaEnforced)
	if err != nil {
		return types.Instance{}, err
	}
	return m.view(ctx, in), nil
}

// hibernate saves a stopped retained instance's layer as a version that
// does not become current, records it on the instance, then frees the
// local layer. Until the record is committed nothing is freed, so a crash
// at any step leaves the instance as it was (and at most an unreferenced
// version or blobs). quota says whether the tenant's quota applies.
func (m *Manager) hibernate(ctx context.Context, in versions.Instance, quota versions.QuotaPolicy) (versions.Instance, error) {
	if !in.Retain || in.State != types.StateStopped || in.HibernatedVersion > 0 || in.Node != m.Node {
		return in, errdefs.WithDetails(fmt.Errorf("instance %q: only a stopped, retained instance on this node can hibernate: %w", in.ID, errdefs.ErrFailedPrecondition),
			map[string]any{"state": in.State})
	}
	release, err := m.Saver.Guard(ctx, in.ID, "hibernation")
	if err != nil {
		return in, err
	}
	defer release()
	c, err := m.Saver.Capture(ctx, save.NoEvents{}, save.Capture{Work: "hibernate-" + in.ID, Instance: in, Freeze: false, Quota: quota})
	if err != nil {
		return in, err
	}
	v, _, err := m.Saver.Commit(ctx, c, versions.Commit{
		Tenant: in.Tenant, Project: in.Project, InstanceID: in.ID, Generation: in.Generation, NoSwitch: true,
		Kind: "snapshot", Message: fmt.Sprintf("hibernation of instance %s", in.ID),
	})
	if err != nil {
		return in, err
	}
	freed := m.freeing(in.ID) // wakeable from the update on; removed below
	defer freed()
	in, err = m.Store.Hibernated(ctx, in.ID, v.Number, ReasonHibernated,
		fmt.Sprintf("hibernated as version %d; start brings it back on any node", v.Number))
	if err != nil {
		return in, err
	}
	if err := m.Runtime.Remove(ctx, in.ID); err != nil {
		m.Log.Warn("free hibernated layer", "instance", in.ID, "err", err) // the reconciler retries: no live owner on this node
	}
	freed()
	m.Log.Info("instance hibernated", "instance", in.ID, "version", v.Number)
	m.Volumes.Handoff(ctx, in.Tenant, in.Project)
	return in, nil
}
