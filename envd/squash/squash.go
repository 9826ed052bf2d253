// Package squash keeps versions shallow: a version whose image has more
// layers than a threshold, and that new instances or saves build on (the
// current version, or one a live instance runs from), is squashed in the
// background into an image of its base's layers plus one layer with the
// same content. Saves stack one layer on the version an instance sits on,
// so without it a project saved 300 times pushes, verifies and lazily
// mounts 300 layers.
//
// A squash never changes what a version is: the merged layer is checked,
// before anything is recorded, by applying both the original stack and the
// squashed image with containerd's applier and comparing the trees; the
// version row then points at the new image (compare-and-swap on the old
// one), and the old image stays owned while an instance may still read its
// layers (versions.Content.OwnedImages).
package squash

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/snapshotter"
	"github.com/envd-dev/envd/versions"
)

// Store is what a squash needs of the store.
type Store interface {
	ClaimSquash(ctx context.Context, minLayers int, stale time.Duration) (versions.SquashClaim, error)
	ReleaseSquash(ctx context.Context, c versions.SquashClaim) error
}

// Registry is what a squash needs of the registry (*registry.Client).
type Registry interface {
	Get(ctx context.Context, ref string) (registry.Image, error)
	OpenLayer(ctx context.Context, img registry.Image, i int) (io.ReadCloser, error)
	Squash(ctx context.Context, img, base registry.Image, layer registry.LayerFile, targetRepo string, annotations map[string]string) (registry.Image, error)
}

// Bases finds the imported base image an image sits on (*builder.Builder).
type Bases interface {
	BaseOf(ctx context.Context, image string) (registry.Image, error)
}

// Content pushes under an upload lease (*gc.Content).
type Content interface {
	Upload(ctx context.Context, push func() error) (*versions.Upload, error)
	Drop(ctx context.Context, img registry.Image)
}

// Squasher squashes deep versions, one at a time.
type Squasher struct {
	Store    Store
	Reg      Registry
	Bases    Bases
	Content  Content
	WorkDir  string // scratch space: the layers of one version, twice its tree
	MaxDepth int    // a version with more layers than this is squashed
	// Stale is how long a claim holds: a node that died squashing, or a
	// version whose squash failed, is taken again after it.
	Stale time.Duration
	Log   *slog.Logger
}

// Result says what one squash did.
type Result struct {
	Claim        versions.SquashClaim
	Image        string // the version's new image
	LayersBefore int
	LayersAfter  int
	Merged       MergeStats
	LayerBytes   int64 // the merged layer, encoded
	Took, Verify time.Duration
}

// Run squashes what there is to squash every interval until ctx ends.
func (s *Squasher) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for ctx.Err() == nil {
			res, err := s.Once(ctx)
			if err != nil && res.Claim.Project == "" {
				if !errors.Is(err, errdefs.ErrNotFound) && ctx.Err() == nil {
					s.Log.Warn("squash: look for deep versions", "err", err) // the database: try at the next tick
				}
				break // nothing to do, or nothing can be done now
			}
			if err != nil {
				s.Log.Warn("squash failed", "project", res.Claim.Project, "version", res.Claim.Number, "err", err)
				continue
			}
			s.Log.Info("squashed", "project", res.Claim.Project, "version", res.Claim.Number, "layers_before", res.LayersBefore,
				"layers_after", res.LayersAfter, "layer_bytes", res.LayerBytes, "took", res.Took, "verify", res.Verify)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Once claims one version and squashes it. Nothing to squash is
// errdefs.ErrNotFound with an empty Result.Claim.
func (s *Squasher) Once(ctx context.Context) (Result, error) {
	start := time.Now()
	c, err := s.Store.ClaimSquash(ctx, s.MaxDepth, s.Stale)
	if err != nil {
		return Result{}, err
	}
	res, err := s.squash(ctx, c)
	res.Claim, res.Took = c, time.Since(start)
	if err != nil {
		// The claim stays until it is stale: a version that cannot be
		// squashed is not retried in a loop. One that changed meanwhile
		// may be taken again at once.
		if errors.Is(err, errdefs.ErrConflict) {
			_ = s.Store.ReleaseSquash(context.WithoutCancel(ctx), c)
		}
		return res, fmt.Errorf("squash version %d of %q: %w", c.Number, c.Project, err)
	}
	return res, nil
}

func (s *Squasher) squash(ctx context.Context, c versions.SquashClaim) (Result, error) {
	var res Result
	img, err := s.Reg.Get(ctx, c.Image)
	if err != nil {
		return res, err
	}
	base, err := s.Bases.BaseOf(ctx, c.Image)
	if err != nil {
		return res, err
	}
	keep := len(base.Layers)
	res.LayersBefore = len(img.Layers)
	if len(img.Layers)-keep < 2 {
		return res, fmt.Errorf("%d layers above its base: nothing to squash: %w", len(img.Layers)-keep, errdefs.ErrFailedPrecondition)
	}

	if err := os.MkdirAll(s.WorkDir, 0o700); err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp(s.WorkDir, "squash-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	// Each layer is read three times (two merge passes, the check): fetch
	// each once, uncompressed.
	paths := make([]string, len(img.Layers))
	for i := range img.Layers {
		paths[i] = filepath.Join(dir, fmt.Sprintf("layer-%d.tar", i))
		if err := fetch(ctx, s.Reg, img, i, paths[i]); err != nil {
			return res, err
		}
	}
	open := func(_ context.Context, i int) (io.ReadCloser, error) { return os.Open(paths[i]) }
	user := func(ctx context.Context, i int) (io.ReadCloser, error) { return open(ctx, keep+i) }

	mergedPath := filepath.Join(dir, "merged.tar")
	f, err := os.Create(mergedPath)
	if err != nil {
		return res, err
	}
	res.Merged, err = Merge(ctx, user, len(img.Layers)-keep, dir, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return res, fmt.Errorf("merge: %w", err)
	}
	vstart := time.Now()
	if err := Verify(ctx, open, keep, len(img.Layers), mergedPath, filepath.Join(dir, "trees")); err != nil {
		return res, fmt.Errorf("check: %w", err)
	}
	res.Verify = time.Since(vstart)
	for _, p := range paths {
		_ = os.Remove(p)
	}

	layer, err := snapshotter.Encode(ctx, mergedPath, dir, snapshotter.EncodeOptions{
		Compression: compressionOf(img.Layers[len(img.Layers)-1]), PrioritizedFiles: c.Prefetch})
	if err != nil {
		return res, fmt.Errorf("encode: %w", err)
	}
	res.LayerBytes = layer.Size
	var out registry.Image
	up, err := s.Content.Upload(ctx, func() (err error) {
		out, err = s.Reg.Squash(ctx, img, base, registry.LayerFile{
			Path: layer.Path, MediaType: layer.MediaType, Digest: layer.Digest.String(), DiffID: layer.DiffID.String(),
			Size: layer.Size, Annotations: layer.Annotations,
		}, names.ProjectRepo(c.Tenant, c.Project), map[string]string{"org.envd.squashed-from": c.Image})
		return err
	})
	if err != nil {
		return res, fmt.Errorf("push: %w", err)
	}
	defer up.End()
	if err := up.FinishSquash(ctx, c, out.Ref(), len(out.Layers)); err != nil {
		s.Content.Drop(ctx, out)
		return res, err
	}
	res.Image, res.LayersAfter = out.Ref(), len(out.Layers)
	return res, nil
}

func fetch(ctx context.Context, reg Registry, img registry.Image, i int, path string) error {
	rc, err := reg.OpenLayer(ctx, img, i)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, rc); err != nil {
		f.Close()
		return fmt.Errorf("layer %d of %s: %w", i, img.Ref(), err)
	}
	return f.Close()
}

// compressionOf keeps the encoding the version's own saves used: eStargz
// (lazily pullable) unless its top layer is zstd or plain gzip.
func compressionOf(l registry.LayerInfo) snapshotter.Compression {
	switch {
	case l.Annotations["containerd.io/snapshot/stargz/toc.digest"] != "":
		return snapshotter.Estargz
	case l.MediaType == "application/vnd.oci.image.layer.v1.tar+zstd":
		return snapshotter.Zstd
	default:
		return snapshotter.Gzip
	}
}
