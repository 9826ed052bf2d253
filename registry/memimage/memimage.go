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
// IndexV1MediaType is the index of fixed-size chunks that pushes before
// content-defined chunks wrote; it is still read.
const (
	ArtifactType     = "application/vnd.envd.memory.v1"
	IndexMediaType   = "application/vnd.envd.memory.index.v2+json"
	IndexV1MediaType = "application/vnd.envd.memory.index.v1+json"
	ChunkMediaType   = "application/vnd.envd.memory.chunk.v1"
)

// DefaultChunkSize is the average chunk size of a push unless
// WithChunkSize says otherwise (chunks are 256 KiB to 4 MiB around it).
// Measured on gVisor's pages.img (docs/notes/running-state.md, "Chunks"):
// the registry's cost is per blob, so larger chunks push faster, and a
// second checkpoint after a 10% change re-stores little more at 1 MiB than
// at 256 KiB.
const DefaultChunkSize = 1 << 20

// pageSize is the unit of chunking: engines write memory in pages, so a
// page is what is compared, cut after, or left as a hole.
const pageSize = 4096

// maxChunks bounds the chunks of one artifact, so that its manifest stays
// under distribution's 4 MiB manifest limit (a chunk descriptor is about
// 120 bytes of JSON): an image that would have more is cut with a larger
// average (twice, four times ...), about 19.5 GiB of memory per doubling
// step at the default.
const maxChunks = 20000

// Bounds on what a stored artifact may claim, checked before anything is
// allocated for it: its index (about 3 bytes per hole and 85 per chunk, so
// 16 MiB is far more than maxChunks need) and the length of any one chunk.
const (
	maxIndexSize = 16 << 20
	maxChunkSize = 64 << 20
)

// Registry is the registry a Store speaks to (registry.Client): its
// requests' remote options and authorized HTTP client for a repository,
// and the verification of a pushed manifest.
type Registry interface {
	Remote(ctx context.Context, repo string) (name.Repository, []remote.Option, *http.Client, error)
	Verify(ctx context.Context, img registry.Image) error
}

// Store pushes and reads memory images in one registry. It is safe for
// concurrent use.
type Store struct {
	c Registry
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

// WithChunkSize sets the average chunk size of pushes, a positive multiple
// of 4096 up to 16 MiB; a chunk is a quarter to four times of it. An image
// that would have more than 20,000 chunks is cut with a larger average.
// Default: DefaultChunkSize. Reads use the chunks recorded in each
// artifact's index, whatever this says.
func WithChunkSize(n int64) Option {
	return func(o *options) error {
		if n <= 0 || n > maxChunkSize/4 || n%pageSize != 0 {
			return fmt.Errorf("memory image chunk size %d: not a positive multiple of %d up to %d: %w", n, pageSize, maxChunkSize/4, errdefs.ErrInvalidArgument)
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
// (least recently used goes first). Default: 16 (about 16 MiB at the
// default chunk size, 64 MiB at most). It must be at least 1.
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
func New(c Registry, opts ...Option) (*Store, error) {
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

// Index is an artifact's config blob: how its chunks make its files. It
// has one of two shapes, told apart by the config's media type and by
// ChunkSize:
//
//   - content-defined (IndexMediaType, what Push writes): Chunking is set,
//     ChunkSize is 0, and each file lists its extents in order, a digest
//     ("" for a hole) and a length each in Chunks and Lengths; an extent's
//     offset is the sum of the lengths before it.
//   - fixed (IndexV1MediaType, read only): ChunkSize is set, Chunking and
//     every Lengths absent, and chunk i of a file covers
//     [i*ChunkSize, min(Size, (i+1)*ChunkSize)).
type Index struct {
	ChunkSize int64       `json:"chunkSize,omitempty"`
	Chunking  *Chunking   `json:"chunking,omitempty"`
	Files     []IndexFile `json:"files"`
}

// Chunking is how a content-defined index was cut (chunk.go): it tells a
// reader the longest chunk to expect, and a later push whether its chunks
// can be the same.
type Chunking struct {
	Method  string `json:"method"`  // ChunkingMethod
	Avg     int64  `json:"avg"`     // the average chunk length aimed at
	Min     int64  `json:"min"`     // no chunk shorter, unless a hole or the file's end comes first
	Max     int64  `json:"max"`     // no chunk longer (at most 64 MiB)
	MinHole int64  `json:"minHole"` // the shortest run of zero pages made a hole
}

// IndexFile is one file of an image directory.
type IndexFile struct {
	Name string `json:"name"` // a plain file name, no directory
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"` // permission bits
	// Chunks holds the digest of each extent in file order, "" for a run
	// of zeros (a hole, stored as nothing).
	Chunks []string `json:"chunks"`
	// Lengths holds each extent's length (content-defined index only).
	Lengths []int64 `json:"lengths,omitempty"`
}

// offsets returns where each extent of f starts, and f.Size last (so
// extent i is [offs[i], offs[i+1])). It means that only for an index check
// has accepted; for another it returns something, without panicking.
func (ix *Index) offsets(f *IndexFile) []int64 {
	offs := make([]int64, len(f.Chunks)+1)
	for i := range f.Chunks {
		switch {
		case ix.ChunkSize > 0:
			offs[i+1] = min(f.Size, int64(i+1)*ix.ChunkSize)
		case i < len(f.Lengths):
			offs[i+1] = offs[i] + f.Lengths[i]
		default:
			offs[i+1] = offs[i]
		}
	}
	return offs
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
	m, err := parseManifest(desc.Manifest)
	if err != nil {
		return Artifact{}, fmt.Errorf("%s: %w", what, err)
	}
	raw, err := fetchBlob(ctx, hc, r, m.Config.Digest.String(), m.Config.Size)
	if err != nil {
		return Artifact{}, fmt.Errorf("%s: index: %w", what, err)
	}
	return Parse(repo, desc.Manifest, raw)
}

// parseManifest reads a memory image's manifest, before its index is
// fetched: not one, or an index larger than any push makes, is
// errdefs.ErrInvalidArgument.
func parseManifest(raw []byte) (*v1.Manifest, error) {
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("manifest: %w: %w", errdefs.ErrInvalidArgument, err)
	}
	if m.ArtifactType != ArtifactType || m.Config.MediaType != IndexMediaType && m.Config.MediaType != IndexV1MediaType {
		return nil, fmt.Errorf("artifact type %q with a config of %q, not a memory image: %w",
			m.ArtifactType, m.Config.MediaType, errdefs.ErrInvalidArgument)
	}
	if m.Config.Size < 0 || m.Config.Size > maxIndexSize {
		return nil, fmt.Errorf("index of %d bytes, more than %d: %w", m.Config.Size, maxIndexSize, errdefs.ErrInvalidArgument)
	}
	return m, nil
}

// Parse makes the artifact of repo whose manifest is rawManifest and whose
// index (config blob) is rawIndex, checked as Get checks a stored one: the
// manifest must be a memory image and the index must describe its chunk
// blobs. Both are compared with the digests that name them (the manifest's
// digest is its sha256). For content that is not in a registry yet: an
// import reads an archive's artifact with it before pushing anything.
func Parse(repo string, rawManifest, rawIndex []byte) (Artifact, error) {
	sum := sha256.Sum256(rawManifest)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	what := fmt.Sprintf("memory image %s@%s", repo, digest)
	m, err := parseManifest(rawManifest)
	if err != nil {
		return Artifact{}, fmt.Errorf("%s: %w", what, err)
	}
	isum := sha256.Sum256(rawIndex)
	if got := "sha256:" + hex.EncodeToString(isum[:]); got != m.Config.Digest.String() || int64(len(rawIndex)) != m.Config.Size {
		return Artifact{}, fmt.Errorf("%s: index of %d bytes with digest %s, the manifest says %d bytes, %s: %w",
			what, len(rawIndex), got, m.Config.Size, m.Config.Digest, errdefs.ErrInvalidArgument)
	}
	var ix Index
	if err := json.Unmarshal(rawIndex, &ix); err != nil {
		return Artifact{}, fmt.Errorf("%s: index: %w: %w", what, errdefs.ErrInvalidArgument, err)
	}
	if fixed := m.Config.MediaType == IndexV1MediaType; fixed != (ix.ChunkSize != 0) {
		return Artifact{}, fmt.Errorf("%s: an index of type %s with a chunk size of %d: %w",
			what, m.Config.MediaType, ix.ChunkSize, errdefs.ErrInvalidArgument)
	}
	a := Artifact{
		Repo: repo, Digest: digest, Annotations: m.Annotations, Index: ix,
		Blobs:        []Blob{{Digest: m.Config.Digest.String(), Size: m.Config.Size}},
		ManifestSize: int64(len(rawManifest)),
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
// distinct file names, extents that tile each file exactly (no gap, no
// overlap, nothing past its end), no chunk longer than the index's maximum,
// and every chunk a blob of the manifest with the chunk's length. Nothing it
// accepts can write outside a pull's directory or read past a blob.
func (a *Artifact) check() error {
	ix := &a.Index
	fixed := ix.ChunkSize != 0
	var longest int64
	switch {
	case fixed && ix.Chunking != nil:
		return fmt.Errorf("an index with both a chunk size and content-defined chunking: %w", errdefs.ErrInvalidArgument)
	case fixed:
		if ix.ChunkSize < 0 || ix.ChunkSize > maxChunkSize || ix.ChunkSize%pageSize != 0 {
			return fmt.Errorf("chunk size %d: %w", ix.ChunkSize, errdefs.ErrInvalidArgument)
		}
		longest = ix.ChunkSize
	case ix.Chunking == nil:
		return fmt.Errorf("an index with neither a chunk size nor content-defined chunking: %w", errdefs.ErrInvalidArgument)
	default:
		longest = ix.Chunking.Max
		if longest <= 0 || longest > maxChunkSize {
			return fmt.Errorf("longest chunk %d: not in (0, %d]: %w", longest, maxChunkSize, errdefs.ErrInvalidArgument)
		}
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
		if f.Size < 0 {
			return fmt.Errorf("file %q: size %d: %w", f.Name, f.Size, errdefs.ErrInvalidArgument)
		}
		if fixed {
			if f.Lengths != nil || int64(len(f.Chunks)) != f.Size/ix.ChunkSize+min(1, f.Size%ix.ChunkSize) {
				return fmt.Errorf("file %q: %d chunks of %d bytes for %d bytes: %w", f.Name, len(f.Chunks), ix.ChunkSize, f.Size, errdefs.ErrInvalidArgument)
			}
		} else {
			if len(f.Lengths) != len(f.Chunks) {
				return fmt.Errorf("file %q: %d lengths for %d chunks: %w", f.Name, len(f.Lengths), len(f.Chunks), errdefs.ErrInvalidArgument)
			}
			// Each length positive and no more than what is left: the
			// extents then neither overlap nor run past the end, and the
			// sum cannot overflow; the sum being the size leaves no gap.
			var off int64
			for i, n := range f.Lengths {
				if n <= 0 || n > f.Size-off {
					return fmt.Errorf("file %q extent %d at %d: length %d, %d bytes left in the file: %w",
						f.Name, i, off, n, f.Size-off, errdefs.ErrInvalidArgument)
				}
				off += n
			}
			if off != f.Size {
				return fmt.Errorf("file %q: extents cover %d of %d bytes: %w", f.Name, off, f.Size, errdefs.ErrInvalidArgument)
			}
		}
		offs := ix.offsets(f)
		for i, d := range f.Chunks {
			if d == "" {
				continue
			}
			n := offs[i+1] - offs[i]
			if n > longest {
				return fmt.Errorf("file %q chunk %d: %d bytes, longer than the index's longest chunk (%d): %w",
					f.Name, i, n, longest, errdefs.ErrInvalidArgument)
			}
			if size, ok := sizes[d]; !ok || size != n {
				return fmt.Errorf("file %q chunk %d: blob %s is not in the manifest with %d bytes: %w",
					f.Name, i, d, n, errdefs.ErrInvalidArgument)
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
		// A registry that serves other bytes under a digest is a broken
		// dependency: nothing of it is used.
		return nil, fmt.Errorf("%s: content has digest %s, refused: %w", what, got, errdefs.ErrUnavailable)
	}
	return buf, nil
}

// rawManifest is a manifest remote.Put sends with its media type.
type rawManifest []byte

func (m rawManifest) RawManifest() ([]byte, error)        { return m, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
