package envd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/envd-dev/envd/internal/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/versions"
)

// Sweeper deletes the registry's blobs that no manifest references: the
// embedded registry. A node whose registry is external has none.
type Sweeper interface {
	GarbageCollect(ctx context.Context) (registry.GCStats, error)
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
func (s *Service) GC(ctx context.Context, p Principal, req GCRequest, idempotencyKey string) (Operation, error) {
	if !p.Admin {
		return Operation{}, fmt.Errorf("gc needs an admin token: %w", errdefs.ErrPermissionDenied)
	}
	job := gcJob{DryRun: req.DryRun}
	return s.startOp(ctx, p, "gc", "registry", "registry", idempotencyKey, req, job, func(ctx context.Context, oc *opCtx) (any, error) {
		return s.runGC(ctx, oc, job)
	})
}

func (s *Service) runGC(ctx context.Context, oc *opCtx, job gcJob) (GCResult, error) {
	res := GCResult{DryRun: job.DryRun, Versions: []GCVersion{}}
	projects, err := s.store.RetainedProjects(ctx)
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
			res.Versions = append(res.Versions, GCVersion{Tenant: proj.Tenant, Project: proj.Name, Version: v.Number, Image: v.Image, SizeBytes: v.SizeBytes})
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
	oc.event(ctx, "swept", fmt.Sprintf("blobs %d -> %d, %d -> %d bytes", st.BlobsBefore, st.BlobsAfter, st.BytesBefore, st.BytesAfter), nil)
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

// sweep runs the registry's blob sweep while no push of this node is
// between its blob uploads and its manifest (those blobs are referenced by
// nothing yet and would go).
func (s *Service) sweep(ctx context.Context) (registry.GCStats, error) {
	s.pushes.Lock()
	defer s.pushes.Unlock()
	return s.cfg.Sweeper.GarbageCollect(ctx)
}

// push runs a registry push that must not overlap a sweep.
func (s *Service) push(f func() error) error {
	s.pushes.RLock()
	defer s.pushes.RUnlock()
	return f()
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
