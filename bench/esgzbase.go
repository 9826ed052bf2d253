package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/snapshotter"
)

// importEstargzBase pushes the Debian rootfs as an image whose one layer is
// eStargz (envd's import makes a gzip layer, which the stargz snapshotter
// can only pull whole): the rootfs is spooled and encoded with
// snapshotter.Encode like a save, and appended to an image without layers
// whose config is the one ImportRootfs writes. It returns the image
// (repo@digest usable as a project base).
func (b *bed) importEstargzBase(ctx context.Context) (registry.Image, error) {
	start := time.Now()
	dir := filepath.Join(b.dir, "esgz-base")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return registry.Image{}, err
	}
	defer os.RemoveAll(dir)
	spool := filepath.Join(dir, "rootfs.tar")
	if _, err := spoolTo(ctx, b.cfg.rootfs, spool, snapshotter.SpoolOptions{}); err != nil {
		return registry.Image{}, fmt.Errorf("spool rootfs: %w", err)
	}
	layer, err := snapshotter.Encode(ctx, spool, dir, snapshotter.EncodeOptions{Compression: snapshotter.Estargz})
	if err != nil {
		return registry.Image{}, fmt.Errorf("encode rootfs: %w", err)
	}

	// The parent: no layers, ImportRootfs's config.
	parent, err := mutate.ConfigFile(
		mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON),
		&v1.ConfigFile{
			Created: v1.Time{Time: time.Now().UTC().Truncate(time.Second)}, OS: "linux", Architecture: goruntime.GOARCH,
			RootFS: v1.RootFS{Type: "layers"},
			Config: v1.Config{Env: []string{registry.DefaultPath}, Cmd: []string{"/bin/sh"}},
		})
	if err != nil {
		return registry.Image{}, err
	}
	const emptyRepo = "envd/images/bench-empty"
	repo, err := name.NewRepository(b.primary.RegistryAddr()+"/"+emptyRepo, name.Insecure)
	if err != nil {
		return registry.Image{}, err
	}
	d, err := parent.Digest()
	if err != nil {
		return registry.Image{}, err
	}
	if err := remote.Write(repo.Digest(d.String()), parent, remote.WithContext(ctx), remote.WithAuth(authn.Anonymous)); err != nil {
		return registry.Image{}, fmt.Errorf("push empty parent image: %w", err)
	}
	img, err := b.reg.Append(ctx, registry.Image{Repo: emptyRepo, Digest: d.String()}, registry.LayerFile{
		Path: layer.Path, MediaType: layer.MediaType, Digest: layer.Digest.String(), DiffID: layer.DiffID.String(),
		Size: layer.Size, Annotations: layer.Annotations,
	}, "envd/images/debian-estargz", "latest", nil)
	if err != nil {
		return registry.Image{}, fmt.Errorf("push eStargz base: %w", err)
	}
	logf("eStargz base: %s, %s MB, made in %s", img.Ref(), megabytes(layer.Size), seconds(time.Since(start)))
	return img, nil
}
