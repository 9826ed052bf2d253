package envd

import (
	"context"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/cluster"
)

// PlaceInstance picks the node of a new instance of project
// (cluster.Place): the local node answers when it is chosen, or when no
// node registered (a node without membership).
func (s *Service) PlaceInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest) (node, apiURL, reason string, local bool, err error) {
	proj, err := s.store.Projects.GetProject(ctx, p.Tenant, project)
	if err != nil {
		// The local handler answers 404 (or the bad name) as before.
		return s.cfg.Node, "", "", true, nil
	}
	n := req.Version
	if n == 0 {
		n = proj.Current
	}
	v, err := s.store.Versions.GetVersion(ctx, p.Tenant, project, n)
	if err != nil {
		return s.cfg.Node, "", "", true, nil
	}
	members, err := s.store.Nodes.ListMembers(ctx)
	if err != nil {
		return "", "", "", false, err
	}
	if len(members) == 0 {
		return s.cfg.Node, "", "", true, nil
	}
	limits, err := s.life.EffectiveLimits(ctx, proj)
	if err != nil {
		return "", "", "", false, err
	}
	withImage, err := s.store.Nodes.NodesWithImage(ctx, v.Image)
	if err != nil {
		return "", "", "", false, err
	}
	spread, err := s.store.Nodes.TenantSpread(ctx, p.Tenant)
	if err != nil {
		return "", "", "", false, err
	}
	creq := cluster.Request{Limits: limits, Selector: req.NodeSelector, Local: s.cfg.Node, LocalFirst: s.cfg.Cluster.Placement == PlacementLocal}
	home, hasHome, err := s.store.Volumes.GetVolumeHome(ctx, p.Tenant, project)
	if err != nil {
		return "", "", "", false, err
	}
	// A start from a checkpoint brings the volumes from its archives: it
	// may go anywhere (lifecycle.startPlanned restores them there).
	if hasHome && home.ArchiveKey == "" && req.Checkpoint == 0 && len(s.vols.Paths(ctx, p.Tenant, project)) > 0 {
		creq.VolumesOnlyOn, creq.Project = home.Node, project
		if cp, ok := s.newestVolumeCheckpoint(ctx, p.Tenant, project); ok {
			creq.VolumesCheckpoint = cp
		}
	}
	cands := make([]cluster.Candidate, 0, len(members))
	urls := map[string]string{}
	for _, m := range members {
		urls[m.Name] = m.APIURL
		cands = append(cands, cluster.Candidate{Name: m.Name, State: m.State, Lapsed: m.Expired, Stopped: m.Stopped, Labels: m.Labels,
			CPUs: m.CPUs, UsedCPUs: m.UsedCPUs, MemoryBytes: m.MemoryBytes, UsedMemory: m.UsedMemory,
			DiskBytes: m.DiskBytes, UsedDisk: m.UsedDisk, Slots: m.InstanceSlots, Instances: m.Instances,
			DiskRoom: deref(m.DiskRoom), DiskRoomKnown: m.DiskRoom != nil,
			HasImage: withImage[m.Name], HoldsVolumes: hasHome && home.Node == m.Name, TenantInstances: spread[m.Name]})
	}
	d, err := cluster.Place(creq, cands)
	if err != nil {
		return "", "", "", false, err
	}
	return d.Node, urls[d.Node], d.Reason, d.Node == s.cfg.Node, nil
}

// newestVolumeCheckpoint is the project's newest checkpoint that archived
// volumes; ok false when none (or the lookup failed).
func (s *Service) newestVolumeCheckpoint(ctx context.Context, tenant, project string) (int, bool) {
	cps, err := s.store.Versions.ListCheckpoints(ctx, tenant, project)
	if err != nil {
		return 0, false
	}
	for _, c := range cps {
		if len(c.Archives) > 0 {
			return c.Number, true
		}
	}
	return 0, false
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
