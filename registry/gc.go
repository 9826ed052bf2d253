package registry

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/distribution/distribution/v3"
	"github.com/distribution/distribution/v3/registry/storage"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/reference"
	"github.com/opencontainers/go-digest"

	"github.com/envd-dev/envd/errdefs"
)

// blobsRoot is where distribution keeps every blob, as
// blobsRoot/sha256/<2 hex>/<hex>/data, shared by all repositories.
const blobsRoot = "/docker/registry/v2/blobs"

// GCStats reports a sweep: blobs and their bytes in the storage before and
// after, and the orphan manifests deleted ("repo@digest").
type GCStats struct {
	BlobsBefore, BlobsAfter int
	BytesBefore, BytesAfter int64
	OrphanManifests         []string
}

// GCOptions selects the manifests a sweep deletes before it marks.
type GCOptions struct {
	// OrphanRepos says whether a repository's manifests are scanned for
	// orphans; nil scans none.
	OrphanRepos func(repo string) bool
	// Owned says whether a row owns "repo@digest"; a scanned manifest it
	// does not own is deleted, and its blobs go in the same sweep unless
	// another manifest references them.
	Owned func(ref string) bool
}

// GarbageCollect deletes the blobs that no manifest of any repository references
// (distribution's mark and sweep over the storage driver, RemoveUntagged false:
// our manifests are pushed by digest, untagged, and must all be kept).
// The caller must make sure no push is between its blob uploads and its manifest put:
// such blobs are not referenced yet and would be swept.
//
// Manifests count as blobs: a deleted manifest's own blob goes too. A
// repository's links to swept blobs are removed with them, so the blobs
// answer 404 there and a later push uploads them again. Uploads in progress
// are left alone. A storage failure is errdefs.ErrUnavailable.
//
// With opts.OrphanRepos and opts.Owned set, the manifests of the selected
// repositories that opts.Owned does not own are deleted first. The caller
// must make sure no upload of such a manifest is in flight either.
func (s *Server) GarbageCollect(ctx context.Context, opts GCOptions) (GCStats, error) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	var st GCStats
	var err error
	if st.BlobsBefore, st.BytesBefore, err = s.countBlobs(ctx); err != nil {
		return st, err
	}
	if opts.OrphanRepos != nil && opts.Owned != nil && st.BlobsBefore > 0 {
		if st.OrphanManifests, err = s.deleteOrphanManifests(ctx, opts); err != nil {
			return st, err
		}
	}
	// Distribution's mark fails on a storage without repositories, and
	// without blobs there is nothing to sweep anyway.
	if st.BlobsBefore > 0 {
		if err := s.markAndSweep(ctx); err != nil {
			return st, err
		}
	}
	if st.BlobsAfter, st.BytesAfter, err = s.countBlobs(ctx); err != nil {
		return st, err
	}
	return st, nil
}

// markAndSweep runs distribution's collector. Facts about it that matter:
//   - Quiet must be set, or it prints every repository and blob to stdout.
//   - It logs each deletion at Info through dcontext, which falls back to
//     logrus' standard logger; the context carries ours instead.
//   - It formats its errors with %v, so driver error types are lost: every
//     failure is reported as ErrUnavailable.
//   - It deletes through the driver (its Vacuum), so the Namespace needs no
//     storage.EnableDelete.
//   - It also drops a repository's links to blobs that no manifest marked
//     so far references (repositories are walked in name order), so such a
//     blob may stay stored but answer 404 in that repository.
func (s *Server) markAndSweep(ctx context.Context) error {
	ctx = withRegistryLogger(ctx, s.log)
	ns, err := storage.NewRegistry(ctx, s.driver)
	if err != nil {
		return fmt.Errorf("garbage collect: open storage: %w", err)
	}
	if err := storage.MarkAndSweep(ctx, s.driver, ns, storage.GCOpts{Quiet: true}); err != nil {
		return storageErr(ctx, "garbage collect", err)
	}
	return nil
}

// deleteOrphanManifests deletes the manifests of the repositories
// opts.OrphanRepos selects that opts.Owned does not own, and returns them.
func (s *Server) deleteOrphanManifests(ctx context.Context, opts GCOptions) ([]string, error) {
	ctx = withRegistryLogger(ctx, s.log)
	ns, err := storage.NewRegistry(ctx, s.driver)
	if err != nil {
		return nil, fmt.Errorf("orphan manifests: open storage: %w", err)
	}
	repos, ok := ns.(distribution.RepositoryEnumerator)
	if !ok {
		return nil, fmt.Errorf("orphan manifests: storage cannot list repositories")
	}
	type orphan struct {
		repo string
		dgst digest.Digest
	}
	var orphans []orphan
	err = repos.Enumerate(ctx, func(repo string) error {
		if !opts.OrphanRepos(repo) {
			return nil
		}
		named, err := reference.WithName(repo)
		if err != nil {
			return fmt.Errorf("repository %q: %w", repo, err)
		}
		r, err := ns.Repository(ctx, named)
		if err != nil {
			return err
		}
		ms, err := r.Manifests(ctx)
		if err != nil {
			return err
		}
		me, ok := ms.(distribution.ManifestEnumerator)
		if !ok {
			return fmt.Errorf("repository %q: cannot list manifests", repo)
		}
		err = me.Enumerate(ctx, func(d digest.Digest) error {
			if !opts.Owned(repo + "@" + d.String()) {
				orphans = append(orphans, orphan{repo, d})
			}
			return nil
		})
		if errors.As(err, new(storagedriver.PathNotFoundError)) {
			return nil // a repository without manifests
		}
		return err
	})
	if err != nil {
		return nil, storageErr(ctx, "orphan manifests", err)
	}
	vacuum := storage.NewVacuum(ctx, s.driver)
	out := make([]string, 0, len(orphans))
	for _, o := range orphans {
		if err := vacuum.RemoveManifest(o.repo, o.dgst, nil); err != nil {
			return out, storageErr(ctx, "delete orphan manifest "+o.repo+"@"+o.dgst.String(), err)
		}
		out = append(out, o.repo+"@"+o.dgst.String())
	}
	return out, nil
}

// countBlobs counts the blobs in the storage and their bytes. A storage
// without a blobs directory (nothing pushed yet) has none.
func (s *Server) countBlobs(ctx context.Context) (n int, size int64, err error) {
	err = s.driver.Walk(ctx, blobsRoot, func(fi storagedriver.FileInfo) error {
		if !fi.IsDir() && path.Base(fi.Path()) == "data" {
			n++
			size += fi.Size()
		}
		return nil
	})
	if errors.As(err, new(storagedriver.PathNotFoundError)) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, storageErr(ctx, "count registry blobs", err)
	}
	return n, size, nil
}

// storageErr reports a storage failure as ErrUnavailable, or the context's
// error when it has ended: driver errors do not unwrap to it.
func storageErr(ctx context.Context, what string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return fmt.Errorf("%s: %w", what, ctxErr)
	}
	return fmt.Errorf("%s: %w: %w", what, errdefs.ErrUnavailable, err)
}
