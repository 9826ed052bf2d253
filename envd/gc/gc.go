// Package gc owns the lifetime of envd's content in the registry: the
// upload leases under which saves push and the dropping of manifests no
// row owns (Content), and the GC operation that applies the projects'
// retention, deletes the collected versions' manifests, sweeps the
// registry's unreferenced blobs and removes a deleted project's volumes
// left on this node (Collector). It needs the store's retention and
// content reads, a manifest deleter, and optionally the registry's
// sweeper and the node's volume storage.
package gc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/versions"
)

// Sweeper deletes the registry's blobs that no manifest references: the
// embedded registry. A node whose registry is external has none.
type Sweeper interface {
	GarbageCollect(ctx context.Context, opts registry.GCOptions) (registry.GCStats, error)
}

// Store is what a GC needs of the store.
type Store interface {
	GCProjects(ctx context.Context) ([]versions.Project, error)
	MarkCollectable(ctx context.Context, tenant, project string, now time.Time, dryRun bool) ([]versions.Version, error)
	ImageInUse(ctx context.Context, image string) (bool, error)
	DeleteVersion(ctx context.Context, tenant, project string, number int) error
	Sweep(ctx context.Context, fn func(ctx context.Context) error) error
	OwnedImages(ctx context.Context, repoPrefix string) (map[string]bool, error)
	GetProject(ctx context.Context, tenant, name string) (versions.Project, error)
	ExpireCheckpoints(ctx context.Context, tenant, project string, now time.Time, dryRun bool) ([]versions.Checkpoint, error)
}

// Volumes is what a GC needs of the node's volume storage.
type Volumes interface {
	Owners(ctx context.Context) ([]string, error)
	List(ctx context.Context, owner string) ([]string, error)
	Remove(ctx context.Context, owner, name string) error
}

// Operations starts operations.
type Operations interface {
	Start(ctx context.Context, p types.Principal, spec ops.Spec) (types.Operation, error)
}

// Collector runs GC operations.
type Collector struct {
	store   Store
	reg     ManifestDeleter
	ops     Operations
	sweeper Sweeper // nil: the registry is external
	volumes Volumes // nil: this node has no volumes
	// archives deletes the objects of archives whose records lost their
	// project (those of expired checkpoints); nil: none here.
	archives Archives
	// memory recounts memory images' stored bytes after checkpoints with
	// memory expired; nil: none here.
	memory MemoryRecounter
}

// MemoryRecounter recounts what a project's memory images add to its
// tenant's stored bytes (checkpoint.Checkpoints).
type MemoryRecounter interface {
	RecountMemory(ctx context.Context, tenant, project string)
}

// WithMemoryRecount sets what recounts memory images after a GC expired
// checkpoints holding one, and returns c.
func (c *Collector) WithMemoryRecount(m MemoryRecounter) *Collector {
	c.memory = m
	return c
}

// Archives deletes the objects of archives no project holds any more
// (workspace.Volumes.DeleteOrphanArchives).
type Archives interface {
	DeleteOrphanArchives(ctx context.Context)
}

// WithArchives sets what deletes the archives of the checkpoints a GC
// expires, and returns c.
func (c *Collector) WithArchives(a Archives) *Collector {
	c.archives = a
	return c
}

// NewCollector makes a collector; sweeper and volumes may be nil.
func NewCollector(store Store, reg ManifestDeleter, ops Operations, sweeper Sweeper, volumes Volumes) *Collector {
	return &Collector{store: store, reg: reg, ops: ops, sweeper: sweeper, volumes: volumes}
}

// Job is what a gc operation does; running it again is safe (versions
// already marked are finished first).
type Job struct {
	DryRun bool `json:"dry_run,omitempty"`
}

// Start starts an operation of kind "gc" (admin only): for every project
// with a retention policy, the versions it does not keep are marked
// deleting, their manifests deleted from the registry, then their rows;
// last, the registry's blobs that no manifest references any more are
// swept (when this node runs the registry). Current, pinned and referenced
// versions are never collected (see versions.Versions.MarkCollectable).
func (c *Collector) Start(ctx context.Context, p types.Principal, req types.GCRequest, idempotencyKey string) (types.Operation, error) {
	if !p.Admin {
		return types.Operation{}, fmt.Errorf("gc needs an admin token: %w", errdefs.ErrPermissionDenied)
	}
	job := Job{DryRun: req.DryRun}
	return c.ops.Start(ctx, p, ops.Spec{Kind: types.OpKindGC, Target: "registry", Scope: "registry",
		IdempotencyKey: idempotencyKey, Asked: req, Job: job,
		Run: func(ctx context.Context, op *ops.Op) (any, error) { return c.Run(ctx, op, job) }})
}

// Run does a GC.
func (c *Collector) Run(ctx context.Context, op *ops.Op, job Job) (types.GCResult, error) {
	res := types.GCResult{DryRun: job.DryRun, Versions: []types.GCVersion{}}
	projects, err := c.store.GCProjects(ctx)
	if err != nil {
		return res, err
	}
	for _, proj := range projects {
		// Checkpoints first, as units: one expired releases its version,
		// which MarkCollectable then returns with the others.
		cps, err := c.store.ExpireCheckpoints(ctx, proj.Tenant, proj.Name, time.Now(), job.DryRun)
		if err != nil {
			return res, fmt.Errorf("project %s/%s: %w", proj.Tenant, proj.Name, err)
		}
		for _, cp := range cps {
			res.Checkpoints = append(res.Checkpoints, types.GCCheckpoint{Tenant: proj.Tenant, Project: proj.Name, ID: cp.Number,
				Version: cp.Version, Archives: len(cp.Archives), Bytes: cp.Bytes()})
		}
		if len(cps) > 0 {
			op.Event(ctx, "checkpoints", fmt.Sprintf("%s/%s: %d checkpoints expired", proj.Tenant, proj.Name, len(cps)), nil)
			if !job.DryRun && c.archives != nil {
				c.archives.DeleteOrphanArchives(ctx)
			}
			if !job.DryRun && c.memory != nil && slices.ContainsFunc(cps, func(cp versions.Checkpoint) bool { return cp.Memory.Image != "" }) {
				c.memory.RecountMemory(ctx, proj.Tenant, proj.Name)
			}
		}
		vs, err := c.store.MarkCollectable(ctx, proj.Tenant, proj.Name, time.Now(), job.DryRun)
		if err != nil {
			return res, fmt.Errorf("project %s/%s: %w", proj.Tenant, proj.Name, err)
		}
		for _, v := range vs {
			if !job.DryRun {
				if err := c.collectVersion(ctx, proj, v); err != nil {
					return res, err
				}
			}
			res.Versions = append(res.Versions, types.GCVersion{Tenant: proj.Tenant, Project: proj.Name, Version: v.Number, Image: v.Image, SizeBytes: v.SizeBytes})
		}
		if len(vs) > 0 {
			op.Event(ctx, "collected", fmt.Sprintf("%s/%s: %d versions", proj.Tenant, proj.Name, len(vs)), nil)
		}
	}
	if res.OrphanVolumes, err = c.orphanVolumes(ctx, job.DryRun); err != nil {
		return res, err
	}
	if job.DryRun {
		res.Note = "dry run: nothing deleted"
		return res, nil
	}
	if c.sweeper == nil {
		res.Note = "the registry is external: its blobs are swept where it runs"
		return res, nil
	}
	st, err := c.sweep(ctx)
	if err != nil {
		return res, err
	}
	res.Swept = true
	res.BlobsBefore, res.BlobsAfter, res.BytesBefore, res.BytesAfter = st.BlobsBefore, st.BlobsAfter, st.BytesBefore, st.BytesAfter
	res.OrphanManifests = st.OrphanManifests
	op.Event(ctx, "swept", fmt.Sprintf("blobs %d -> %d, %d -> %d bytes; %d orphan manifests", st.BlobsBefore, st.BlobsAfter,
		st.BytesBefore, st.BytesAfter, len(st.OrphanManifests)), nil)
	return res, nil
}

// collectVersion deletes a version marked deleting: its manifest (unless
// another live version has the same image), then its row.
func (c *Collector) collectVersion(ctx context.Context, proj versions.Project, v versions.Version) error {
	shared, err := c.store.ImageInUse(ctx, v.Image)
	if err != nil {
		return err
	}
	if !shared {
		repo, digest, ok := strings.Cut(v.Image, "@")
		if !ok {
			return fmt.Errorf("version %d of %s: image %q is not repo@digest: %w", v.Number, proj.Name, v.Image, errdefs.ErrFailedPrecondition)
		}
		if err := c.reg.DeleteManifest(ctx, registry.Image{Repo: repo, Digest: digest}); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("version %d of %s: %w", v.Number, proj.Name, err)
		}
	}
	if err := c.store.DeleteVersion(ctx, proj.Tenant, proj.Name, v.Number); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

// sweep deletes the manifests of project repositories that no row owns,
// then the registry's blobs no manifest references. It runs under the
// cluster-wide sweep lock (versions.Content.Sweep): no upload lease of any
// node is held, so no content pushed but not yet committed is in the
// registry, and the owned images read here are all there will be until the
// sweep ends.
func (c *Collector) sweep(ctx context.Context) (registry.GCStats, error) {
	var st registry.GCStats
	err := c.store.Sweep(ctx, func(ctx context.Context) error {
		owned, err := c.store.OwnedImages(ctx, names.ReposPrefix)
		if err != nil {
			return err
		}
		st, err = c.sweeper.GarbageCollect(ctx, registry.GCOptions{
			OrphanRepos: IsProjectRepo,
			Owned:       func(ref string) bool { return owned[ref] },
		})
		return err
	})
	return st, err
}

// IsProjectRepo is true for a project's repository (envd/TENANT/PROJECT),
// false for imported images' (envd/images/NAME) and anything not envd's.
func IsProjectRepo(repo string) bool {
	rest, ok := strings.CutPrefix(repo, names.ReposPrefix)
	if !ok || strings.HasPrefix(repo, names.ImageRepo("")) {
		return false
	}
	tenant, project, ok := strings.Cut(rest, "/")
	return ok && tenant != "" && project != "" && !strings.Contains(project, "/") && repo == names.ProjectRepo(tenant, project)
}

// orphanVolumes removes (unless dryRun) this node's volumes whose project
// no longer exists: a deleted project's volumes stay on every node that
// had them until a gc there. It returns them as tenant/project/volume.
func (c *Collector) orphanVolumes(ctx context.Context, dryRun bool) ([]string, error) {
	if c.volumes == nil {
		return nil, nil
	}
	owners, err := c.volumes.Owners(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, owner := range owners {
		tenant, project, ok := strings.Cut(owner, "/")
		if !ok {
			continue
		}
		if _, err := c.store.GetProject(ctx, tenant, project); !errors.Is(err, errdefs.ErrNotFound) {
			if err != nil {
				return out, err
			}
			continue
		}
		vols, err := c.volumes.List(ctx, owner)
		if err != nil {
			return out, err
		}
		for _, name := range vols {
			if !dryRun {
				if err := c.volumes.Remove(ctx, owner, name); err != nil {
					return out, err
				}
			}
			out = append(out, owner+"/"+name)
		}
	}
	return out, nil
}
