package registry

import (
	"context"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Remote is what a package storing its own kind of content beside Client's
// images (registry/memimage) needs to speak to the same registry with the
// same credential, transport and retries: repo (validated) on this client's
// registry, the go-containerregistry options of the client's requests, and
// an HTTP client authorized to push and pull in repo (for HEADs and ranged
// blob GETs that go-containerregistry does not offer). An invalid repo is
// errdefs.ErrInvalidArgument; a registry that refuses the credential or
// cannot be reached is errdefs.ErrUnauthenticated or errdefs.ErrUnavailable.
func (c *Client) Remote(ctx context.Context, repo string) (name.Repository, []remote.Option, *http.Client, error) {
	r, err := c.repository(repo)
	if err != nil {
		return name.Repository{}, nil, nil, err
	}
	tr, err := transport.NewWithContext(ctx, c.reg, c.auth, c.transport,
		[]string{r.Scope(transport.PushScope)})
	if err != nil {
		return name.Repository{}, nil, nil, translate(err, fmt.Sprintf("registry %q", c.addr))
	}
	return r, c.options(ctx), &http.Client{Transport: tr}, nil
}

// Translate maps an error of go-containerregistry, of the registry's
// answers or of the network to its errdefs kind, keeping the original in the
// chain; what names the object ("blob sha256:... in \"envd/projects/p1\"").
func Translate(err error, what string) error { return translate(err, what) }
