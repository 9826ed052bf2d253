package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/containerd/containerd/v2/core/diff"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// containerdSnapshotter is the snapshotter runtime uses for instances.
const containerdSnapshotter = "overlayfs"

// diffService measures containerd's own way to capture the instance's
// changes: DiffService().Compare of a view of the image's top snapshot (the
// parent of the instance's active snapshot) against the active snapshot,
// gzip as containerd compresses it, with the container paused for the whole
// Compare. The view and the blob Compare wrote are removed afterwards.
func (e *env) diffService(ctx context.Context, run int) (r saveRun, rErr error) {
	c := e.rt.Client()
	ctx = namespaces.WithNamespace(ctx, namespace)
	// A lease keeps the view and the blob from the garbage collector while
	// they are used; deleting it lets the collector have whatever is left.
	ctx, done, err := c.WithLease(ctx)
	if err != nil {
		return r, fmt.Errorf("lease: %w", err)
	}
	defer func() { rErr = errors.Join(rErr, done(context.WithoutCancel(ctx))) }()

	start := time.Now()
	img, err := c.GetImage(ctx, e.ref)
	if err != nil {
		return r, fmt.Errorf("image %s: %w", e.ref, err)
	}
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		return r, fmt.Errorf("rootfs of %s: %w", e.ref, err)
	}
	chainID := identity.ChainID(diffIDs).String()
	sn := c.SnapshotService(containerdSnapshotter)
	viewKey := fmt.Sprintf("bench-diff-lower-%d-%d", run, time.Now().UnixNano())
	lower, err := sn.View(ctx, viewKey, chainID)
	if err != nil {
		return r, fmt.Errorf("view of %s: %w", chainID, err)
	}
	defer func() {
		if err := sn.Remove(context.WithoutCancel(ctx), viewKey); err != nil {
			rErr = errors.Join(rErr, fmt.Errorf("remove view: %w", err))
		}
	}()
	upper, err := e.rt.Mounts(ctx, instanceID)
	if err != nil {
		return r, err
	}

	freezeStart := time.Now()
	if err := e.rt.Pause(ctx, instanceID); err != nil {
		return r, err
	}
	desc, cmpErr := c.DiffService().Compare(ctx, lower, upper, diff.WithMediaType(ocispec.MediaTypeImageLayerGzip))
	if err := e.rt.Resume(context.WithoutCancel(ctx), instanceID); err != nil {
		return r, errors.Join(cmpErr, err)
	}
	r.Freeze = time.Since(freezeStart)
	r.Total = time.Since(start)
	if cmpErr != nil {
		return r, fmt.Errorf("DiffService Compare: %w", cmpErr)
	}
	r.Bytes = desc.Size
	if err := c.ContentStore().Delete(context.WithoutCancel(ctx), desc.Digest); err != nil {
		return r, fmt.Errorf("delete diff blob: %w", err)
	}
	return r, nil
}
