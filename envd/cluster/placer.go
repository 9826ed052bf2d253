package cluster

import (
	"context"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/versions"
)

// PlacerStore is what placement reads of the store: the project and the
// version asked for, the members with their capacity and use, where the
// image is pulled, the tenant's spread, the project's volume home and
// its checkpoints.
type PlacerStore interface {
	GetProject(ctx context.Context, tenant, name string) (versions.Project, error)
	GetVersion(ctx context.Context, tenant, project string, n int) (versions.Version, error)
	ListMembers(ctx context.Context) ([]versions.Member, error)
	NodesWithImage(ctx context.Context, image string) (map[string]bool, error)
	TenantSpread(ctx context.Context, tenant string) (map[string]int, error)
	GetVolumeHome(ctx context.Context, tenant, project string) (versions.VolumeHome, bool, error)
	ListCheckpoints(ctx context.Context, tenant, project string) ([]versions.Checkpoint, error)
}

// Limits gives a project's effective instance limits
// (lifecycle.Manager.EffectiveLimits).
type Limits interface {
	EffectiveLimits(ctx context.Context, proj versions.Project) (types.Limits, error)
}

// VolumePaths lists a project's volume mount paths (workspace.Volumes.Paths).
type VolumePaths interface {
	Paths(ctx context.Context, tenant, project string) []string
}

// Placer places new instances among the members (Place) with what the
// store knows of them.
type Placer struct {
	node       string
	localFirst bool
	store      PlacerStore
	limits     Limits
	volumes    VolumePaths
}

// NewPlacer makes the placer of node; localFirst is its placement setting
// "local" (Request.LocalFirst).
func NewPlacer(node string, localFirst bool, store PlacerStore, limits Limits, volumes VolumePaths) *Placer {
	return &Placer{node: node, localFirst: localFirst, store: store, limits: limits, volumes: volumes}
}

// PlaceInstance picks the node of a new instance of project (Place): the
// local node answers when it is chosen, when no node registered (a node
// without membership), or when the project or version is not found (the
// local handler answers 404 or the bad name).
func (pl *Placer) PlaceInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest) (node, apiURL, reason string, local bool, err error) {
	proj, err := pl.store.GetProject(ctx, p.Tenant, project)
	if err != nil {
		return pl.node, "", "", true, nil
	}
	n := req.Version
	if n == 0 {
		n = proj.Current
	}
	v, err := pl.store.GetVersion(ctx, p.Tenant, project, n)
	if err != nil {
		return pl.node, "", "", true, nil
	}
	members, err := pl.store.ListMembers(ctx)
	if err != nil {
		return "", "", "", false, err
	}
	if len(members) == 0 {
		return pl.node, "", "", true, nil
	}
	limits, err := pl.limits.EffectiveLimits(ctx, proj)
	if err != nil {
		return "", "", "", false, err
	}
	withImage, err := pl.store.NodesWithImage(ctx, v.Image)
	if err != nil {
		return "", "", "", false, err
	}
	spread, err := pl.store.TenantSpread(ctx, p.Tenant)
	if err != nil {
		return "", "", "", false, err
	}
	creq := Request{Limits: limits, Selector: req.NodeSelector, Local: pl.node, LocalFirst: pl.localFirst, Class: proj.RuntimeClass}
	home, hasHome, err := pl.store.GetVolumeHome(ctx, p.Tenant, project)
	if err != nil {
		return "", "", "", false, err
	}
	// A start from a checkpoint brings the volumes from its archives: it
	// may go anywhere (lifecycle.startPlanned restores them there).
	if hasHome && home.ArchiveKey == "" && req.Checkpoint == 0 && len(pl.volumes.Paths(ctx, p.Tenant, project)) > 0 {
		creq.VolumesOnlyOn, creq.Project = home.Node, project
		if cp, ok := pl.newestVolumeCheckpoint(ctx, p.Tenant, project); ok {
			creq.VolumesCheckpoint = cp
		}
	}
	cands := make([]Candidate, 0, len(members))
	urls := map[string]string{}
	for _, m := range members {
		urls[m.Name] = m.APIURL
		cands = append(cands, Candidate{Name: m.Name, State: m.State, Lapsed: m.Expired, Stopped: m.Stopped, Labels: m.Labels,
			CPUs: m.CPUs, UsedCPUs: m.UsedCPUs, MemoryBytes: m.MemoryBytes, UsedMemory: m.UsedMemory,
			DiskBytes: m.DiskBytes, UsedDisk: m.UsedDisk, Slots: m.InstanceSlots, Instances: m.Instances,
			DiskRoom: deref(m.DiskRoom), DiskRoomKnown: m.DiskRoom != nil,
			HasImage: withImage[m.Name], HoldsVolumes: hasHome && home.Node == m.Name, TenantInstances: spread[m.Name],
			RuntimeClasses: m.RuntimeClasses})
	}
	d, err := Place(creq, cands)
	if err != nil {
		return "", "", "", false, err
	}
	return d.Node, urls[d.Node], d.Reason, d.Node == pl.node, nil
}

// newestVolumeCheckpoint is the project's newest checkpoint that archived
// volumes; ok false when none (or the lookup failed).
func (pl *Placer) newestVolumeCheckpoint(ctx context.Context, tenant, project string) (int, bool) {
	cps, err := pl.store.ListCheckpoints(ctx, tenant, project)
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
