// Package images is the node's base images (api.ImageCore): imported
// from a tar or pulled from a registry, and resolved as the base of a
// project, a build or a migration (ResolveBase).
package images

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/snapshotter"
	"github.com/envd-dev/envd/versions"
)

// Store is what images need of the store.
type Store interface {
	ListImages(ctx context.Context) ([]versions.Image, error)
	GetImage(ctx context.Context, name string) (versions.Image, error)
}

// Registry is what images need of the registry.
type Registry interface {
	PushRootfsLayer(ctx context.Context, lf registry.LayerFile, repo, tag string) (registry.Image, error)
	PushArchive(ctx context.Context, path, kind, repo, work string) (registry.Image, error)
	CopyFrom(ctx context.Context, ref, repo string) (registry.Image, error)
	Get(ctx context.Context, ref string) (registry.Image, error)
}

// Content pushes under an upload lease (gc.Content), so that a sweep
// keeps what is pushed until the image is recorded.
type Content interface {
	Upload(ctx context.Context, push func() error) (*versions.Upload, error)
}

// Images serves the base images.
type Images struct {
	workDir string // import spools
	store   Store
	reg     Registry
	content Content
}

// New makes the images' part.
func New(workDir string, store Store, reg Registry, content Content) *Images {
	return &Images{workDir: workDir, store: store, reg: reg, content: content}
}

// ImportImage stores a base image named name from a tar: an OCI image
// layout or a `docker save` archive (pushed with its layers as they are),
// else a root file system (encoded as one eStargz layer).
func (im *Images) ImportImage(ctx context.Context, p types.Principal, name string, tarball io.Reader) (types.Image, error) {
	if !p.Admin {
		return types.Image{}, fmt.Errorf("importing images needs an admin token: %w", errdefs.ErrPermissionDenied)
	}
	if err := names.Validate("image", name); err != nil {
		return types.Image{}, err
	}
	f, err := os.CreateTemp(im.workDir, "import-*.tar")
	if err != nil {
		return types.Image{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if _, err := io.Copy(f, tarball); err != nil {
		return types.Image{}, fmt.Errorf("receive image %q: %w", name, err)
	}
	if err := f.Sync(); err != nil {
		return types.Image{}, err
	}
	kind, err := registry.ArchiveKind(f.Name())
	if err != nil {
		return types.Image{}, err
	}
	repo := names.ImageRepo(name)
	var (
		img registry.Image
		up  *versions.Upload
	)
	if kind == registry.ArchiveRootfs {
		img, up, err = im.importRootfs(ctx, f.Name(), repo)
	} else {
		up, err = im.content.Upload(ctx, func() (err error) {
			img, err = im.reg.PushArchive(ctx, f.Name(), kind, repo, im.workDir)
			return err
		})
	}
	if err != nil {
		return types.Image{}, fmt.Errorf("import image %q: %w", name, err)
	}
	return im.recordImage(ctx, up, name, img)
}

// PullImage copies the image ref from any OCI registry the node reaches
// (credentials from the node's docker config, else anonymous) as the base
// image name: its layers as they are, an eStargz one stays lazy.
func (im *Images) PullImage(ctx context.Context, p types.Principal, name, ref string) (types.Image, error) {
	if !p.Admin {
		return types.Image{}, fmt.Errorf("importing images needs an admin token: %w", errdefs.ErrPermissionDenied)
	}
	if err := names.Validate("image", name); err != nil {
		return types.Image{}, err
	}
	var img registry.Image
	up, err := im.content.Upload(ctx, func() (err error) {
		img, err = im.reg.CopyFrom(ctx, ref, names.ImageRepo(name))
		return err
	})
	if err != nil {
		return types.Image{}, fmt.Errorf("import image %q from %q: %w", name, ref, err)
	}
	return im.recordImage(ctx, up, name, img)
}

// recordImage names a pushed image, under the upload lease it was pushed
// with: the registry holds the content first, the name is recorded last.
func (im *Images) recordImage(ctx context.Context, up *versions.Upload, name string, img registry.Image) (types.Image, error) {
	defer up.End()
	rec, err := up.PutImage(ctx, versions.Image{Name: name, Repo: img.Repo, Digest: img.Digest, SizeBytes: img.Size})
	if err != nil {
		return types.Image{}, err
	}
	return toImage(rec), nil
}

// importRootfs encodes a root filesystem tar as an eStargz layer, like a
// save, so that restores are lazy from the base up, and pushes it as a
// single-layer image under an upload lease, which the caller records the
// image with and ends.
func (im *Images) importRootfs(ctx context.Context, src, repo string) (registry.Image, *versions.Upload, error) {
	dir, err := os.MkdirTemp(im.workDir, "import-")
	if err != nil {
		return registry.Image{}, nil, err
	}
	defer os.RemoveAll(dir)
	tarPath := filepath.Join(dir, "rootfs.tar")
	f, err := os.Create(tarPath)
	if err != nil {
		return registry.Image{}, nil, err
	}
	err = registry.WriteRootfsTar(src, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return registry.Image{}, nil, err
	}
	layer, err := snapshotter.Encode(ctx, tarPath, dir, snapshotter.EncodeOptions{Compression: snapshotter.Estargz})
	if err != nil {
		return registry.Image{}, nil, fmt.Errorf("encode base layer: %w", err)
	}
	var img registry.Image
	up, err := im.content.Upload(ctx, func() (err error) {
		img, err = im.reg.PushRootfsLayer(ctx, registry.LayerFile{
			Path: layer.Path, MediaType: layer.MediaType, Digest: layer.Digest.String(), DiffID: layer.DiffID.String(),
			Size: layer.Size, Annotations: layer.Annotations,
		}, repo, "latest")
		return err
	})
	return img, up, err
}

func toImage(img versions.Image) types.Image {
	return types.Image{Name: img.Name, Ref: img.Repo + "@" + img.Digest, Digest: img.Digest, Size: img.SizeBytes}
}

// ListImages lists imported base images.
func (im *Images) ListImages(ctx context.Context, p types.Principal) ([]types.Image, error) {
	imgs, err := im.store.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]types.Image, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, toImage(img))
	}
	return out, nil
}

// ResolveBase turns a base given as an image name or repo@digest into a
// stored image.
//
// A repo@digest must be an imported image or one of tenant's own project
// images: another tenant's private layers are not a base.
func (im *Images) ResolveBase(ctx context.Context, tenant, base string) (registry.Image, error) {
	if base == "" {
		return registry.Image{}, fmt.Errorf("base image: required: %w", errdefs.ErrInvalidArgument)
	}
	ref := base
	if names.Validate("image", base) == nil {
		rec, err := im.store.GetImage(ctx, base)
		if err != nil {
			return registry.Image{}, fmt.Errorf("base image: %w", err)
		}
		ref = rec.Repo + "@" + rec.Digest
	}
	img, err := im.reg.Get(ctx, ref)
	if err != nil {
		return registry.Image{}, fmt.Errorf("base image %q: %w", base, err)
	}
	// Answered like a missing image, so it tells nothing about the other's.
	if !strings.HasPrefix(img.Repo, names.ImageRepo("")) && !strings.HasPrefix(img.Repo, names.ProjectRepo(tenant, "")) {
		return registry.Image{}, fmt.Errorf("base image %q: not an imported image nor one of this tenant's: %w", base, errdefs.ErrNotFound)
	}
	return img, nil
}
