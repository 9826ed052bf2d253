// Package nodeimage assembles container images from root filesystem
// directories without a container engine: each directory becomes a gzip
// layer, the layers an image with its config, the image a tar that
// `ctr images import` (and `docker load`) take. It builds the envd node
// image (scripts/build-node-image.sh) and the pause image of the
// deployment test.
package nodeimage

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
)

// WriteLayer writes the tree under dir to out as a gzip layer tar (owners,
// modes, links, xattrs and device nodes kept). It writes to out.tmp and
// renames, so an interrupted run leaves no layer a later run would reuse.
func WriteLayer(dir, out string) error {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("layer source %q is not a directory: %w", dir, errdefs.ErrInvalidArgument)
	}
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("create layer %q: %w", out, err)
	}
	defer os.Remove(tmp)
	bw := bufio.NewWriterSize(f, 1<<20)
	zw, err := gzip.NewWriterLevel(bw, gzip.BestSpeed)
	if err != nil {
		f.Close()
		return err
	}
	if err := registry.WriteRootfsTar(dir, zw); err != nil {
		f.Close()
		return fmt.Errorf("layer %q: %w", dir, err)
	}
	for _, step := range []func() error{zw.Close, bw.Flush, f.Sync, f.Close} {
		if err := step(); err != nil {
			return fmt.Errorf("write layer %q: %w", out, err)
		}
	}
	return os.Rename(tmp, out)
}

// Config is the image's runtime configuration.
type Config struct {
	Ref        string   // name:tag the image is imported as, e.g. "envd.local/envd-node:dev"
	Layers     []string // gzip layer tars (WriteLayer), lowest first
	Entrypoint []string
	Cmd        []string
	Env        []string // KEY=VALUE; default a PATH
	WorkingDir string
	Labels     map[string]string
}

// DefaultPath is the PATH of an image whose Config sets none.
const DefaultPath = "PATH=/usr/local/lib/envd/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Write assembles the image of cfg and writes it to out as an image tar
// (the docker-archive form, with manifest.json), named cfg.Ref. The
// config names os and architecture: containerd's platform matching drops
// images without them.
func Write(cfg Config, out string) error {
	if len(cfg.Layers) == 0 {
		return fmt.Errorf("image %q: no layers: %w", cfg.Ref, errdefs.ErrInvalidArgument)
	}
	tag, err := name.NewTag(cfg.Ref, name.WeakValidation)
	if err != nil {
		return fmt.Errorf("image name %q: %w: %w", cfg.Ref, errdefs.ErrInvalidArgument, err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for _, p := range cfg.Layers {
		l, err := tarball.LayerFromFile(p, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return fmt.Errorf("layer %q: %w", p, err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return fmt.Errorf("layer %q: %w", p, err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	cf.Config.Entrypoint, cf.Config.Cmd = cfg.Entrypoint, cfg.Cmd
	cf.Config.Env = cfg.Env
	if len(cf.Config.Env) == 0 {
		cf.Config.Env = []string{DefaultPath}
	}
	cf.Config.WorkingDir = cfg.WorkingDir
	cf.Config.Labels = cfg.Labels
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	tmp := out + ".tmp"
	defer os.Remove(tmp)
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		return fmt.Errorf("write image %q: %w", out, err)
	}
	return os.Rename(tmp, out)
}

// Read opens an image tar Write made (tests and checks).
func Read(path string) (v1.Image, error) {
	return tarball.ImageFromPath(path, nil)
}
