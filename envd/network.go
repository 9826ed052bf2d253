package envd

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

// normalizeEgress validates an egress policy and returns its normal text
// form ("" = open).
func normalizeEgress(s string) (string, error) {
	e, err := runtime.ParseEgress(s)
	if err != nil {
		return "", err
	}
	return e.String(), nil
}

// networkPolicy is the runtime policy of proj's instances: the project is
// the group.
func networkPolicy(proj versions.Project) runtime.NetworkPolicy {
	e, err := runtime.ParseEgress(proj.Egress)
	if err != nil {
		// Stored values were validated; an unreadable one allows nothing.
		e = runtime.Egress{Mode: runtime.EgressNone}
	}
	return runtime.NetworkPolicy{Group: "project:" + strconv.FormatInt(proj.ID, 10), Isolated: proj.IsolateInstances, Egress: e}
}

// refreshNetworkPolicy gives an instance about to start its project's
// current policy (it may have changed while the instance was stopped).
func (s *Service) refreshNetworkPolicy(ctx context.Context, in versions.Instance) error {
	proj, err := s.store.GetProject(ctx, in.Tenant, in.Project)
	if err != nil {
		return err
	}
	return s.rt.SetNetworkPolicy(ctx, in.ID, networkPolicy(proj))
}

// SetProjectNetwork sets a project's network policy. It applies at once to
// the project's running instances on this node, and to others when they
// next start; connections already open are not cut.
func (s *Service) SetProjectNetwork(ctx context.Context, p types.Principal, project string, req types.ProjectNetwork) (types.Project, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Project{}, err
	}
	egress, err := normalizeEgress(req.Egress)
	if err != nil {
		return types.Project{}, err
	}
	proj, err := s.store.SetProjectNetwork(ctx, p.Tenant, project, egress, req.IsolateInstances)
	if err != nil {
		return types.Project{}, err
	}
	ins, err := s.store.ListInstances(ctx, p.Tenant, project)
	if err != nil {
		return types.Project{}, err
	}
	pol := networkPolicy(proj)
	for _, in := range ins {
		if in.Node != s.cfg.Node || (in.State != types.StateRunning && in.State != types.StatePaused) {
			continue
		}
		if st, err := s.rt.Status(ctx, in.ID); err != nil || st.Labels[LabelBuild] == "true" {
			continue
		}
		if err := s.rt.SetNetworkPolicy(ctx, in.ID, pol); err != nil {
			s.log.Warn("apply network policy", "instance", in.ID, "err", err)
		}
	}
	return toProject(proj), nil
}
