package envd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
	"github.com/envd-dev/envd/workspace"
)

// projectSpec is what a project declares beyond its base: it is stored as
// the project's spec document.
type projectSpec struct {
	Volumes []types.Volume `json:"volumes,omitempty"`
	Limits  *types.Limits  `json:"limits,omitempty"`
}

func parseProjectSpec(raw json.RawMessage) (projectSpec, error) {
	var ps projectSpec
	if len(raw) == 0 {
		return ps, nil
	}
	if err := json.Unmarshal(raw, &ps); err != nil {
		return ps, fmt.Errorf("project spec: %w", err)
	}
	return ps, nil
}

func toSpec(v types.Volume) workspace.Spec {
	return workspace.Spec{Name: v.Name, Path: v.Path, UID: v.UID, GID: v.GID, SizeBytes: v.SizeBytes, PathAdd: v.PathAdd}
}

func fromSpec(s workspace.Spec) types.Volume {
	return types.Volume{Name: s.Name, Path: s.Path, UID: s.UID, GID: s.GID, SizeBytes: s.SizeBytes, PathAdd: s.PathAdd}
}

// parseVolume parses and checks "NAME:PATH[:UID:GID][:SIZE]".
func parseVolume(spec string, pathAdd []string) (types.Volume, error) {
	s, err := workspace.ParseSpec(spec)
	if err != nil {
		return types.Volume{}, err
	}
	s.PathAdd = pathAdd
	if s.SizeBytes == 0 {
		s.SizeBytes = workspace.DefaultSize
	}
	if err := s.Validate(); err != nil {
		return types.Volume{}, err
	}
	return fromSpec(s), nil
}

// addVolume appends v to vols, refusing a name or a mount path that is
// taken, or a path nested in another volume's.
func addVolume(vols []types.Volume, v types.Volume) ([]types.Volume, error) {
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

func volumeOwner(tenant, project string) string { return tenant + "/" + project }

// projectSpec loads a project and its declared spec.
func (s *Service) projectSpec(ctx context.Context, tenant, project string) (versions.Project, projectSpec, error) {
	proj, err := s.store.GetProject(ctx, tenant, project)
	if err != nil {
		return proj, projectSpec{}, err
	}
	ps, err := parseProjectSpec(proj.Spec)
	return proj, ps, err
}

// volumeMounts makes sure the project's volumes exist and are mounted on
// this node, and returns their bind mounts and the instance's PATH.
func (s *Service) volumeMounts(ctx context.Context, proj versions.Project) ([]runtime.Mount, []string, error) {
	ps, err := parseProjectSpec(proj.Spec)
	if err != nil || len(ps.Volumes) == 0 {
		return nil, nil, err
	}
	if s.cfg.Volumes == nil {
		return nil, nil, fmt.Errorf("project %q has volumes, but this node has no volume storage: %w", proj.Name, errdefs.ErrFailedPrecondition)
	}
	var mounts []runtime.Mount
	var specs []workspace.Spec
	for _, v := range ps.Volumes {
		dir, err := s.cfg.Volumes.Ensure(ctx, volumeOwner(proj.Tenant, proj.Name), toSpec(v))
		if err != nil {
			return nil, nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		mounts = append(mounts, runtime.Mount{Source: dir, Destination: v.Path, Owned: true})
		specs = append(specs, toSpec(v))
	}
	var env []string
	path := workspace.PathWith(strings.TrimPrefix(registry.DefaultPath, "PATH="), specs...)
	if "PATH="+path != registry.DefaultPath {
		env = append(env, "PATH="+path)
	}
	return mounts, env, nil
}

// liveInstances returns the project's instances that hold a node's
// resources.
func (s *Service) liveInstances(ctx context.Context, tenant, project string) ([]versions.Instance, error) {
	ins, err := s.store.ListInstances(ctx, tenant, project)
	if err != nil {
		return nil, err
	}
	var out []versions.Instance
	for _, in := range ins {
		if slices.Contains(liveStates, in.State) {
			out = append(out, in)
		}
	}
	return out, nil
}

// AddVolume declares a new volume on a project; instances started from
// now on mount it.
func (s *Service) AddVolume(ctx context.Context, p types.Principal, project string, req types.AddVolumeRequest) (types.Project, error) {
	v, err := parseVolume(req.Spec, req.PathAdd)
	if err != nil {
		return types.Project{}, err
	}
	proj, ps, err := s.projectSpec(ctx, p.Tenant, project)
	if err != nil {
		return types.Project{}, err
	}
	if ps.Volumes, err = addVolume(ps.Volumes, v); err != nil {
		return types.Project{}, err
	}
	if err := s.checkVolumeQuota(ctx, p.Tenant, v.SizeBytes); err != nil {
		return types.Project{}, err
	}
	raw, _ := json.Marshal(ps)
	proj, err = s.store.SetProjectSpec(ctx, p.Tenant, project, raw)
	if err != nil {
		return types.Project{}, err
	}
	return toProject(proj), nil
}

// RemoveVolume removes a volume and deletes its data on this node. It is
// refused while the project has live instances (they may have it mounted).
func (s *Service) RemoveVolume(ctx context.Context, p types.Principal, project, name string) (types.Project, error) {
	proj, ps, err := s.projectSpec(ctx, p.Tenant, project)
	if err != nil {
		return types.Project{}, err
	}
	i := slices.IndexFunc(ps.Volumes, func(v types.Volume) bool { return v.Name == name })
	if i < 0 {
		return types.Project{}, fmt.Errorf("volume %q of project %q: %w", name, project, errdefs.ErrNotFound)
	}
	live, err := s.liveInstances(ctx, p.Tenant, project)
	if err != nil {
		return types.Project{}, err
	}
	if len(live) > 0 {
		return types.Project{}, fmt.Errorf("project %q has %d live instance(s) (first %s): remove them before removing volume %q: %w",
			project, len(live), live[0].ID, name, errdefs.ErrFailedPrecondition)
	}
	ps.Volumes = slices.Delete(ps.Volumes, i, i+1)
	raw, _ := json.Marshal(ps)
	proj, err = s.store.SetProjectSpec(ctx, p.Tenant, project, raw)
	if err != nil {
		return types.Project{}, err
	}
	// The declaration is gone first; the data after, so a failure leaves
	// only an unreferenced volume directory.
	if s.cfg.Volumes != nil {
		if err := s.cfg.Volumes.Remove(ctx, volumeOwner(p.Tenant, project), name); err != nil {
			s.log.Warn("remove volume data", "project", project, "volume", name, "err", err)
		}
	}
	return toProject(proj), nil
}

// ListVolumes lists a project's volumes with their usage on this node.
func (s *Service) ListVolumes(ctx context.Context, p types.Principal, project string) ([]types.Volume, error) {
	_, ps, err := s.projectSpec(ctx, p.Tenant, project)
	if err != nil {
		return nil, err
	}
	out := make([]types.Volume, 0, len(ps.Volumes))
	for _, v := range ps.Volumes {
		v.UsedBytes = -1
		if s.cfg.Volumes != nil {
			if u, err := s.cfg.Volumes.Usage(ctx, volumeOwner(p.Tenant, project), toSpec(v)); err == nil {
				v.UsedBytes, v.SizeBytes = u.UsedBytes, u.SizeBytes
			}
		}
		out = append(out, v)
	}
	return out, nil
}

func (s *Service) volume(ctx context.Context, p types.Principal, project, name string) (types.Volume, error) {
	_, ps, err := s.projectSpec(ctx, p.Tenant, project)
	if err != nil {
		return types.Volume{}, err
	}
	for _, v := range ps.Volumes {
		if v.Name == name {
			if s.cfg.Volumes == nil || s.cfg.Objects == nil {
				return types.Volume{}, fmt.Errorf("this node has no volume or object storage: %w", errdefs.ErrFailedPrecondition)
			}
			return v, nil
		}
	}
	return types.Volume{}, fmt.Errorf("volume %q of project %q: %w", name, project, errdefs.ErrNotFound)
}

// ArchiveVolume copies a volume's content to object storage under a key
// chosen here (see archives.go) and records it, so that it can be restored
// on another node. The object is written first and recorded last: a
// failure leaves no record, and the new object is deleted.
func (s *Service) ArchiveVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.VolumeArchive, error) {
	if req.Key != "" {
		return types.VolumeArchive{}, fmt.Errorf("key %q: archive keys are chosen by the server; name the archive with name: %w", req.Key, errdefs.ErrInvalidArgument)
	}
	arcName := req.Name
	if arcName == "" {
		arcName = time.Now().UTC().Format("20060102T150405.000Z")
	}
	if err := validateArchiveName(arcName); err != nil {
		return types.VolumeArchive{}, err
	}
	v, err := s.volume(ctx, p, project, name)
	if err != nil {
		return types.VolumeArchive{}, err
	}
	// Refuse before the upload what the record would refuse after it.
	if !req.Replace {
		if _, err := s.store.GetArchive(ctx, p.Tenant, project, name, arcName); err == nil {
			return types.VolumeArchive{}, fmt.Errorf("archive %q of volume %q exists: archive under another name, or replace it (\"replace\": true, envctl --replace): %w", arcName, name, errdefs.ErrAlreadyExists)
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return types.VolumeArchive{}, err
		}
	}
	key := archiveKey(p.Tenant, project, name, arcName)
	info, err := s.cfg.Volumes.Archive(ctx, volumeOwner(p.Tenant, project), toSpec(v), s.cfg.Objects, key)
	if err != nil {
		return types.VolumeArchive{}, fmt.Errorf("archive volume %q: %w", name, err)
	}
	rec, replaced, err := s.store.PutArchive(ctx, versions.Archive{Tenant: p.Tenant, Project: project, Volume: name,
		Name: arcName, Key: key, SizeBytes: info.Bytes, Files: info.Files, Node: s.cfg.Node}, req.Replace)
	if err != nil {
		s.deleteArchiveObject(ctx, key)
		return types.VolumeArchive{}, fmt.Errorf("archive volume %q: %w", name, err)
	}
	if replaced != "" {
		s.deleteArchiveObject(ctx, replaced)
	}
	out := toVolumeArchive(rec)
	out.Replaced = replaced != ""
	return out, nil
}

// RestoreVolume replaces a volume's content on this node with an archive's,
// found by name among the volume's archives or by key among the project's
// (an archive of another volume of the project may be restored). Keys are
// resolved through the archive records only: any other key, another
// tenant's included, is ErrNotFound. Refused while the project has live
// instances on this node.
func (s *Service) RestoreVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.Volume, error) {
	if (req.Key == "") == (req.Name == "") {
		return types.Volume{}, fmt.Errorf("give the archive's name or its key, one of them: %w", errdefs.ErrInvalidArgument)
	}
	if req.Replace {
		return types.Volume{}, fmt.Errorf("replace: only for archive: %w", errdefs.ErrInvalidArgument)
	}
	v, err := s.volume(ctx, p, project, name)
	if err != nil {
		return types.Volume{}, err
	}
	var arc versions.Archive
	if req.Name != "" {
		if err := validateArchiveName(req.Name); err != nil {
			return types.Volume{}, err
		}
		arc, err = s.store.GetArchive(ctx, p.Tenant, project, name, req.Name)
	} else {
		arc, err = s.store.GetArchiveByKey(ctx, p.Tenant, project, req.Key)
	}
	if err != nil {
		return types.Volume{}, err
	}
	live, err := s.liveInstances(ctx, p.Tenant, project)
	if err != nil {
		return types.Volume{}, err
	}
	for _, in := range live {
		if in.Node == s.cfg.Node {
			return types.Volume{}, fmt.Errorf("instance %s of project %q uses the volume on this node: remove it first: %w", in.ID, project, errdefs.ErrFailedPrecondition)
		}
	}
	if err := s.cfg.Volumes.Restore(ctx, volumeOwner(p.Tenant, project), toSpec(v), s.cfg.Objects, arc.Key); err != nil {
		return types.Volume{}, fmt.Errorf("restore volume %q from archive %q: %w", name, arc.Name, err)
	}
	if u, err := s.cfg.Volumes.Usage(ctx, volumeOwner(p.Tenant, project), toSpec(v)); err == nil {
		v.UsedBytes, v.SizeBytes = u.UsedBytes, u.SizeBytes
	}
	return v, nil
}
