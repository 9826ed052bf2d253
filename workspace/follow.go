package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// A project's volume data lives on one node at a time, its home
// (versions.VolumeHome). An instance starts on its home, or elsewhere only
// once the data has moved: Handoff archives it to object storage when
// nothing of the project runs on the home any more (a hibernation, an idle
// stop, a drain), and Follow restores that archive on the node that starts
// the next instance. Without an archive, a start elsewhere is refused
// (errdefs.ErrVolumeElsewhere): never an empty volume in silence.

// HomeStore is what following volumes needs of the store.
type HomeStore interface {
	GetVolumeHome(ctx context.Context, tenant, project string) (versions.VolumeHome, bool, error)
	SetVolumeHome(ctx context.Context, tenant, project, node, archiveKey string) error
	// ListCheckpoints lists the project's coordinated checkpoints, newest
	// first: a refusal names the one that can bring the volumes back.
	ListCheckpoints(ctx context.Context, tenant, project string) ([]versions.Checkpoint, error)
}

// handoffArchive is the name of the archive that carries a volume between
// nodes; each handoff replaces the previous one.
const handoffArchive = "handoff"

// WithHomes enables following: without it (a node with no shared store)
// volumes stay node-local as before.
func (m *Volumes) WithHomes(h HomeStore) *Volumes {
	m.homes = h
	return m
}

// Follow makes this node the home of proj's volumes before an instance
// starts here: nothing to do when it is already, or when no node holds
// them yet; the handoff archives are restored when another node handed
// them off; ErrVolumeElsewhere when another node holds them and no
// archive carries them.
func (m *Volumes) Follow(ctx context.Context, proj versions.Project) error {
	ps, err := spec.Parse(proj.Spec)
	if err != nil || len(ps.Volumes) == 0 || m.homes == nil || m.storage == nil {
		return err
	}
	home, ok, err := m.homes.GetVolumeHome(ctx, proj.Tenant, proj.Name)
	if err != nil {
		return err
	}
	if !ok || home.Node == m.node {
		// The data is used here from now on: an older handoff archive no
		// longer carries it.
		return m.homes.SetVolumeHome(ctx, proj.Tenant, proj.Name, m.node, "")
	}
	if home.ArchiveKey == "" {
		details := map[string]any{"node": home.Node}
		hint := ""
		if cp, ok := m.newestCheckpoint(ctx, proj, len(ps.Volumes)); ok {
			details["checkpoint"] = cp.Number
			hint = fmt.Sprintf("; or start from checkpoint %d of %s, which archived them (envctl up %s --checkpoint %d)",
				cp.Number, cp.CreatedAt.UTC().Format(time.RFC3339), proj.Name, cp.Number)
		}
		return errdefs.WithDetails(fmt.Errorf("the volumes of project %q are on node %q and no archive carries them here (they are archived when nothing of the project runs there: stop or hibernate its instances, or drain the node; or restore an archive here with envctl volume restore%s): %w",
			proj.Name, home.Node, hint, errdefs.ErrVolumeElsewhere), details)
	}
	keys := map[string]string{}
	if err := json.Unmarshal([]byte(home.ArchiveKey), &keys); err != nil {
		return fmt.Errorf("handoff archives of project %q: %v: %w", proj.Name, err, errdefs.ErrFailedPrecondition)
	}
	if m.objects == nil {
		return fmt.Errorf("the volumes of project %q were handed off by node %q, but this node has no object storage: %w", proj.Name, home.Node, errdefs.ErrVolumeElsewhere)
	}
	for _, v := range ps.Volumes {
		key, ok := keys[v.Name]
		if !ok {
			return errdefs.WithDetails(fmt.Errorf("volume %q of project %q was not handed off by node %q: %w", v.Name, proj.Name, home.Node, errdefs.ErrVolumeElsewhere),
				map[string]any{"node": home.Node})
		}
		if err := m.storage.Restore(ctx, owner(proj.Tenant, proj.Name), toSpec(v), m.objects, key); err != nil {
			return fmt.Errorf("restore volume %q handed off by node %q: %w", v.Name, home.Node, err)
		}
	}
	m.log.Info("volumes followed their project", "project", proj.Name, "from", home.Node, "volumes", len(ps.Volumes))
	return m.homes.SetVolumeHome(ctx, proj.Tenant, proj.Name, m.node, "")
}

// Handoff archives the project's volumes to object storage when this node
// is their home and no live instance of the project runs here, and
// records the archives on the home, so that the next instance may start
// on any node. A failure is logged: the data stays here and a start
// elsewhere is refused, never given an empty volume.
func (m *Volumes) Handoff(ctx context.Context, tenant, project string) {
	if m.homes == nil || m.storage == nil || m.objects == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Minute)
	defer cancel()
	if err := m.handoff(ctx, tenant, project); err != nil {
		m.log.Warn("hand off volumes", "project", project, "err", err)
	}
}

func (m *Volumes) handoff(ctx context.Context, tenant, project string) error {
	_, ps, err := m.projectSpec(ctx, tenant, project)
	if err != nil || len(ps.Volumes) == 0 {
		return err
	}
	home, ok, err := m.homes.GetVolumeHome(ctx, tenant, project)
	if err != nil || !ok || home.Node != m.node {
		return err
	}
	live, err := m.liveInstances(ctx, tenant, project)
	if err != nil {
		return err
	}
	for _, in := range live {
		if in.Node == m.node && in.HibernatedVersion == 0 {
			return nil // still used here
		}
	}
	p := types.Principal{Tenant: tenant}
	keys := map[string]string{}
	for _, v := range ps.Volumes {
		a, err := m.Archive(ctx, p, project, v.Name, types.VolumeArchiveRequest{Name: handoffArchive, Replace: true})
		if err != nil {
			return err
		}
		keys[v.Name] = a.Key
	}
	b, err := json.Marshal(keys)
	if err != nil {
		return err
	}
	m.log.Info("volumes handed off", "project", project, "volumes", len(keys))
	return m.homes.SetVolumeHome(ctx, tenant, project, m.node, string(b))
}

// newestCheckpoint is the project's newest coordinated checkpoint that
// archived all its volumes, made on the volumes' home or elsewhere; ok
// false when none (or the lookup failed: the refusal stands without it).
func (m *Volumes) newestCheckpoint(ctx context.Context, proj versions.Project, volumes int) (versions.Checkpoint, bool) {
	cps, err := m.homes.ListCheckpoints(ctx, proj.Tenant, proj.Name)
	if err != nil {
		m.log.Warn("checkpoints of a project whose volumes are elsewhere", "project", proj.Name, "err", err)
		return versions.Checkpoint{}, false
	}
	for _, c := range cps {
		if len(c.Archives) >= volumes {
			return c, true
		}
	}
	return versions.Checkpoint{}, false
}
