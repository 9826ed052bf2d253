package envd

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/envd/views"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/snapshotter"
	"github.com/envd-dev/envd/versions"
	"github.com/envd-dev/envd/workspace"
)

var compressions = map[string]bool{
	string(snapshotter.Estargz): true, string(snapshotter.Zstd): true, string(snapshotter.Gzip): true,
}

// CreateProject creates a project whose version 1 is the base image. A
// retry with the same idempotency key and request returns the same project.
func (s *Service) CreateProject(ctx context.Context, p types.Principal, req types.CreateProjectRequest, idempotencyKey string) (types.Project, error) {
	if err := ValidateName("project", req.Name); err != nil {
		return types.Project{}, err
	}
	existing, release, err := s.ops.Claim(ctx, p, idempotencyKey, "create_project", req, req.Name)
	if err != nil {
		return types.Project{}, err
	}
	if existing != "" {
		return ops.Await(ctx, func(ctx context.Context) (types.Project, error) { return s.GetProject(ctx, p, existing) })
	}
	proj, err := s.createProject(ctx, p, req)
	if err != nil {
		release()
		return proj, err
	}
	// The answer is what GET answers, so that a retry with the key (which
	// reads the project) answers the same.
	if rec, err := s.store.Projects.GetProject(ctx, p.Tenant, proj.Name); err == nil {
		proj.CurrentBase = s.currentBase(ctx, rec)
	}
	return proj, nil
}

func (s *Service) createProject(ctx context.Context, p types.Principal, req types.CreateProjectRequest) (types.Project, error) {
	excludes, err := names.ValidateExcludes(req.Excludes)
	if err != nil {
		return types.Project{}, err
	}
	if req.Compression == "" {
		req.Compression = string(snapshotter.Estargz)
	}
	if !compressions[req.Compression] {
		return types.Project{}, fmt.Errorf("compression %q: must be estargz, zstd or gzip: %w", req.Compression, errdefs.ErrInvalidArgument)
	}
	var ps spec.Project
	for _, text := range req.Volumes {
		v, err := workspace.ParseVolume(text, nil)
		if err != nil {
			return types.Project{}, err
		}
		if ps.Volumes, err = workspace.AppendVolume(ps.Volumes, v); err != nil {
			return types.Project{}, err
		}
	}
	if err := s.quota.Volume(ctx, p.Tenant, spec.VolumeBytes(ps.Volumes)); err != nil {
		return types.Project{}, err
	}
	if err := s.checkProjectLimits(ctx, p.Tenant, req.Limits); err != nil {
		return types.Project{}, err
	}
	ps.Limits = req.Limits
	rawSpec, _ := json.Marshal(ps)
	egress, err := normalizeEgress(req.Egress)
	if err != nil {
		return types.Project{}, err
	}
	class, err := s.checkProjectClass(ctx, p.Tenant, req.RuntimeClass)
	if err != nil {
		return types.Project{}, err
	}
	if req.Docker {
		if err := runtime.CheckDocker(runtime.Class(class)); err != nil {
			return types.Project{}, fmt.Errorf("project %q: docker: %w", req.Name, err)
		}
	}
	var idle versions.Idle
	if req.Idle != nil {
		if idle, err = s.parseIdle(ctx, p.Tenant, *req.Idle); err != nil {
			return types.Project{}, err
		}
	}
	base, err := s.images.ResolveBase(ctx, p.Tenant, req.Base)
	if err != nil {
		return types.Project{}, err
	}
	// The project and its idle setting commit together: a failed setting
	// leaves no project behind.
	var proj versions.Project
	err = s.store.InTx(ctx, func(tx versions.Tx) error {
		var err error
		proj, _, err = tx.Projects.CreateProject(ctx, versions.Project{
			Tenant: p.Tenant, Name: req.Name, BaseImage: base.Ref(), Spec: rawSpec,
			Excludes: excludes, Compression: req.Compression,
			Egress: egress, IsolateInstances: req.IsolateInstances, RuntimeClass: class, Docker: req.Docker,
		}, versions.Version{Kind: "base", State: "ready", Image: base.Ref(), SizeBytes: base.Size,
			Layers: len(base.Layers), Message: "base image " + req.Base})
		if err != nil {
			return fmt.Errorf("create project %q: %w", req.Name, err)
		}
		if idle.After != nil || idle.Action != "" {
			if _, err := tx.Projects.SetProjectIdle(ctx, p.Tenant, req.Name, idle); err != nil {
				return fmt.Errorf("create project %q: idle setting: %w", req.Name, err)
			}
		}
		return nil
	})
	if err != nil {
		return types.Project{}, err
	}
	return s.withProjectIdle(ctx, p.Tenant, views.Project(proj))
}

// SetRetention sets a project's version retention policy; an empty one
// keeps every version. It deletes nothing: a GC applies it.
func (s *Service) SetRetention(ctx context.Context, p types.Principal, project string, r types.Retention) (types.Project, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Project{}, err
	}
	if r.KeepLast < 0 {
		return types.Project{}, fmt.Errorf("keep_last %d: must be at least 1, or 0 for no count limit: %w", r.KeepLast, errdefs.ErrInvalidArgument)
	}
	var d time.Duration
	if r.KeepNewerThan != "" {
		var err error
		if d, err = time.ParseDuration(r.KeepNewerThan); err != nil || d <= 0 {
			return types.Project{}, fmt.Errorf("keep_newer_than %q: a positive Go duration such as 720h: %w", r.KeepNewerThan, errdefs.ErrInvalidArgument)
		}
	}
	proj, err := s.store.Projects.SetRetention(ctx, p.Tenant, project, versions.Retention{KeepLast: r.KeepLast, KeepNewerThan: d})
	if err != nil {
		return types.Project{}, err
	}
	return views.Project(proj), nil
}

// ListProjects lists the tenant's projects.
func (s *Service) ListProjects(ctx context.Context, p types.Principal) ([]types.Project, error) {
	ps, err := s.store.Projects.ListProjects(ctx, p.Tenant)
	if err != nil {
		return nil, err
	}
	idles, err := s.store.Projects.ProjectIdles(ctx, p.Tenant)
	if err != nil {
		return nil, err
	}
	out := make([]types.Project, 0, len(ps))
	for _, x := range ps {
		proj := views.Project(x)
		proj.Idle = idleSetting(idles[x.Name])
		out = append(out, proj)
	}
	return out, nil
}

// GetProject returns one project.
func (s *Service) GetProject(ctx context.Context, p types.Principal, name string) (types.Project, error) {
	if err := ValidateName("project", name); err != nil {
		return types.Project{}, err
	}
	proj, err := s.store.Projects.GetProject(ctx, p.Tenant, name)
	if err != nil {
		return types.Project{}, err
	}
	out, err := s.withProjectIdle(ctx, p.Tenant, views.Project(proj))
	if err != nil {
		return types.Project{}, err
	}
	out.CurrentBase = s.currentBase(ctx, proj)
	return s.withPool(ctx, p.Tenant, out), nil
}

// DeleteProject deletes a project that has no live instances, then the
// manifests in its repository that no other row owns (a project of the
// tenant may use one as its base); their blobs go at the next sweep. A
// manifest left by a failure here is found by the sweep's orphan scan. Its
// volume archives are deleted after the project (the objects, then the
// records; workspace.Volumes.DeleteOrphanArchives): a failure there is
// logged, not answered, as the project is gone.
func (s *Service) DeleteProject(ctx context.Context, p types.Principal, name string) error {
	if err := ValidateName("project", name); err != nil {
		return err
	}
	images, err := s.store.Projects.DeleteProject(ctx, p.Tenant, name)
	if err != nil {
		return err
	}
	repo := names.ProjectRepo(p.Tenant, name)
	for _, ref := range images {
		r, digest, ok := strings.Cut(ref, "@")
		if !ok || r != repo {
			continue // a base image: not the project's
		}
		s.content.Drop(ctx, registry.Image{Repo: r, Digest: digest})
	}
	s.vols.DeleteOrphanArchives(ctx)
	return nil
}

// ListVersions lists a project's versions, oldest first.
func (s *Service) ListVersions(ctx context.Context, p types.Principal, project string) ([]types.Version, error) {
	if err := ValidateName("project", project); err != nil {
		return nil, err
	}
	vs, err := s.store.Versions.ListVersions(ctx, p.Tenant, project)
	if err != nil {
		return nil, err
	}
	out := make([]types.Version, 0, len(vs))
	for _, v := range vs {
		out = append(out, views.Version(v))
	}
	return out, nil
}

// GetVersion returns one version.
func (s *Service) GetVersion(ctx context.Context, p types.Principal, project string, n int) (types.Version, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Version{}, err
	}
	v, err := s.store.Versions.GetVersion(ctx, p.Tenant, project, n)
	if err != nil {
		return types.Version{}, err
	}
	return views.Version(v), nil
}

// SetCurrent switches the project's current version by compare-and-swap.
func (s *Service) SetCurrent(ctx context.Context, p types.Principal, project string, req types.SetCurrentRequest) (types.Project, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Project{}, err
	}
	if req.Version <= 0 {
		return types.Project{}, fmt.Errorf("version %d: must be a positive version number: %w", req.Version, errdefs.ErrInvalidArgument)
	}
	// A blind write could undo a switch or save the caller never saw.
	if req.ExpectedCurrent == nil {
		return types.Project{}, fmt.Errorf("expected_current: required (the current version the switch replaces; 0 = none): %w", errdefs.ErrInvalidArgument)
	}
	if *req.ExpectedCurrent < 0 {
		return types.Project{}, fmt.Errorf("expected_current %d: %w", *req.ExpectedCurrent, errdefs.ErrInvalidArgument)
	}
	proj, err := s.store.Versions.SetCurrent(ctx, p.Tenant, project, req.Version, *req.ExpectedCurrent)
	if err != nil {
		return types.Project{}, err
	}
	return views.Project(proj), nil
}

// PinVersion pins or unpins a version; pinned versions are kept by retention.
func (s *Service) PinVersion(ctx context.Context, p types.Principal, project string, n int, pinned bool) (types.Version, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Version{}, err
	}
	v, err := s.store.Versions.Pin(ctx, p.Tenant, project, n, pinned)
	if err != nil {
		return types.Version{}, err
	}
	return views.Version(v), nil
}

// projectSpec loads a project and its declared spec.
func (s *Service) projectSpec(ctx context.Context, tenant, project string) (versions.Project, spec.Project, error) {
	proj, err := s.store.Projects.GetProject(ctx, tenant, project)
	if err != nil {
		return proj, spec.Project{}, err
	}
	ps, err := spec.Parse(proj.Spec)
	return proj, ps, err
}
