package envd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/versions"
)

// Sweeper deletes the registry's blobs that no manifest references: the
// embedded registry. A node whose registry is external has none.
type Sweeper interface {
	GarbageCollect(ctx context.Context, opts registry.GCOptions) (registry.GCStats, error)
}

// gcJob is what a gc operation does; running it again is safe (versions
// already marked are finished first).
type gcJob struct {
	DryRun bool `json:"dry_run,omitempty"`
}

// GC starts an operation of kind "gc" (admin only): for every project with
// a retention policy, the versions it does not keep are marked deleting,
// their manifests deleted from the registry, then their rows; last, the
// registry's blobs that no manifest references any more are swept (when
// this node runs the registry). Current, pinned and referenced versions are
// never collected (see versions.Store.MarkCollectable).
func (s *Service) GC(ctx context.Context, p types.Principal, req types.GCRequest, idempotencyKey string) (types.Operation, error) {
	if !p.Admin {
		return types.Operation{}, fmt.Errorf("gc needs an admin token: %w", errdefs.ErrPermissionDenied)
	}
	job := gcJob{DryRun: req.DryRun}
	return s.startOp(ctx, p, types.OpKindGC, "registry", "registry", idempotencyKey, req, job, func(ctx context.Context, oc *opCtx) (any, error) {
		return s.runGC(ctx, oc, job)
	})
}

func (s *Service) runGC(ctx context.Context, oc *opCtx, job gcJob) (types.GCResult, error) {
	res := types.GCResult{DryRun: job.DryRun, Versions: []types.GCVersion{}}
	projects, err := s.store.GCProjects(ctx)
	if err != nil {
		return res, err
	}
	for _, proj := range projects {
		vs, err := s.store.MarkCollectable(ctx, proj.Tenant, proj.Name, time.Now(), job.DryRun)
		if err != nil {
			return res, fmt.Errorf("project %s/%s: %w", proj.Tenant, proj.Name, err)
		}
		for _, v := range vs {
			if !job.DryRun {
				if err := s.collectVersion(ctx, proj, v); err != nil {
					return res, err
				}
			}
			res.Versions = append(res.Versions, types.GCVersion{Tenant: proj.Tenant, Project: proj.Name, Version: v.Number, Image: v.Image, SizeBytes: v.SizeBytes})
		}
		if len(vs) > 0 {
			oc.event(ctx, "collected", fmt.Sprintf("%s/%s: %d versions", proj.Tenant, proj.Name, len(vs)), nil)
		}
	}
	if res.OrphanVolumes, err = s.orphanVolumes(ctx, job.DryRun); err != nil {
		return res, err
	}
	if job.DryRun {
		res.Note = "dry run: nothing deleted"
		return res, nil
	}
	if s.cfg.Sweeper == nil {
		res.Note = "the registry is external: its blobs are swept where it runs"
		return res, nil
	}
	st, err := s.sweep(ctx)
	if err != nil {
		return res, err
	}
	res.Swept = true
	res.BlobsBefore, res.BlobsAfter, res.BytesBefore, res.BytesAfter = st.BlobsBefore, st.BlobsAfter, st.BytesBefore, st.BytesAfter
	res.OrphanManifests = st.OrphanManifests
	oc.event(ctx, "swept", fmt.Sprintf("blobs %d -> %d, %d -> %d bytes; %d orphan manifests", st.BlobsBefore, st.BlobsAfter,
		st.BytesBefore, st.BytesAfter, len(st.OrphanManifests)), nil)
	return res, nil
}

// collectVersion deletes a version marked deleting: its manifest (unless
// another live version has the same image), then its row.
func (s *Service) collectVersion(ctx context.Context, proj versions.Project, v versions.Version) error {
	shared, err := s.store.ImageInUse(ctx, v.Image)
	if err != nil {
		return err
	}
	if !shared {
		repo, digest, ok := strings.Cut(v.Image, "@")
		if !ok {
			return fmt.Errorf("version %d of %s: image %q is not repo@digest: %w", v.Number, proj.Name, v.Image, errdefs.ErrFailedPrecondition)
		}
		if err := s.reg.DeleteManifest(ctx, registry.Image{Repo: repo, Digest: digest}); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("version %d of %s: %w", v.Number, proj.Name, err)
		}
	}
	if err := s.store.DeleteVersion(ctx, proj.Tenant, proj.Name, v.Number); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

// sweep deletes the manifests of project repositories that no row owns,
// then the registry's blobs no manifest references. It runs under the
// cluster-wide sweep lock (versions.Store.Sweep): no upload lease of any
// node is held, so no content pushed but not yet committed is in the
// registry, and the owned images read here are all there will be until the
// sweep ends.
func (s *Service) sweep(ctx context.Context) (registry.GCStats, error) {
	var st registry.GCStats
	err := s.store.Sweep(ctx, func(ctx context.Context) error {
		owned, err := s.store.OwnedImages(ctx, reposPrefix)
		if err != nil {
			return err
		}
		st, err = s.cfg.Sweeper.GarbageCollect(ctx, registry.GCOptions{
			OrphanRepos: isProjectRepo,
			Owned:       func(ref string) bool { return owned[ref] },
		})
		return err
	})
	return st, err
}

// reposPrefix is the prefix of every repository envd pushes to: project
// repositories (projectRepo) and imported images' (imageRepo).
const reposPrefix = "envd/"

// isProjectRepo is true for a project's repository (envd/TENANT/PROJECT),
// false for imported images' (envd/images/NAME) and anything not envd's.
func isProjectRepo(repo string) bool {
	rest, ok := strings.CutPrefix(repo, reposPrefix)
	if !ok || strings.HasPrefix(repo, imageRepo("")) {
		return false
	}
	tenant, project, ok := strings.Cut(rest, "/")
	return ok && tenant != "" && project != "" && !strings.Contains(project, "/") && repo == projectRepo(tenant, project)
}

// upload runs push under an upload lease (versions.Store.BeginUpload): no
// sweep on any node deletes what it pushes until the lease ends. The caller
// commits with the lease and then ends it.
func (s *Service) upload(ctx context.Context, push func() error) (*versions.Upload, error) {
	up, err := s.store.BeginUpload(ctx)
	if err != nil {
		return nil, err
	}
	if err := push(); err != nil {
		up.End()
		return nil, err
	}
	return up, nil
}

// dropManifest deletes img's manifest unless a row owns it (a version not
// being deleted, an imported image): an image pushed for a version whose
// commit failed, or a deleted project's. Its blobs go at the next sweep. A
// failure is only logged: the sweep's orphan scan finds the manifest too.
func (s *Service) dropManifest(ctx context.Context, img registry.Image) {
	ctx, cancel := detach(ctx, time.Minute)
	defer cancel()
	owned, err := s.store.ImageOwned(ctx, img.Ref())
	if err == nil && !owned {
		err = s.reg.DeleteManifest(ctx, img)
	}
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		s.log.Warn("delete a manifest no row owns", "image", img.Ref(), "err", err)
	}
}

// orphanVolumes removes (unless dryRun) this node's volumes whose project
// no longer exists: a deleted project's volumes stay on every node that
// had them until a gc there. It returns them as tenant/project/volume.
func (s *Service) orphanVolumes(ctx context.Context, dryRun bool) ([]string, error) {
	if s.cfg.Volumes == nil {
		return nil, nil
	}
	owners, err := s.cfg.Volumes.Owners(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, owner := range owners {
		tenant, project, ok := strings.Cut(owner, "/")
		if !ok {
			continue
		}
		if _, err := s.store.GetProject(ctx, tenant, project); !errors.Is(err, errdefs.ErrNotFound) {
			if err != nil {
				return out, err
			}
			continue
		}
		names, err := s.cfg.Volumes.List(ctx, owner)
		if err != nil {
			return out, err
		}
		for _, name := range names {
			if !dryRun {
				if err := s.cfg.Volumes.Remove(ctx, owner, name); err != nil {
					return out, err
				}
			}
			out = append(out, owner+"/"+name)
		}
	}
	return out, nil
}
