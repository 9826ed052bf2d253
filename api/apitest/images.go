package apitest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"

	"github.com/envd-dev/envd/api/types"
)

// Images is the fake ImageCore.
type Images struct{ *Recorder }

// ImportImage reads the whole tarball; the recorded arguments are the name
// and the bytes read.
// PullImage answers an image whose digest is the sha256 of ref.
func (c *Images) PullImage(ctx context.Context, p types.Principal, name, ref string) (types.Image, error) {
	sum := sha256.Sum256([]byte(ref))
	d := "sha256:" + hex.EncodeToString(sum[:])
	return echo(c, "PullImage", p, types.Image{Name: name, Ref: "images/" + name + "@" + d, Digest: d}, name, ref)
}

func (c *Images) ImportImage(ctx context.Context, p types.Principal, name string, tarball io.Reader) (types.Image, error) {
	b, err := io.ReadAll(tarball)
	c.record("ImportImage", p, name, b)
	if err != nil {
		return types.Image{}, err
	}
	sum := sha256.Sum256(b)
	d := "sha256:" + hex.EncodeToString(sum[:])
	return types.Image{Name: name, Ref: "images/" + name + "@" + d, Digest: d, Size: int64(len(b))}, nil
}

func (c *Images) ListImages(ctx context.Context, p types.Principal) ([]types.Image, error) {
	return echo(c, "ListImages", p, []types.Image(nil))
}
