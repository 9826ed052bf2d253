package gc

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/versions"
)

// ContentStore is what the registry content's lifetime needs of the store.
type ContentStore interface {
	BeginUpload(ctx context.Context) (*versions.Upload, error)
	ImageOwned(ctx context.Context, image string) (bool, error)
}

// ManifestDeleter deletes a manifest from the registry.
type ManifestDeleter interface {
	DeleteManifest(ctx context.Context, img registry.Image) error
}

// Content is the contract between what pushes to the registry and the
// sweep: content is pushed under an upload lease and recorded before the
// lease ends; a manifest no row owns is dropped.
type Content struct {
	store ContentStore
	reg   ManifestDeleter
	log   *slog.Logger
}

// NewContent makes the content contract of store and reg.
func NewContent(store ContentStore, reg ManifestDeleter, log *slog.Logger) *Content {
	return &Content{store: store, reg: reg, log: log}
}

// Upload runs push under an upload lease (versions.Content.BeginUpload): no
// sweep on any node deletes what it pushes until the lease ends. The caller
// commits with the lease and then ends it.
func (c *Content) Upload(ctx context.Context, push func() error) (*versions.Upload, error) {
	up, err := c.store.BeginUpload(ctx)
	if err != nil {
		return nil, err
	}
	if err := push(); err != nil {
		up.End()
		return nil, err
	}
	return up, nil
}

// Drop deletes img's manifest unless a row owns it (a version not being
// deleted, an imported image): an image pushed for a version whose commit
// failed, or a deleted project's. Its blobs go at the next sweep. A
// failure is only logged: the sweep's orphan scan finds the manifest too.
func (c *Content) Drop(ctx context.Context, img registry.Image) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	owned, err := c.store.ImageOwned(ctx, img.Ref())
	if err == nil && !owned {
		err = c.reg.DeleteManifest(ctx, img)
	}
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		c.log.Warn("delete a manifest no row owns", "image", img.Ref(), "err", err)
	}
}
