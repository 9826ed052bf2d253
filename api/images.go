package api

import (
	"context"
	"io"
	"mime"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// ImageCore holds the base images projects start from.
type ImageCore interface {
	// ImportImage stores a base image from a tar stream (plain or gzip).
	ImportImage(ctx context.Context, p types.Principal, name string, tarball io.Reader) (types.Image, error)
	// PullImage copies an image from another OCI registry (POST
	// /v1/images?name=NAME&ref=REF).
	PullImage(ctx context.Context, p types.Principal, name, ref string) (types.Image, error)
	ListImages(ctx context.Context, p types.Principal) ([]types.Image, error)
}

type images struct{ core ImageCore }

func (g images) routes() []route {
	return []route{
		{http.MethodPost, "/images", handle(http.StatusCreated, g.importImage)},
		{http.MethodGet, "/images", handle(http.StatusOK, func(r in, _ none) ([]types.Image, error) {
			return items(g.core.ListImages(r.ctx, r.p))
		})},
	}
}

// imageContentTypes are the accepted Content-Types of an image upload; an
// absent Content-Type is accepted too and the core sniffs the stream.
var imageContentTypes = map[string]bool{
	"application/x-tar":        true,
	"application/tar":          true,
	"application/gzip":         true,
	"application/x-gzip":       true,
	"application/tar+gzip":     true,
	"application/octet-stream": true,
}

// importImage streams the body, a tar of unlimited size, to the core; with
// ref it asks the core to pull that reference instead.
func (g images) importImage(r in, _ none) (types.Image, error) {
	name := r.c.Query("name")
	if name == "" {
		return types.Image{}, invalidArgument("query parameter name is required (POST /v1/images?name=NAME)")
	}
	if ref := r.c.Query("ref"); ref != "" {
		return g.core.PullImage(r.ctx, r.p, name, ref)
	}
	if ct := r.c.GetHeader("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !imageContentTypes[mt] {
			return types.Image{}, invalidArgument("content type %q: an image upload is a tar stream (application/x-tar or application/gzip)", ct)
		}
	}
	return g.core.ImportImage(r.ctx, r.p, name, r.c.Request.Body)
}
