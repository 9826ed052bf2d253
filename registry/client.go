package registry

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/envd-dev/envd/errdefs"
)

// DefaultPath is the PATH of images made by ImportRootfs.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Client assembles, pushes, resolves, verifies and deletes images in one
// registry spoken to over plain HTTP. It is safe for concurrent use.
type Client struct {
	addr      string
	reg       name.Registry
	transport http.RoundTripper
	backoff   remote.Backoff
	auth      authn.Authenticator // every request but deletes
	delAuth   authn.Authenticator // deletes
}

// clientOptions are what ClientOptions set; defaultClientOptions holds
// every default.
type clientOptions struct {
	transport http.RoundTripper
	backoff   remote.Backoff
	cred      Credential // zero = anonymous
	delCred   Credential // zero = cred
}

func defaultClientOptions() clientOptions {
	return clientOptions{
		transport: remote.DefaultTransport.(*http.Transport).Clone(),
		backoff:   remote.Backoff{Duration: 250 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 3},
	}
}

// ClientOption configures a Client; it fails NewClient on an invalid value.
type ClientOption func(*clientOptions) error

// WithTransport sets the HTTP transport the client sends requests through
// (go-containerregistry adds retries and authentication on top of it).
// Default: a clone of remote.DefaultTransport. A nil transport is invalid.
func WithTransport(t http.RoundTripper) ClientOption {
	return func(o *clientOptions) error {
		if t == nil {
			return fmt.Errorf("registry client transport is nil: %w", errdefs.ErrInvalidArgument)
		}
		o.transport = t
		return nil
	}
}

// WithRetryBackoff sets how transient failures (resets, 5xx, 429) are
// retried. Default: 3 attempts, 250 ms apart, doubling. A refused
// connection is not retried: the registry is down, and callers get
// errdefs.ErrUnavailable at once. Steps must be at least 1 (one attempt)
// and Duration not negative.
func WithRetryBackoff(b remote.Backoff) ClientOption {
	return func(o *clientOptions) error {
		if b.Steps < 1 || b.Duration < 0 {
			return fmt.Errorf("registry client backoff: %d steps of %s: %w", b.Steps, b.Duration, errdefs.ErrInvalidArgument)
		}
		o.backoff = b
		return nil
	}
}

// WithCredential sets the credential of every request (HTTP Basic, sent
// after the registry's challenge). Default: anonymous; a zero Credential
// keeps it. A user without a password, or the reverse, is invalid.
func WithCredential(cr Credential) ClientOption {
	return func(o *clientOptions) error {
		if err := validCredential(cr); err != nil {
			return err
		}
		o.cred = cr
		return nil
	}
}

// WithDeleteCredential sets the credential DeleteManifest uses: the
// embedded registry lets only its GC credential delete. Default: the one of
// WithCredential; a zero Credential keeps it. A user without a password,
// or the reverse, is invalid.
func WithDeleteCredential(cr Credential) ClientOption {
	return func(o *clientOptions) error {
		if err := validCredential(cr); err != nil {
			return err
		}
		o.delCred = cr
		return nil
	}
}

func validCredential(cr Credential) error {
	if (cr.User == "") != (cr.Password == "") {
		return fmt.Errorf("registry credential %s: needs both a user and a password: %w", cr, errdefs.ErrInvalidArgument)
	}
	return nil
}

// NewClient talks plain HTTP to a registry at addr ("host:port"). An
// invalid option is an errdefs.ErrInvalidArgument; an invalid addr is
// reported by the first call, as errdefs.ErrInvalidArgument.
func NewClient(addr string, opts ...ClientOption) (*Client, error) {
	o := defaultClientOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	c := &Client{addr: addr, transport: o.transport, backoff: o.backoff, auth: authn.Anonymous}
	// name.Insecure makes go-containerregistry use http instead of https.
	if reg, err := name.NewRegistry(addr, name.Insecure, name.StrictValidation); err == nil {
		c.reg = reg
	}
	if !o.cred.IsZero() {
		c.auth = authn.FromConfig(authn.AuthConfig{Username: o.cred.User, Password: o.cred.Password})
	}
	c.delAuth = c.auth
	if !o.delCred.IsZero() {
		c.delAuth = authn.FromConfig(authn.AuthConfig{Username: o.delCred.User, Password: o.delCred.Password})
	}
	return c, nil
}

// Addr returns the registry's "host:port".
func (c *Client) Addr() string { return c.addr }

// Image identifies a stored image by repository and manifest digest.
type Image struct {
	Repo   string // e.g. "envd/images/busybox" or "envd/projects/p1"
	Digest string // "sha256:..." manifest digest
	Layers []LayerInfo
	Size   int64 // sum of compressed layer sizes + config + manifest
}

// Ref returns "repo@sha256:..." without a host: the Client adds its own.
func (i Image) Ref() string { return i.Repo + "@" + i.Digest }

func (c *Client) options(ctx context.Context) []remote.Option {
	return c.optionsWith(ctx, c.auth)
}

func (c *Client) optionsWith(ctx context.Context, auth authn.Authenticator) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithTransport(c.transport),
		remote.WithAuth(auth),
		remote.WithRetryBackoff(c.backoff),
		// An index resolves to the manifest for this machine.
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}),
	}
}

func (c *Client) repository(repo string) (name.Repository, error) {
	if c.reg.RegistryStr() == "" {
		return name.Repository{}, fmt.Errorf("registry address %q: %w", c.addr, errdefs.ErrInvalidArgument)
	}
	if err := validateRepo(repo); err != nil {
		return name.Repository{}, err
	}
	return c.reg.Repo(repo), nil
}

func (c *Client) digestRef(repo, digest string) (name.Digest, error) {
	r, err := c.repository(repo)
	if err != nil {
		return name.Digest{}, err
	}
	if err := validateDigest(digest); err != nil {
		return name.Digest{}, err
	}
	return r.Digest(digest), nil
}

// parseRef parses "repo@sha256:..." or "repo:tag" (no host).
func (c *Client) parseRef(ref string) (name.Reference, error) {
	if repo, digest, ok := strings.Cut(ref, "@"); ok {
		return c.digestRef(repo, digest)
	}
	slash := strings.LastIndex(ref, "/")
	colon := strings.LastIndex(ref, ":")
	if colon <= slash {
		return nil, fmt.Errorf("reference %q: want repo@digest or repo:tag: %w", ref, errdefs.ErrInvalidArgument)
	}
	r, err := c.repository(ref[:colon])
	if err != nil {
		return nil, err
	}
	tag := ref[colon+1:]
	if err := validateTag(tag); err != nil {
		return nil, err
	}
	return r.Tag(tag), nil
}

// ImportRootfs makes a single-layer image from a root filesystem and pushes
// it to repo, tagged with tag unless tag is "". src is a directory or a tar
// file (plain or gzip). The layer is a gzip tar of the tree with owners,
// modes, symlinks, hardlinks, xattrs and device nodes preserved; entries of a
// tar source are copied with their names made relative. The config sets
// os=linux, architecture=runtime.GOARCH (containerd drops images without an
// architecture when matching platforms), Env PATH=DefaultPath and Cmd
// ["/bin/sh"]. The pushed image is verified before it is returned.
func (c *Client) ImportRootfs(ctx context.Context, src, repo, tag string) (Image, error) {
	r, err := c.repository(repo)
	if err != nil {
		return Image{}, err
	}
	if tag != "" {
		if err := validateTag(tag); err != nil {
			return Image{}, err
		}
	}
	lf, err := writeRootfsLayer(src, "")
	if err != nil {
		return Image{}, err
	}
	defer os.Remove(lf.Path)
	return c.pushRootfsLayer(ctx, r, lf, tag)
}

// PushRootfsLayer makes a single-layer base image in repo from a layer
// file already encoded (for example as eStargz from WriteRootfsTar's
// output), with the same config as ImportRootfs, and pushes it.
func (c *Client) PushRootfsLayer(ctx context.Context, lf LayerFile, repo, tag string) (Image, error) {
	r, err := c.repository(repo)
	if err != nil {
		return Image{}, err
	}
	if tag != "" {
		if err := validateTag(tag); err != nil {
			return Image{}, err
		}
	}
	return c.pushRootfsLayer(ctx, r, lf, tag)
}

func (c *Client) pushRootfsLayer(ctx context.Context, r name.Repository, lf LayerFile, tag string) (Image, error) {
	layer, err := newFileLayer(lf)
	if err != nil {
		return Image{}, err
	}

	now := time.Now().UTC().Truncate(time.Second)
	base, err := mutate.ConfigFile(
		mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON),
		&v1.ConfigFile{
			Created:      v1.Time{Time: now},
			OS:           "linux",
			Architecture: runtime.GOARCH,
			RootFS:       v1.RootFS{Type: "layers"},
			Config: v1.Config{
				Env: []string{DefaultPath},
				Cmd: []string{"/bin/sh"},
			},
		})
	if err != nil {
		return Image{}, fmt.Errorf("image config: %w", err)
	}
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:       layer,
		MediaType:   types.MediaType(lf.MediaType),
		Annotations: lf.Annotations, // eStargz TOC digest: what lets the base restore lazily
		History:     v1.History{Created: v1.Time{Time: now}, CreatedBy: "envd import rootfs"},
	})
	if err != nil {
		return Image{}, fmt.Errorf("assemble image: %w", err)
	}
	return c.push(ctx, r, img, tag)
}

// Append makes a new image in targetRepo: the parent image's layers plus
// one new layer (the LayerFile), with rootfs.diff_ids and history extended.
// Layer annotations of the parent are kept and those of the LayerFile are
// set on the new descriptor. annotations are merged over the parent's
// manifest annotations.
//
// Parent blobs are mounted cross-repository from parent.Repo (never
// re-uploaded); the layer is streamed from its file; then the manifest is
// pushed by digest and tagged if tag != "". Last, the manifest and every
// blob are checked in targetRepo with HEAD requests; any failure is an
// error, and the caller must not record the image.
func (c *Client) Append(ctx context.Context, parent Image, layer LayerFile, targetRepo, tag string, annotations map[string]string) (Image, error) {
	parentRef, err := c.digestRef(parent.Repo, parent.Digest)
	if err != nil {
		return Image{}, fmt.Errorf("parent: %w", err)
	}
	target, err := c.repository(targetRepo)
	if err != nil {
		return Image{}, err
	}
	if tag != "" {
		if err := validateTag(tag); err != nil {
			return Image{}, err
		}
	}
	fl, err := newFileLayer(layer)
	if err != nil {
		return Image{}, err
	}

	// remote.Image wraps every layer in a remote.MountableLayer carrying
	// parentRef; remote.Write then asks the target repository for a mount
	// (POST /v2/<target>/blobs/uploads/?mount=<digest>&from=<parent repo>)
	// instead of uploading, after a HEAD shows the blob is not there yet.
	base, err := remote.Image(parentRef, c.options(ctx)...)
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("parent image %q", parent.Ref()))
	}
	now := time.Now().UTC().Truncate(time.Second)
	img, err := mutate.Append(base, mutate.Addendum{
		Layer:       fl,
		Annotations: maps.Clone(layer.Annotations),
		MediaType:   types.MediaType(layer.MediaType),
		History:     v1.History{Created: v1.Time{Time: now}, CreatedBy: "envd append"},
	})
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("assemble image on %q", parent.Ref()))
	}
	img, err = mutate.CreatedAt(img, v1.Time{Time: now})
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("assemble image on %q", parent.Ref()))
	}
	if len(annotations) > 0 {
		var ok bool
		if img, ok = mutate.Annotations(img, maps.Clone(annotations)).(v1.Image); !ok {
			return Image{}, fmt.Errorf("annotate image on %q: not an image", parent.Ref())
		}
	}
	return c.push(ctx, target, img, tag)
}

// push writes img to repo by digest, tags it if tag != "", verifies it and
// describes it.
func (c *Client) push(ctx context.Context, repo name.Repository, img v1.Image, tag string) (Image, error) {
	d, err := img.Digest()
	if err != nil {
		return Image{}, fmt.Errorf("image digest: %w", err)
	}
	ref := repo.Digest(d.String())
	if err := remote.Write(ref, img, c.options(ctx)...); err != nil {
		return Image{}, translate(err, fmt.Sprintf("push %q", repo.RepositoryStr()+"@"+d.String()))
	}
	if tag != "" {
		if err := remote.Tag(repo.Tag(tag), img, c.options(ctx)...); err != nil {
			return Image{}, translate(err, fmt.Sprintf("tag %q", repo.RepositoryStr()+":"+tag))
		}
	}
	out, err := describe(repo.RepositoryStr(), img)
	if err != nil {
		return Image{}, err
	}
	if err := c.Verify(ctx, out); err != nil {
		return Image{}, fmt.Errorf("verify pushed image: %w", err)
	}
	return out, nil
}

// describe builds an Image from a manifest and config.
func describe(repo string, img v1.Image) (Image, error) {
	raw, err := img.RawManifest()
	if err != nil {
		return Image{}, fmt.Errorf("manifest of %q: %w", repo, err)
	}
	m, err := img.Manifest()
	if err != nil {
		return Image{}, fmt.Errorf("manifest of %q: %w", repo, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return Image{}, fmt.Errorf("config of %q: %w", repo, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return Image{}, fmt.Errorf("image in %q has %d layers and %d diff ids: %w",
			repo, len(m.Layers), len(cfg.RootFS.DiffIDs), errdefs.ErrInvalidArgument)
	}
	d, err := img.Digest()
	if err != nil {
		return Image{}, err
	}
	out := Image{Repo: repo, Digest: d.String(), Size: m.Config.Size + int64(len(raw))}
	for i, l := range m.Layers {
		out.Layers = append(out.Layers, LayerInfo{
			Digest:      l.Digest.String(),
			DiffID:      cfg.RootFS.DiffIDs[i].String(),
			MediaType:   string(l.MediaType),
			Size:        l.Size,
			Annotations: maps.Clone(l.Annotations),
		})
		out.Size += l.Size
	}
	return out, nil
}

// Get resolves "repo@digest" or "repo:tag" to an Image. An index resolves to
// its linux/runtime.GOARCH manifest. A missing manifest or repository is
// errdefs.ErrNotFound.
func (c *Client) Get(ctx context.Context, ref string) (Image, error) {
	r, err := c.parseRef(ref)
	if err != nil {
		return Image{}, err
	}
	img, err := remote.Image(r, c.options(ctx)...)
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("image %q", ref))
	}
	out, err := describe(r.Context().RepositoryStr(), img)
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("image %q", ref))
	}
	return out, nil
}

// Verify checks that img's manifest is stored under its digest in img.Repo
// and that its config and every layer blob are there with the right sizes,
// with HEAD requests (the manifest is also fetched to learn its blobs). When
// img.Layers is set it must match the manifest's layers. Missing content is
// errdefs.ErrNotFound.
func (c *Client) Verify(ctx context.Context, img Image) error {
	ref, err := c.digestRef(img.Repo, img.Digest)
	if err != nil {
		return err
	}
	opts := c.options(ctx)
	what := fmt.Sprintf("manifest %q", img.Ref())
	head, err := remote.Head(ref, opts...)
	if err != nil {
		return translate(err, what)
	}
	if head.Digest.String() != img.Digest {
		return fmt.Errorf("%s: registry answers digest %s", what, head.Digest)
	}
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return translate(err, what)
	}
	m, err := v1.ParseManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return fmt.Errorf("%s: %w: %w", what, errdefs.ErrInvalidArgument, err)
	}
	if len(img.Layers) > 0 {
		if len(img.Layers) != len(m.Layers) {
			return fmt.Errorf("%s: has %d layers, want %d: %w", what, len(m.Layers), len(img.Layers), errdefs.ErrFailedPrecondition)
		}
		for i, l := range m.Layers {
			if l.Digest.String() != img.Layers[i].Digest {
				return fmt.Errorf("%s: layer %d is %s, want %s: %w", what, i, l.Digest, img.Layers[i].Digest, errdefs.ErrFailedPrecondition)
			}
		}
	}

	tr, err := transport.NewWithContext(ctx, c.reg, c.auth, c.transport,
		[]string{ref.Context().Scope(transport.PullScope)})
	if err != nil {
		return translate(err, fmt.Sprintf("registry %q", c.addr))
	}
	hc := &http.Client{Transport: tr}
	for _, b := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		if err := headBlob(ctx, hc, ref.Context(), b); err != nil {
			return err
		}
	}
	return nil
}

func headBlob(ctx context.Context, hc *http.Client, repo name.Repository, b v1.Descriptor) error {
	what := fmt.Sprintf("blob %s in %q", b.Digest, repo.RepositoryStr())
	u := fmt.Sprintf("%s://%s/v2/%s/blobs/%s", repo.Scheme(), repo.RegistryStr(), repo.RepositoryStr(), b.Digest)
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return translate(err, what)
	}
	defer resp.Body.Close()
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return translate(err, what)
	}
	if resp.ContentLength >= 0 && resp.ContentLength != b.Size {
		return fmt.Errorf("%s: registry has %d bytes, manifest says %d: %w", what, resp.ContentLength, b.Size, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// DeleteManifest deletes img's manifest by digest; tags pointing to it go
// with it, blobs stay until the registry's garbage collection.
func (c *Client) DeleteManifest(ctx context.Context, img Image) error {
	ref, err := c.digestRef(img.Repo, img.Digest)
	if err != nil {
		return err
	}
	if err := remote.Delete(ref, c.optionsWith(ctx, c.delAuth)...); err != nil {
		return translate(err, fmt.Sprintf("delete manifest %q", img.Ref()))
	}
	return nil
}

// Ping asks the registry's base endpoint (GET /v2/) with the client's
// credential, as every client does before its first request. A registry
// that refuses the credential is errdefs.ErrUnauthenticated; one that
// cannot be reached, errdefs.ErrUnavailable.
func (c *Client) Ping(ctx context.Context) error {
	if c.reg.RegistryStr() == "" {
		return fmt.Errorf("registry address %q: %w", c.addr, errdefs.ErrInvalidArgument)
	}
	what := fmt.Sprintf("registry %q", c.addr)
	tr, err := transport.NewWithContext(ctx, c.reg, c.auth, c.transport, nil)
	if err != nil {
		return translate(err, what)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s://%s/v2/", c.reg.Scheme(), c.reg.RegistryStr()), nil)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return translate(err, what)
	}
	defer resp.Body.Close()
	return translate(transport.CheckError(resp, http.StatusOK), what)
}
