package registry

import (
	"context"
	"fmt"
	"io"
	"maps"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Rebase pushes to targetRepo an image made of newBase's layers and then
// img's layers above its first baseLayers (the user's), keeping each
// moved layer's media type and annotations (an eStargz layer's TOC digest
// among them, so the result stays lazily pullable). The moved layers are
// mounted, not uploaded. The config is newBase's, with the moved layers'
// diff IDs and history entries.
func (c *Client) Rebase(ctx context.Context, img Image, baseLayers int, newBase Image, targetRepo string, annotations map[string]string) (Image, error) {
	srcRef, err := c.digestRef(img.Repo, img.Digest)
	if err != nil {
		return Image{}, err
	}
	baseRef, err := c.digestRef(newBase.Repo, newBase.Digest)
	if err != nil {
		return Image{}, err
	}
	target, err := c.repository(targetRepo)
	if err != nil {
		return Image{}, err
	}
	src, err := remote.Image(srcRef, c.options(ctx)...)
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("image %q", img.Ref()))
	}
	base, err := remote.Image(baseRef, c.options(ctx)...)
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("image %q", newBase.Ref()))
	}
	layers, err := src.Layers()
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("layers of %q", img.Ref()))
	}
	m, err := src.Manifest()
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("manifest of %q", img.Ref()))
	}
	if baseLayers < 0 || baseLayers > len(layers) || len(m.Layers) != len(layers) {
		return Image{}, fmt.Errorf("rebase %q: %d base layers of %d", img.Ref(), baseLayers, len(layers))
	}
	now := time.Now().UTC().Truncate(time.Second)
	adds := make([]mutate.Addendum, 0, len(layers)-baseLayers)
	for i := baseLayers; i < len(layers); i++ {
		adds = append(adds, mutate.Addendum{
			Layer: layers[i], MediaType: m.Layers[i].MediaType, Annotations: maps.Clone(m.Layers[i].Annotations),
			History: v1.History{Created: v1.Time{Time: now}, CreatedBy: "envd rebase of " + img.Ref()},
		})
	}
	out, err := mutate.Append(base, adds...)
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("rebase %q", img.Ref()))
	}
	if out, err = mutate.CreatedAt(out, v1.Time{Time: now}); err != nil {
		return Image{}, translate(err, fmt.Sprintf("rebase %q", img.Ref()))
	}
	if len(annotations) > 0 {
		var ok bool
		if out, ok = mutate.Annotations(out, maps.Clone(annotations)).(v1.Image); !ok {
			return Image{}, fmt.Errorf("annotate rebase of %q: not an image", img.Ref())
		}
	}
	return c.push(ctx, target, out, "")
}

// OpenLayer returns the uncompressed tar stream of img's i-th layer.
func (c *Client) OpenLayer(ctx context.Context, img Image, i int) (io.ReadCloser, error) {
	if i < 0 || i >= len(img.Layers) {
		return nil, fmt.Errorf("layer %d of %q: it has %d", i, img.Ref(), len(img.Layers))
	}
	r, err := c.repository(img.Repo)
	if err != nil {
		return nil, err
	}
	l, err := remote.Layer(r.Digest(img.Layers[i].Digest), c.options(ctx)...)
	if err != nil {
		return nil, translate(err, fmt.Sprintf("layer %d of %q", i, img.Ref()))
	}
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, translate(err, fmt.Sprintf("layer %d of %q", i, img.Ref()))
	}
	return rc, nil
}
