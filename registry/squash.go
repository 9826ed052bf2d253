package registry

import (
	"context"
	"fmt"
	"maps"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Squash pushes to targetRepo an image made of base's layers and then
// layer, which must hold what img's layers above base make together (see
// envd/squash). base's layers must be the first layers of img. The config
// is img's (environment, command, user), its diff IDs and layer history
// cut to base's and the new layer's. Base layers are mounted, not uploaded.
func (c *Client) Squash(ctx context.Context, img, base Image, layer LayerFile, targetRepo string, annotations map[string]string) (Image, error) {
	if len(base.Layers) > len(img.Layers) {
		return Image{}, fmt.Errorf("squash %q: base %q has more layers", img.Ref(), base.Ref())
	}
	for i, l := range base.Layers {
		if img.Layers[i].Digest != l.Digest {
			return Image{}, fmt.Errorf("squash %q: layer %d is not base %q's", img.Ref(), i, base.Ref())
		}
	}
	srcRef, err := c.digestRef(img.Repo, img.Digest)
	if err != nil {
		return Image{}, err
	}
	baseRef, err := c.digestRef(base.Repo, base.Digest)
	if err != nil {
		return Image{}, err
	}
	target, err := c.repository(targetRepo)
	if err != nil {
		return Image{}, err
	}
	fl, err := newFileLayer(layer)
	if err != nil {
		return Image{}, err
	}
	src, err := remote.Image(srcRef, c.options(ctx)...)
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("image %q", img.Ref()))
	}
	cfg, err := src.ConfigFile()
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("config of %q", img.Ref()))
	}
	// remote.Image of the base wraps its layers as mountable from its
	// repository, so the push mounts them (as Append does).
	bimg, err := remote.Image(baseRef, c.options(ctx)...)
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("image %q", base.Ref()))
	}
	keep := len(base.Layers)
	cfg = cfg.DeepCopy()
	cfg.RootFS.DiffIDs = cfg.RootFS.DiffIDs[:keep]
	// History: the entries up to the keep-th one that made a layer, with
	// the empty-layer entries among them.
	var hist []v1.History
	layers := 0
	for _, h := range cfg.History {
		if layers == keep {
			break
		}
		hist = append(hist, h)
		if !h.EmptyLayer {
			layers++
		}
	}
	cfg.History = hist
	out, err := mutate.ConfigFile(bimg, cfg)
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("squash %q", img.Ref()))
	}
	now := time.Now().UTC().Truncate(time.Second)
	out, err = mutate.Append(out, mutate.Addendum{
		Layer: fl, MediaType: types.MediaType(layer.MediaType), Annotations: maps.Clone(layer.Annotations),
		History: v1.History{Created: v1.Time{Time: now}, CreatedBy: fmt.Sprintf("envd squash of %d layers of %s", len(img.Layers)-keep, img.Ref())},
	})
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("squash %q", img.Ref()))
	}
	if out, err = mutate.CreatedAt(out, v1.Time{Time: now}); err != nil {
		return Image{}, translate(err, fmt.Sprintf("squash %q", img.Ref()))
	}
	m, err := src.Manifest()
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("manifest of %q", img.Ref()))
	}
	ann := maps.Clone(m.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	maps.Copy(ann, annotations)
	if len(ann) > 0 {
		var ok bool
		if out, ok = mutate.Annotations(out, ann).(v1.Image); !ok {
			return Image{}, fmt.Errorf("annotate squash of %q: not an image", img.Ref())
		}
	}
	return c.push(ctx, target, out, "")
}
