package envd

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/snapshotter"
	"github.com/envd-dev/envd/versions"
)

// ImportImage stores a base image named name from a tar: an OCI image
// layout or a `docker save` archive (pushed with its layers as they are),
// else a root file system (encoded as one eStargz layer).
func (s *Service) ImportImage(ctx context.Context, p types.Principal, name string, tarball io.Reader) (types.Image, error) {
	if !p.Admin {
		return types.Image{}, fmt.Errorf("importing images needs an admin token: %w", errdefs.ErrPermissionDenied)
	}
	if err := ValidateName("image", name); err != nil {
		return types.Image{}, err
	}
	f, err := os.CreateTemp(s.cfg.WorkDir, "import-*.tar")
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
		img, up, err = s.importRootfs(ctx, f.Name(), repo)
	} else {
		up, err = s.content.Upload(ctx, func() (err error) {
			img, err = s.reg.PushArchive(ctx, f.Name(), kind, repo, s.cfg.WorkDir)
			return err
		})
	}
	if err != nil {
		return types.Image{}, fmt.Errorf("import image %q: %w", name, err)
	}
	return s.recordImage(ctx, up, name, img)
}

// PullImage copies the image ref from any OCI registry the node reaches
// (credentials from the node's docker config, else anonymous) as the base
// image name: its layers as they are, an eStargz one stays lazy.
func (s *Service) PullImage(ctx context.Context, p types.Principal, name, ref string) (types.Image, error) {
	if !p.Admin {
		return types.Image{}, fmt.Errorf("importing images needs an admin token: %w", errdefs.ErrPermissionDenied)
	}
	if err := ValidateName("image", name); err != nil {
		return types.Image{}, err
	}
	var img registry.Image
	up, err := s.content.Upload(ctx, func() (err error) {
		img, err = s.reg.CopyFrom(ctx, ref, names.ImageRepo(name))
		return err
	})
	if err != nil {
		return types.Image{}, fmt.Errorf("import image %q from %q: %w", name, ref, err)
	}
	return s.recordImage(ctx, up, name, img)
}

// recordImage names a pushed image, under the upload lease it was pushed
// with: the registry holds the content first, the name is recorded last.
func (s *Service) recordImage(ctx context.Context, up *versions.Upload, name string, img registry.Image) (types.Image, error) {
	defer up.End()
	rec, err := up.PutImage(ctx, versions.Image{Name: name, Repo: img.Repo, Digest: img.Digest, SizeBytes: img.Size})
	if err != nil {
		return types.Image{}, err
	}
	return toImage(rec), nil
}

// ExportVersion writes version n of project as a tar of an OCI image
// layout to w (layers as stored: eStargz stays eStargz), for `envctl image
// import` on another installation. The ref name in its index is
// "PROJECT-N".
func (s *Service) ExportVersion(ctx context.Context, p types.Principal, project string, n int, w io.Writer) error {
	if err := ValidateName("project", project); err != nil {
		return err
	}
	v, err := s.store.Versions.GetVersion(ctx, p.Tenant, project, n)
	if err != nil {
		return err
	}
	if v.State != versions.StateReady || v.Image == "" {
		return errdefs.WithDetails(fmt.Errorf("version %d of %q is %s: %w", n, project, v.State, errdefs.ErrFailedPrecondition),
			map[string]any{"state": v.State})
	}
	img, err := s.reg.Get(ctx, v.Image)
	if err != nil {
		return err
	}
	return s.reg.ExportLayout(ctx, img, fmt.Sprintf("%s-%d", project, n), w)
}

// importRootfs encodes a root filesystem tar as an eStargz layer, like a
// save, so that restores are lazy from the base up, and pushes it as a
// single-layer image under an upload lease, which the caller records the
// image with and ends.
func (s *Service) importRootfs(ctx context.Context, src, repo string) (registry.Image, *versions.Upload, error) {
	dir, err := os.MkdirTemp(s.cfg.WorkDir, "import-")
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
	up, err := s.content.Upload(ctx, func() (err error) {
		img, err = s.reg.PushRootfsLayer(ctx, registry.LayerFile{
			Path: layer.Path, MediaType: layer.MediaType, Digest: layer.Digest.String(), DiffID: layer.DiffID.String(),
			Size: layer.Size, Annotations: layer.Annotations,
		}, repo, "latest")
		return err
	})
	return img, up, err
}
