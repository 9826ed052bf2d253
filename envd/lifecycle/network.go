package lifecycle

import (
	"context"
	"strconv"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// LabelBuild is "true" on build and trial containers: their network policy
// is the node's build policy, not their project's.
const LabelBuild = "envd.build"

// NetworkPolicy is the runtime policy of proj's instances: the project is
// the group.
func NetworkPolicy(proj versions.Project) runtime.NetworkPolicy {
	e, err := runtime.ParseEgress(proj.Egress)
	if err != nil {
		// Stored values were validated; an unreadable one allows nothing.
		e = runtime.Egress{Mode: runtime.EgressNone}
	}
	return runtime.NetworkPolicy{Group: "project:" + strconv.FormatInt(proj.ID, 10), Isolated: proj.IsolateInstances, Egress: e}
}

// networkPolicyOf is NetworkPolicy, for a build container in a group of
// its own, "build:<project id>": builds are isolated anyway, and the egress
// gateway adds a tenant's brokered secrets only to groups "project:<id>",
// so no build ever carries one.
func networkPolicyOf(proj versions.Project, build bool) runtime.NetworkPolicy {
	pol := NetworkPolicy(proj)
	if build {
		pol.Group = "build:" + strconv.FormatInt(proj.ID, 10)
	}
	return pol
}

// refreshNetworkPolicy gives an instance about to start its project's
// current policy (it may have changed while the instance was stopped).
func (m *Manager) refreshNetworkPolicy(ctx context.Context, in versions.Instance) error {
	proj, err := m.Store.GetProject(ctx, in.Tenant, in.Project)
	if err != nil {
		return err
	}
	return m.Runtime.SetNetworkPolicy(ctx, in.ID, NetworkPolicy(proj))
}

// ApplyNetwork applies proj's network policy at once to its running
// instances on this node (not to build containers, whose policy is the
// node's); others get it when they next start. Connections already open
// are not cut.
func (m *Manager) ApplyNetwork(ctx context.Context, proj versions.Project) error {
	ins, err := m.Store.ListInstances(ctx, proj.Tenant, proj.Name)
	if err != nil {
		return err
	}
	pol := NetworkPolicy(proj)
	for _, in := range ins {
		if in.Node != m.Node || (in.State != types.StateRunning && in.State != types.StatePaused) {
			continue
		}
		if st, err := m.Runtime.Status(ctx, in.ID); err != nil || st.Labels[LabelBuild] == "true" {
			continue
		}
		if err := m.Runtime.SetNetworkPolicy(ctx, in.ID, pol); err != nil {
			m.Log.Warn("apply network policy", "instance", in.ID, "err", err)
		}
	}
	return nil
}
