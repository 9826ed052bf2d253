package registry

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/envd-dev/envd/errdefs"
)

// Archive kinds ArchiveKind tells apart.
const (
	ArchiveRootfs = "rootfs" // a root file system tar: imported as one new layer
	ArchiveOCI    = "oci"    // an OCI image layout (oci-layout, index.json, blobs/)
	ArchiveDocker = "docker" // a `docker save` tar (manifest.json)
)

// ArchiveKind reads the names in the tar at path (plain or gzip) and tells
// what it holds: an OCI image layout, a docker save archive, or else a
// root file system.
func ArchiveKind(src string) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer f.Close()
	r, err := maybeGunzip(f)
	if err != nil {
		return "", err
	}
	tr := tar.NewReader(r)
	var layoutFile, index, manifest bool
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return ArchiveRootfs, nil // not a tar we can read: the rootfs import says why
		}
		switch strings.TrimPrefix(path.Clean(h.Name), "./") {
		case "oci-layout":
			layoutFile = true
		case "index.json":
			index = true
		case "manifest.json":
			manifest = true
		}
	}
	switch {
	case layoutFile && index:
		return ArchiveOCI, nil
	case manifest:
		return ArchiveDocker, nil
	}
	return ArchiveRootfs, nil
}

func maybeGunzip(f *os.File) (io.Reader, error) {
	br := bufio.NewReader(f)
	magic, _ := br.Peek(2)
	if len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		return gzip.NewReader(br)
	}
	return br, nil
}

// PushArchive pushes the image of an OCI image layout or docker save tar
// (plain or gzip) at path to repo, manifest and layers as they are (an
// eStargz layer stays lazy). An index picks its linux/GOARCH image. work
// is a directory for scratch files.
func (c *Client) PushArchive(ctx context.Context, path, kind, repo, work string) (Image, error) {
	r, err := c.repository(repo)
	if err != nil {
		return Image{}, err
	}
	var img v1.Image
	switch kind {
	case ArchiveOCI:
		dir, err := os.MkdirTemp(work, "layout-")
		if err != nil {
			return Image{}, err
		}
		defer os.RemoveAll(dir)
		if err := extractLayout(path, dir); err != nil {
			return Image{}, err
		}
		idx, err := layout.ImageIndexFromPath(dir)
		if err != nil {
			return Image{}, fmt.Errorf("OCI layout: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		if img, err = pickImage(idx); err != nil {
			return Image{}, fmt.Errorf("OCI layout: %w", err)
		}
	case ArchiveDocker:
		plain, err := plainTar(path, work)
		if err != nil {
			return Image{}, err
		}
		if plain != path {
			defer os.Remove(plain)
		}
		if img, err = tarball.ImageFromPath(plain, nil); err != nil {
			return Image{}, fmt.Errorf("docker archive (one image expected): %v: %w", err, errdefs.ErrInvalidArgument)
		}
	default:
		return Image{}, fmt.Errorf("archive kind %q: %w", kind, errdefs.ErrInvalidArgument)
	}
	if err := checkRunnable(img); err != nil {
		return Image{}, err
	}
	return c.push(ctx, r, img, "")
}

// CopyFrom pulls ref from its registry (credentials from the node's docker
// config, else anonymous) and pushes it to repo: an index gives its
// linux/GOARCH image.
func (c *Client) CopyFrom(ctx context.Context, ref, repo string) (Image, error) {
	src, err := name.ParseReference(ref)
	if err != nil {
		return Image{}, fmt.Errorf("reference %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	dst, err := c.repository(repo)
	if err != nil {
		return Image{}, err
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})}
	if c.transport != nil {
		opts = append(opts, remote.WithTransport(c.transport))
	}
	img, err := remote.Image(src, opts...)
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("pull %q", ref))
	}
	if err := checkRunnable(img); err != nil {
		return Image{}, err
	}
	return c.push(ctx, dst, img, "")
}

// pickImage is idx's image for linux/GOARCH, or its only image.
func pickImage(idx v1.ImageIndex) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("index: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	var only *v1.Descriptor
	for i, d := range m.Manifests {
		switch {
		case d.MediaType.IsIndex():
			child, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("index %s: %v: %w", d.Digest, err, errdefs.ErrInvalidArgument)
			}
			if img, err := pickImage(child); err == nil {
				return img, nil
			}
		case d.MediaType.IsImage():
			if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
				return idx.Image(d.Digest)
			}
			if only == nil {
				only = &m.Manifests[i]
			} else if d.Platform == nil || only.Platform == nil {
				return nil, fmt.Errorf("the index holds several images and none names the platform linux/%s: %w", runtime.GOARCH, errdefs.ErrInvalidArgument)
			}
		}
	}
	if only == nil || (only.Platform != nil && (only.Platform.OS != "linux" || only.Platform.Architecture != runtime.GOARCH)) {
		return nil, fmt.Errorf("no image for linux/%s in the index: %w", runtime.GOARCH, errdefs.ErrInvalidArgument)
	}
	return idx.Image(only.Digest)
}

// checkRunnable refuses an image containerd would not run here: its config
// must name linux and this machine's architecture.
func checkRunnable(img v1.Image) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("image config: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		return fmt.Errorf("image is for %s/%s, not linux/%s: %w", cf.OS, cf.Architecture, runtime.GOARCH, errdefs.ErrInvalidArgument)
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}
	if mt != types.OCIManifestSchema1 && mt != types.DockerManifestSchema2 {
		return fmt.Errorf("manifest media type %q: %w", mt, errdefs.ErrInvalidArgument)
	}
	return nil
}

// extractLayout writes the files of an OCI image layout tar (plain or gzip)
// into dir: only oci-layout, index.json and blobs/ALG/HEX regular files, so
// nothing lands outside dir.
func extractLayout(src, dir string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := maybeGunzip(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("OCI layout tar: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		n := strings.TrimPrefix(path.Clean(h.Name), "./")
		if !layoutName(n) {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		out, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return fmt.Errorf("OCI layout: %s: %w", n, err)
		}
		_, err = io.Copy(out, tr)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
}

// layoutName accepts the names of an OCI image layout's files.
func layoutName(n string) bool {
	if n == "oci-layout" || n == "index.json" {
		return true
	}
	parts := strings.Split(n, "/")
	if len(parts) != 3 || parts[0] != "blobs" {
		return false
	}
	for _, p := range parts[1:] {
		if p == "" || strings.Trim(p, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
			return false
		}
	}
	return true
}

// plainTar returns path, or a decompressed copy in work when it is gzip.
func plainTar(src, work string) (string, error) {
	f, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer f.Close()
	r, err := maybeGunzip(f)
	if err != nil {
		return "", err
	}
	if _, ok := r.(*gzip.Reader); !ok {
		return src, nil
	}
	out, err := os.CreateTemp(work, "archive-*.tar")
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		os.Remove(out.Name())
		return "", fmt.Errorf("gunzip archive: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return out.Name(), out.Close()
}

// ExportLayout writes img as a tar of an OCI image layout to w: oci-layout,
// index.json (the manifest, annotated with refName as
// org.opencontainers.image.ref.name) and the manifest, config and layer
// blobs as stored, so eStargz layers stay eStargz.
func (c *Client) ExportLayout(ctx context.Context, img Image, refName string, w io.Writer) error {
	return c.ExportManifests(ctx, []LayoutManifest{{Image: img, Platform: true,
		Annotations: map[string]string{"org.opencontainers.image.ref.name": refName}}}, w)
}
