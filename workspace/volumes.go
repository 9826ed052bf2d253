package workspace

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// Store is what volumes need of the store.
type Store interface {
	GetProject(ctx context.Context, tenant, name string) (versions.Project, error)
	SetProjectSpec(ctx context.Context, tenant, name string, spec json.RawMessage) (versions.Project, error)
	ListInstances(ctx context.Context, tenant, project string) ([]versions.Instance, error)
	PutArchive(ctx context.Context, a versions.Archive, replace bool) (stored versions.Archive, replaced string, err error)
	GetArchive(ctx context.Context, tenant, project, volume, name string) (versions.Archive, error)
	GetArchiveByKey(ctx context.Context, tenant, project, key string) (versions.Archive, error)
	ListArchives(ctx context.Context, tenant, project, volume string) ([]versions.Archive, error)
	DeleteArchive(ctx context.Context, tenant, project, volume, name string) (versions.Archive, error)
	OrphanArchives(ctx context.Context, limit int) ([]versions.Archive, error)
	ForgetArchive(ctx context.Context, id int64) error
	GetCheckpoint(ctx context.Context, tenant, project string, number int) (versions.Checkpoint, error)
}

// Storage is the node's volume directories (Manager).
type Storage interface {
	Ensure(ctx context.Context, owner string, s Spec) (string, error)
	Usage(ctx context.Context, owner string, s Spec) (Usage, error)
	Remove(ctx context.Context, owner, name string) error
	Archive(ctx context.Context, owner string, s Spec, store objstore.Store, key string) (ArchiveInfo, error)
	Restore(ctx context.Context, owner string, s Spec, store objstore.Store, key string) error
	RestoreInPlace(ctx context.Context, owner string, s Spec, store objstore.Store, key string) error
}

// Quota is the check of stored bytes a new volume adds (quota.Checker.Volume).
type Quota interface {
	Volume(ctx context.Context, tenant string, addBytes int64) error
}

// Volumes manages the volumes of projects on this node.
type Volumes struct {
	node    string
	store   Store
	storage Storage        // nil: this node offers no volumes
	objects objstore.Store // nil: this node offers no archives
	quota   Quota
	log     *slog.Logger
	homes   HomeStore // follow.go; nil = volumes stay on their node
}

// NewVolumes makes a Volumes; storage and objects may be nil (the node offers no
// volumes or no archives).
func NewVolumes(node string, store Store, storage Storage, objects objstore.Store, quota Quota, log *slog.Logger) *Volumes {
	return &Volumes{node: node, store: store, storage: storage, objects: objects, quota: quota, log: log}
}

func toSpec(v types.Volume) Spec {
	return Spec{Name: v.Name, Path: v.Path, UID: v.UID, GID: v.GID, SizeBytes: v.SizeBytes, PathAdd: v.PathAdd}
}

func fromSpec(s Spec) types.Volume {
	return types.Volume{Name: s.Name, Path: s.Path, UID: s.UID, GID: s.GID, SizeBytes: s.SizeBytes, PathAdd: s.PathAdd}
}

// ParseVolume parses and checks "NAME:PATH[:UID:GID][:SIZE]".
func ParseVolume(text string, pathAdd []string) (types.Volume, error) {
	s, err := ParseSpec(text)
	if err != nil {
		return types.Volume{}, err
	}
	s.PathAdd = pathAdd
	if s.SizeBytes == 0 {
		s.SizeBytes = DefaultSize
	}
	if err := s.Validate(); err != nil {
		return types.Volume{}, err
	}
	return fromSpec(s), nil
}

// AppendVolume appends v to vols, refusing a name or a mount path that is taken,
// or a path nested in another volume's.
func AppendVolume(vols []types.Volume, v types.Volume) ([]types.Volume, error) {
	for _, o := range vols {
		if o.Name == v.Name {
			return nil, fmt.Errorf("volume %q: %w", v.Name, errdefs.ErrAlreadyExists)
		}
		if o.Path == v.Path || strings.HasPrefix(v.Path+"/", o.Path+"/") || strings.HasPrefix(o.Path+"/", v.Path+"/") {
			return nil, fmt.Errorf("volume %q at %s overlaps volume %q at %s: %w", v.Name, v.Path, o.Name, o.Path, errdefs.ErrInvalidArgument)
		}
	}
	return append(vols, v), nil
}

func owner(tenant, project string) string { return tenant + "/" + project }

// projectSpec loads a project and its declared spec.
func (m *Volumes) projectSpec(ctx context.Context, tenant, project string) (versions.Project, spec.Project, error) {
	proj, err := m.store.GetProject(ctx, tenant, project)
	if err != nil {
		return proj, spec.Project{}, err
	}
	ps, err := spec.Parse(proj.Spec)
	return proj, ps, err
}

// Paths are the mount paths of a project's volumes (none if the project
// cannot be read: an instance's view is still worth answering).
func (m *Volumes) Paths(ctx context.Context, tenant, project string) []string {
	_, ps, err := m.projectSpec(ctx, tenant, project)
	if err != nil {
		return nil
	}
	paths := make([]string, 0, len(ps.Volumes))
	for _, v := range ps.Volumes {
		paths = append(paths, v.Path)
	}
	return paths
}

// Mounts makes sure the project's volumes exist and are mounted on this
// node, and returns their bind mounts and the instance's PATH.
func (m *Volumes) Mounts(ctx context.Context, proj versions.Project) ([]runtime.Mount, []string, error) {
	ps, err := spec.Parse(proj.Spec)
	if err != nil || len(ps.Volumes) == 0 {
		return nil, nil, err
	}
	if m.storage == nil {
		return nil, nil, fmt.Errorf("project %q has volumes, but this node has no volume storage: %w", proj.Name, errdefs.ErrFailedPrecondition)
	}
	var mounts []runtime.Mount
	var specs []Spec
	for _, v := range ps.Volumes {
		dir, err := m.storage.Ensure(ctx, owner(proj.Tenant, proj.Name), toSpec(v))
		if err != nil {
			return nil, nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		mounts = append(mounts, runtime.Mount{Source: dir, Destination: v.Path, Owned: true})
		specs = append(specs, toSpec(v))
	}
	var env []string
	path := PathWith(strings.TrimPrefix(registry.DefaultPath, "PATH="), specs...)
	if "PATH="+path != registry.DefaultPath {
		env = append(env, "PATH="+path)
	}
	return mounts, env, nil
}

// liveInstances returns the project's instances that hold a node's
// resources.
func (m *Volumes) liveInstances(ctx context.Context, tenant, project string) ([]versions.Instance, error) {
	ins, err := m.store.ListInstances(ctx, tenant, project)
	if err != nil {
		return nil, err
	}
	var out []versions.Instance
	for _, in := range ins {
		if in.State.Live() {
			out = append(out, in)
		}
	}
	return out, nil
}

// Add declares a new volume on a project; instances started from now on
// mount it.
func (m *Volumes) Add(ctx context.Context, p types.Principal, project string, req types.AddVolumeRequest) (versions.Project, error) {
	v, err := ParseVolume(req.Spec, req.PathAdd)
	if err != nil {
		return versions.Project{}, err
	}
	proj, ps, err := m.projectSpec(ctx, p.Tenant, project)
	if err != nil {
		return versions.Project{}, err
	}
	if ps.Volumes, err = AppendVolume(ps.Volumes, v); err != nil {
		return versions.Project{}, err
	}
	if err := m.quota.Volume(ctx, p.Tenant, v.SizeBytes); err != nil {
		return versions.Project{}, err
	}
	raw, _ := json.Marshal(ps)
	proj, err = m.store.SetProjectSpec(ctx, p.Tenant, project, raw)
	if err != nil {
		return versions.Project{}, err
	}
	return proj, nil
}

// Remove removes a volume and deletes its data on this node. It is refused
// while the project has live instances (they may have it mounted).
func (m *Volumes) Remove(ctx context.Context, p types.Principal, project, name string) (versions.Project, error) {
	proj, ps, err := m.projectSpec(ctx, p.Tenant, project)
	if err != nil {
		return versions.Project{}, err
	}
	i := slices.IndexFunc(ps.Volumes, func(v types.Volume) bool { return v.Name == name })
	if i < 0 {
		return versions.Project{}, fmt.Errorf("volume %q of project %q: %w", name, project, errdefs.ErrNotFound)
	}
	live, err := m.liveInstances(ctx, p.Tenant, project)
	if err != nil {
		return versions.Project{}, err
	}
	if len(live) > 0 {
		return versions.Project{}, fmt.Errorf("project %q has %d live instance(s) (first %s): remove them before removing volume %q: %w",
			project, len(live), live[0].ID, name, errdefs.ErrFailedPrecondition)
	}
	ps.Volumes = slices.Delete(ps.Volumes, i, i+1)
	raw, _ := json.Marshal(ps)
	proj, err = m.store.SetProjectSpec(ctx, p.Tenant, project, raw)
	if err != nil {
		return versions.Project{}, err
	}
	// The declaration is gone first; the data after, so a failure leaves
	// only an unreferenced volume directory.
	if m.storage != nil {
		if err := m.storage.Remove(ctx, owner(p.Tenant, project), name); err != nil {
			m.log.Warn("remove volume data", "project", project, "volume", name, "err", err)
		}
	}
	return proj, nil
}

// List lists a project's volumes with their usage on this node.
func (m *Volumes) List(ctx context.Context, p types.Principal, project string) ([]types.Volume, error) {
	_, ps, err := m.projectSpec(ctx, p.Tenant, project)
	if err != nil {
		return nil, err
	}
	out := make([]types.Volume, 0, len(ps.Volumes))
	for _, v := range ps.Volumes {
		v.UsedBytes = -1
		if m.storage != nil {
			if u, err := m.storage.Usage(ctx, owner(p.Tenant, project), toSpec(v)); err == nil {
				v.UsedBytes, v.SizeBytes = u.UsedBytes, u.SizeBytes
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// volume returns a declared volume that this node can archive and restore.
func (m *Volumes) volume(ctx context.Context, p types.Principal, project, name string) (types.Volume, error) {
	_, ps, err := m.projectSpec(ctx, p.Tenant, project)
	if err != nil {
		return types.Volume{}, err
	}
	for _, v := range ps.Volumes {
		if v.Name == name {
			if m.storage == nil || m.objects == nil {
				return types.Volume{}, fmt.Errorf("this node has no volume or object storage: %w", errdefs.ErrFailedPrecondition)
			}
			return v, nil
		}
	}
	return types.Volume{}, fmt.Errorf("volume %q of project %q: %w", name, project, errdefs.ErrNotFound)
}
