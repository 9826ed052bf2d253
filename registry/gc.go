package registry

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/distribution/distribution/v3/registry/storage"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"

	"github.com/envd-dev/envd/internal/errdefs"
)

// blobsRoot is where distribution keeps every blob, as
// blobsRoot/sha256/<2 hex>/<hex>/data, shared by all repositories.
const blobsRoot = "/docker/registry/v2/blobs"

// GCStats reports a sweep: blobs and their bytes in the storage before and after.
type GCStats struct {
	BlobsBefore, BlobsAfter int
	BytesBefore, BytesAfter int64
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
func (s *Server) GarbageCollect(ctx context.Context) (GCStats, error) {
	s.gcMu.Lock()
	defer s.gcMu.Unlock()
	var st GCStats
	var err error
	if st.BlobsBefore, st.BytesBefore, err = s.countBlobs(ctx); err != nil {
		return st, err
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
