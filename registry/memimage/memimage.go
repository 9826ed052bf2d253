package memimage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
)

// Media types of a memory image artifact (see the package doc).
const (
	ArtifactType   = "application/vnd.envd.memory.v1"
	IndexMediaType = "application/vnd.envd.memory.index.v1+json"
	ChunkMediaType = "application/vnd.envd.memory.chunk.v1"
)

// DefaultChunkSize is the chunk size of a push unless WithChunkSize says
// otherwise. Measured on gVisor's pages.img (docs/notes/running-state.md,
// "Chunk size"): a 10% change of memory re-stores 12.6% at 1 MiB against
// 11.2% at 256 KiB, and a push of 1 MiB chunks takes a third of the time
// (the registry's cost is per blob); a 19 GiB image still has a manifest
// under the registry's 4 MiB limit.
const DefaultChunkSize = 1 << 20

// pageSize is the unit chunk sizes are a multiple of: engines write memory
// in pages, so page-aligned chunks see a changed page as one changed chunk.
const pageSize = 4096

// maxChunks bounds the distinct chunks of one artifact, so that its
// manifest stays under distribution's 4 MiB manifest limit (a chunk
// descriptor is about 120 bytes of JSON): 19.5 GiB of distinct memory at
// the default chunk size.
const maxChunks = 20000

// Bounds on what a stored artifact may claim, checked before anything is
// allocated for it: its index (about 3 bytes per hole and 75 per chunk, so
// 16 MiB is far more than maxChunks need) and its chunk size.
const (
	maxIndexSize = 16 << 20
	maxChunkSize = 64 << 20
)

// Store pushes and reads memory images in one registry. It is safe for
// concurrent use.
type Store struct {
	c *registry.Client
	o options
}

type options struct {
	chunkSize int64
	jobs      int
	cache     int
	maxChunks int // maxChunks; tests lower it
}

func defaultOptions() options {
	return options{chunkSize: DefaultChunkSize, jobs: 4, cache: 16, maxChunks: maxChunks}
}

// Option configures a Store; an invalid value fails New.
type Option func(*options) error

// WithChunkSize sets the chunk size of pushes, a positive multiple of 4096
// up to 64 MiB.
// Default: DefaultChunkSize. Reads use the chunk size recorded in each
// artifact's index, whatever this says.
func WithChunkSize(n int64) Option {
	return func(o *options) error {
		if n <= 0 || n > maxChunkSize || n%pageSize != 0 {
			return fmt.Errorf("memory image chunk size %d: not a positive multiple of %d up to %d: %w", n, pageSize, maxChunkSize, errdefs.ErrInvalidArgument)
		}
		o.chunkSize = n
		return nil
	}
}

// WithConcurrency sets how many blobs a push or a pull transfers at once.
// Default: 4. It must be at least 1.
func WithConcurrency(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("memory image concurrency %d: must be at least 1: %w", n, errdefs.ErrInvalidArgument)
		}
		o.jobs = n
		return nil
	}
}

// WithCacheChunks sets how many chunks a lazy Reader keeps in memory
// (least recently used goes first). Default: 16 (16 MiB at the default
// chunk size). It must be at least 1.
func WithCacheChunks(n int) Option {
	return func(o *options) error {
		if n < 1 {
			return fmt.Errorf("memory image cache of %d chunks: must be at least 1: %w", n, errdefs.ErrInvalidArgument)
		}
		o.cache = n
		return nil
	}
}

// New returns a Store speaking to c's registry with c's credential.
func New(c *registry.Client, opts ...Option) (*Store, error) {
	if c == nil {
		return nil, fmt.Errorf("memory image store: nil registry client: %w", errdefs.ErrInvalidArgument)
	}
	o := defaultOptions()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	return &Store{c: c, o: o}, nil
}

// Index is an artifact's config blob: how its chunks make its files.
type Index struct {
	ChunkSize int64       `json:"chunkSize"`
	Files     []IndexFile `json:"files"`
}

// IndexFile is one file of an image directory.
type IndexFile struct {
	Name string `json:"name"` // a plain file name, no directory
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"` // permission bits
	// Chunks holds the digest of each chunk in file order, "" for a chunk
	// of zeros (a hole, stored as nothing); chunk i covers
	// [i*ChunkSize, min(Size, (i+1)*ChunkSize)).
	Chunks []string `json:"chunks"`
}

// chunkLen is the length of chunk i of f.
func (ix *Index) chunkLen(f *IndexFile, i int) int64 {
	return min(ix.ChunkSize, f.Size-int64(i)*ix.ChunkSize)
}

// Artifact is a memory image stored in a repository.
type Artifact struct {
	Repo    string // e.g. "envd/projects/p1"
	Digest  string // manifest digest, "sha256:..."
	Subject string // manifest digest of the version it belongs to, "" for none
	// Annotations are the manifest's (the caller's, plus
	// org.opencontainers.image.created).
	Annotations map[string]string
	Index       Index
	// Blobs are the blobs the artifact holds in the registry: the index
	// (config) first, then each distinct chunk once. The manifest itself is
	// not a blob; ManifestSize says its size.
	Blobs        []Blob
	ManifestSize int64
}

// Ref returns "repo@sha256:...".
func (a Artifact) Ref() string { return a.Repo + "@" + a.Digest }

// Blob is one content-addressed blob.
type Blob struct {
	Digest string
	Size   int64
}

func (s *Store) remote(ctx context.Context, repo string) (name.Repository, []remote.Option, *http.Client, error) {
	return s.c.Remote(ctx, repo)
}

// Get reads the artifact repo@digest: its manifest and index, checked
// against each other. A missing manifest is errdefs.ErrNotFound; a manifest
// that is not a memory image, or whose index does not describe its blobs,
// errdefs.ErrInvalidArgument.
func (s *Store) Get(ctx context.Context, repo, digest string) (Artifact, error) {
	r, opts, hc, err := s.remote(ctx, repo)
	if err != nil {
		return Artifact{}, err
	}
	what := fmt.Sprintf("memory image %s@%s", repo, digest)
	if _, err := v1.NewHash(digest); err != nil {
		return Artifact{}, fmt.Errorf("%s: %w: %w", what, errdefs.ErrInvalidArgument, err)
	}
	desc, err := remote.Get(r.Digest(digest), opts...)
	if err != nil {
		return Artifact{}, registry.Translate(err, what)
	}
	m, err := v1.ParseManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return Artifact{}, fmt.Errorf("%s: manifest: %w: %w", what, errdefs.ErrInvalidArgument, err)
	}
	if m.ArtifactType != ArtifactType || m.Config.MediaType != IndexMediaType {
		return Artifact{}, fmt.Errorf("%s: artifact type %q with a config of %q, not a memory image: %w",
			what, m.ArtifactType, m.Config.MediaType, errdefs.ErrInvalidArgument)
	}
	if m.Config.Size < 0 || m.Config.Size > maxIndexSize {
		return Artifact{}, fmt.Errorf("%s: index of %d bytes, more than %d: %w", what, m.Config.Size, maxIndexSize, errdefs.ErrInvalidArgument)
	}
	raw, err := fetchBlob(ctx, hc, r, m.Config.Digest.String(), m.Config.Size)
	if err != nil {
		return Artifact{}, fmt.Errorf("%s: index: %w", what, err)
	}
	var ix Index
	if err := json.Unmarshal(raw, &ix); err != nil {
		return Artifact{}, fmt.Errorf("%s: index: %w: %w", what, errdefs.ErrInvalidArgument, err)
	}
	a := Artifact{
		Repo: repo, Digest: digest, Annotations: m.Annotations, Index: ix,
		Blobs:        []Blob{{Digest: m.Config.Digest.String(), Size: m.Config.Size}},
		ManifestSize: int64(len(desc.Manifest)),
	}
	if m.Subject != nil {
		a.Subject = m.Subject.Digest.String()
	}
	for _, l := range m.Layers {
		a.Blobs = append(a.Blobs, Blob{Digest: l.Digest.String(), Size: l.Size})
	}
	if err := a.check(); err != nil {
		return Artifact{}, fmt.Errorf("%s: %w", what, err)
	}
	return a, nil
}

// check says whether the index describes the manifest's chunk blobs: safe,
// distinct file names, chunk counts that fit the sizes, and every chunk a
// blob of the manifest with the chunk's length. Nothing it accepts can
// write outside a pull's directory or read past a blob.
func (a *Artifact) check() error {
	ix := &a.Index
	if ix.ChunkSize <= 0 || ix.ChunkSize > maxChunkSize || ix.ChunkSize%pageSize != 0 {
		return fmt.Errorf("chunk size %d: %w", ix.ChunkSize, errdefs.ErrInvalidArgument)
	}
	sizes := map[string]int64{}
	for _, b := range a.Blobs[1:] {
		sizes[b.Digest] = b.Size
	}
	names := map[string]bool{}
	for fi := range ix.Files {
		f := &ix.Files[fi]
		if f.Name == "" || f.Name == "." || f.Name == ".." || filepath.Base(f.Name) != f.Name || names[f.Name] {
			return fmt.Errorf("file name %q: not a distinct plain name: %w", f.Name, errdefs.ErrInvalidArgument)
		}
		names[f.Name] = true
		if f.Size < 0 || int64(len(f.Chunks)) != (f.Size+ix.ChunkSize-1)/ix.ChunkSize {
			return fmt.Errorf("file %q: %d chunks for %d bytes: %w", f.Name, len(f.Chunks), f.Size, errdefs.ErrInvalidArgument)
		}
		for i, d := range f.Chunks {
			if d == "" {
				continue
			}
			if n, ok := sizes[d]; !ok || n != ix.chunkLen(f, i) {
				return fmt.Errorf("file %q chunk %d: blob %s is not in the manifest with %d bytes: %w",
					f.Name, i, d, ix.chunkLen(f, i), errdefs.ErrInvalidArgument)
			}
		}
	}
	return nil
}

// blobURL is the registry's URL of blob digest in r.
func blobURL(r name.Repository, digest string) string {
	return fmt.Sprintf("%s://%s/v2/%s/blobs/%s", r.Scheme(), r.RegistryStr(), r.RepositoryStr(), digest)
}

// fetchBlob GETs a whole blob of size bytes and checks it against its
// digest.
func fetchBlob(ctx context.Context, hc *http.Client, r name.Repository, digest string, size int64) ([]byte, error) {
	what := fmt.Sprintf("blob %s in %q", digest, r.RepositoryStr())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, blobURL(r, digest), nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, registry.Translate(err, what)
	}
	defer resp.Body.Close()
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return nil, registry.Translate(err, what)
	}
	if resp.ContentLength >= 0 && resp.ContentLength != size {
		return nil, fmt.Errorf("%s: registry has %d bytes, the manifest says %d", what, resp.ContentLength, size)
	}
	buf := make([]byte, size)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		return nil, registry.Translate(err, what+": read")
	}
	sum := sha256.Sum256(buf)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != digest {
		return nil, fmt.Errorf("%s: content has digest %s", what, got)
	}
	return buf, nil
}

// rawManifest is a manifest remote.Put sends with its media type.
type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
