package runtime

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/platforms"
	"github.com/containerd/stargz-snapshotter/estargz"
	"github.com/containerd/stargz-snapshotter/fs/source"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/envd-dev/envd/errdefs"
)

// Lazy restore.
//
// Pull decides per image which snapshotter its instances use, and records
// it on the containerd image as the label LabelSnapshotter; Create uses the
// recorded one. An image with eStargz layers (descriptors annotated with
// estargz.TOCJSONDigestAnnotation) is pulled lazily through
// Config.LazySnapshotter when one is configured: its eStargz layers are
// mounted from the registry with FUSE and fetched as they are read; its other
// layers (a plain gzip base image, say) are fetched and unpacked normally
// into the same snapshotter, which falls back to that for any layer it cannot
// mount lazily. Any other image is pulled in full for overlayfs.
//
// With Config.UserNS every image is pulled in full for overlayfs (userns.go).
//
// Both snapshotters give an instance's active snapshot as one overlay mount
// with upperdir=..., so Mounts serves saves the same way.

// LabelSnapshotter is the containerd image label recording the snapshotter
// the image was unpacked for ("overlayfs" or Config.LazySnapshotter).
const LabelSnapshotter = "envd.snapshotter"

// lazyPrefetchBytes is the prefetch size given to the stargz snapshotter
// for layers without a prefetch landmark. 0: fetch nothing up front; layers
// saved with prioritized files carry a landmark that sets the prefetch range.
const lazyPrefetchBytes = 0

// maxManifestBytes bounds the manifest and index read to choose the
// snapshotter.
const maxManifestBytes = 4 << 20

// pullOptions chooses the snapshotter for ref and returns it with the pull
// options that go with it.
func (r *Runtime) pullOptions(ctx context.Context, ref string, resolver remotes.Resolver) (string, []client.RemoteOpt, error) {
	if r.cfg.LazySnapshotter == "" || r.cfg.UserNS {
		// With user namespaces the image is chowned into a remapped
		// snapshot, which reads every byte: a lazy pull would gain nothing.
		return snapshotter, []client.RemoteOpt{client.WithPullSnapshotter(snapshotter)}, nil
	}
	lazy, err := hasEstargzLayers(ctx, resolver, ref)
	if err != nil {
		return "", nil, err
	}
	if !lazy {
		return snapshotter, []client.RemoteOpt{client.WithPullSnapshotter(snapshotter)}, nil
	}
	return r.cfg.LazySnapshotter, []client.RemoteOpt{
		client.WithPullSnapshotter(r.cfg.LazySnapshotter),
		client.WithImageHandlerWrapper(source.AppendDefaultLabelsHandlerWrapper(ref, lazyPrefetchBytes)),
	}, nil
}

// hasEstargzLayers fetches ref's manifest (for an index, the one of this
// platform) and reports whether any layer carries the eStargz TOC digest.
func hasEstargzLayers(ctx context.Context, resolver remotes.Resolver, ref string) (bool, error) {
	name, desc, err := resolver.Resolve(ctx, ref)
	if err != nil {
		return false, translate(err, "resolve %s", ref)
	}
	fetcher, err := resolver.Fetcher(ctx, name)
	if err != nil {
		return false, translate(err, "fetch %s", ref)
	}
	for range 2 { // an index, then its manifest
		b, err := fetchJSON(ctx, fetcher, desc)
		if err != nil {
			return false, translate(err, "fetch manifest of %s", ref)
		}
		switch desc.MediaType {
		case ocispec.MediaTypeImageIndex, images.MediaTypeDockerSchema2ManifestList:
			var idx ocispec.Index
			if err := json.Unmarshal(b, &idx); err != nil {
				return false, fmt.Errorf("index of %s: %w", ref, errdefs.ErrInvalidArgument)
			}
			match := platforms.Default()
			found := false
			for _, m := range idx.Manifests {
				if m.Platform == nil || match.Match(*m.Platform) {
					desc, found = m, true
					break
				}
			}
			if !found {
				return false, fmt.Errorf("no manifest for %s in %s: %w", platforms.DefaultString(), ref, errdefs.ErrNotFound)
			}
		default:
			var m ocispec.Manifest
			if err := json.Unmarshal(b, &m); err != nil {
				return false, fmt.Errorf("manifest of %s: %w", ref, errdefs.ErrInvalidArgument)
			}
			for _, l := range m.Layers {
				if l.Annotations[estargz.TOCJSONDigestAnnotation] != "" {
					return true, nil
				}
			}
			return false, nil
		}
	}
	return false, fmt.Errorf("nested index in %s: %w", ref, errdefs.ErrInvalidArgument)
}

func fetchJSON(ctx context.Context, f remotes.Fetcher, desc ocispec.Descriptor) ([]byte, error) {
	if desc.Size > maxManifestBytes {
		return nil, fmt.Errorf("manifest of %d bytes: %w", desc.Size, errdefs.ErrInvalidArgument)
	}
	rc, err := f.Fetch(ctx, desc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, maxManifestBytes))
}

// imageSnapshotter is the snapshotter img was pulled for: its
// LabelSnapshotter if that is overlayfs or the configured lazy snapshotter,
// else overlayfs.
func (r *Runtime) imageSnapshotter(img client.Image) string {
	sn := img.Labels()[LabelSnapshotter]
	if sn != "" && sn == r.cfg.LazySnapshotter {
		return sn
	}
	return snapshotter
}

// snapshotters are the snapshotters instances of this runtime may use.
func (r *Runtime) snapshotters() []string {
	if r.cfg.LazySnapshotter == "" {
		return []string{snapshotter}
	}
	return []string{snapshotter, r.cfg.LazySnapshotter}
}

// checkLazySnapshotter turns off lazy pulls when containerd does not have the
// configured snapshotter (a daemon reused from before the snapshotter was
// configured, say), and records why.
func (r *Runtime) checkLazySnapshotter(ctx context.Context) {
	name := r.cfg.LazySnapshotter
	if name == "" {
		return
	}
	ctx = namespaces.WithNamespace(ctx, r.cfg.Namespace)
	ps, err := r.client.IntrospectionService().Plugins(ctx, `type=="io.containerd.snapshotter.v1",id=="`+name+`"`)
	if err == nil && len(ps.Plugins) == 1 && ps.Plugins[0].InitErr == nil {
		return
	}
	r.cfg.LazySnapshotter = ""
	r.lazyErr = fmt.Errorf("containerd at %s has no snapshotter %q (restart containerd to load it): %w", r.cfg.Address, name, errdefs.ErrUnavailable)
	if err != nil {
		r.lazyErr = fmt.Errorf("snapshotter %q: %w", name, translate(err, "introspect containerd"))
	}
}

// LazySnapshotter is the snapshotter lazy pulls use, "" when lazy pulls are
// off; then LazyErr says why, if they were asked for.
func (r *Runtime) LazySnapshotter() string { return r.cfg.LazySnapshotter }

// LazyErr says why lazy pulls are off although Config.LazySnapshotter was
// set; nil otherwise.
func (r *Runtime) LazyErr() error { return r.lazyErr }

// LayerDirs are the directories of a lazily pulled image's layers in the
// lazy snapshotter, top first (the lower dirs its instances' overlays get),
// for reading files of the image before any container of it has started.
// An image pulled for overlayfs has none (nil). It asks the snapshotter for
// a view of the image and removes the view again.
func (r *Runtime) LayerDirs(ctx context.Context, ref string) ([]string, error) {
	ctx = r.ctx(ctx)
	img, err := r.client.GetImage(ctx, ref)
	if err != nil {
		return nil, translate(err, "image %s", ref)
	}
	sn := r.imageSnapshotter(img)
	if sn == snapshotter {
		return nil, nil
	}
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		return nil, translate(err, "layers of %s", ref)
	}
	ss := r.client.SnapshotService(sn)
	key := "envd-layers-" + randomHex(8)
	mounts, err := ss.View(ctx, key, identity.ChainID(diffIDs).String())
	if err != nil {
		return nil, translate(err, "view of %s", ref)
	}
	defer func() { _ = ss.Remove(context.WithoutCancel(ctx), key) }()
	return lowerDirs(mounts), nil
}

// lowerDirs are the read-only directories of a view's mounts, top first:
// an overlay's lowerdir list, or a single layer's bind mount.
func lowerDirs(mounts []mount.Mount) []string {
	for _, m := range mounts {
		switch m.Type {
		case "overlay":
			for _, o := range m.Options {
				if v, ok := strings.CutPrefix(o, "lowerdir="); ok {
					return strings.Split(v, ":")
				}
			}
		case "bind":
			return []string{m.Source}
		}
	}
	return nil
}
