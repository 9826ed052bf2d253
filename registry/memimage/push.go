package memimage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
)

// PushRequest says what to push where.
type PushRequest struct {
	Dir  string // the image directory: regular files only
	Repo string // the repository, e.g. the project's "envd/projects/p1"
	// Subject is the manifest digest of the version the memory belongs to,
	// which must be in Repo; "" pushes an artifact without a subject.
	Subject string
	// Annotations go on the manifest (for example the engine and its
	// version: runsc restores only images of its own build).
	Annotations map[string]string
	// Previous, when set, is the memory image this one follows (the
	// instance's previous checkpoint), in Repo or another repository of the
	// same registry: chunks Repo lacks that Previous holds are mounted from
	// its repository instead of uploaded.
	Previous *Artifact
}

// PushResult is a pushed artifact and what the push cost.
type PushResult struct {
	Artifact Artifact
	// Uploaded is the bytes of blobs the registry did not have in Repo
	// before this push (the manifest included): what it added to the
	// repository. Chunks unchanged since an earlier push are not in it.
	Uploaded int64
	// UploadedBlobs counts those blobs.
	UploadedBlobs int
	// Mounted is the bytes of chunks linked into Repo from
	// PushRequest.Previous's repository rather than sent.
	Mounted int64
}

// chunkRef is one chunk of one file of the image directory.
type chunkRef struct {
	file   int // index in the index's Files (and in files)
	i      int // extent number in that file
	off, n int64
}

// Push stores the image directory req.Dir as an artifact in req.Repo: it
// cuts every file into content-defined chunks and holes (chunk.go), hashes
// every chunk, uploads the chunks and the index the repository does not
// hold yet, puts the manifest by digest and verifies that the manifest and
// every blob are there. It returns only a verified artifact.
//
// A directory that is missing, empty, or holds anything but regular files
// is errdefs.ErrInvalidArgument, as is an image of more than 20,000 chunks
// even at the largest average chunk size; a Subject not in Repo is
// errdefs.ErrNotFound. Registry failures carry the kinds of
// registry.Translate.
func (s *Store) Push(ctx context.Context, req PushRequest) (PushResult, error) {
	r, opts, hc, err := s.remote(ctx, req.Repo)
	if err != nil {
		return PushResult{}, err
	}
	what := fmt.Sprintf("push memory image %s to %q", req.Dir, req.Repo)

	var subject *v1.Descriptor
	if req.Subject != "" {
		if _, err := v1.NewHash(req.Subject); err != nil {
			return PushResult{}, fmt.Errorf("%s: subject %q: %w: %w", what, req.Subject, errdefs.ErrInvalidArgument, err)
		}
		d, err := remote.Head(r.Digest(req.Subject), opts...)
		if err != nil {
			return PushResult{}, registry.Translate(err, fmt.Sprintf("%s: subject manifest %s", what, req.Subject))
		}
		subject = &v1.Descriptor{MediaType: d.MediaType, Size: d.Size, Digest: d.Digest}
	}

	files, ix, err := s.readDir(req.Dir)
	if err != nil {
		return PushResult{}, fmt.Errorf("%s: %w", what, err)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()

	// 1. Cut: each page's hash, then the extents (holes and chunks).
	names, sizes := make([]string, len(ix.Files)), make([]int64, len(ix.Files))
	for fi, f := range ix.Files {
		names[fi], sizes[fi] = f.Name, f.Size
	}
	pages, err := s.scanPages(ctx, files, names, sizes)
	if err != nil {
		return PushResult{}, fmt.Errorf("%s: %w", what, err)
	}
	params, exts, err := s.cutFiles(pages, sizes)
	if err != nil {
		return PushResult{}, fmt.Errorf("%s: %w", what, err)
	}
	ix.Chunking = &params
	var chunks []chunkRef
	for fi := range ix.Files {
		f := &ix.Files[fi]
		f.Chunks, f.Lengths = make([]string, len(exts[fi])), make([]int64, len(exts[fi]))
		for i, e := range exts[fi] {
			f.Lengths[i] = e.n
			if !e.hole {
				chunks = append(chunks, chunkRef{file: fi, i: i, off: e.off, n: e.n})
			}
		}
	}

	// 2. Hash: every chunk's digest.
	if err := s.hashChunks(ctx, files, ix, chunks); err != nil {
		return PushResult{}, fmt.Errorf("%s: %w", what, err)
	}

	// The distinct chunks in order of first use: the manifest's layers.
	var layers []v1.Descriptor
	first := map[string]chunkRef{}
	for _, c := range chunks {
		d := ix.Files[c.file].Chunks[c.i]
		if _, ok := first[d]; ok || d == "" {
			continue
		}
		first[d] = c
		h, _ := v1.NewHash(d)
		layers = append(layers, v1.Descriptor{MediaType: ChunkMediaType, Size: c.n, Digest: h})
	}

	// 3. Chunk blobs the repository does not hold, mounted from the
	// previous image's repository where it has them. One Pusher: it
	// authenticates once per repository, not once per blob.
	pusher, err := remote.NewPusher(opts...)
	if err != nil {
		return PushResult{}, fmt.Errorf("%s: %w", what, err)
	}
	mountable := map[string]name.Digest{}
	if p := req.Previous; p != nil && p.Repo != req.Repo {
		pr, err := name.NewRepository(r.RegistryStr()+"/"+p.Repo, name.Insecure, name.StrictValidation)
		if err != nil {
			return PushResult{}, fmt.Errorf("%s: previous image's repository %q: %w: %w", what, p.Repo, errdefs.ErrInvalidArgument, err)
		}
		for _, b := range p.Blobs {
			mountable[b.Digest] = pr.Digest(b.Digest)
		}
	}
	var uploaded, uploadedBlobs, mounted atomic.Int64
	send := func(ctx context.Context, l v1.Layer) error {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		from, mount := mountable[d.String()]
		if mount {
			l = &remote.MountableLayer{Layer: l, Reference: from}
		}
		n, err := s.upload(ctx, pusher, r, hc, l)
		switch {
		case n > 0 && mount:
			mounted.Add(n)
		case n > 0:
			uploaded.Add(n)
			uploadedBlobs.Add(1)
		}
		return err
	}
	err = s.each(ctx, len(layers), func(ctx context.Context, k int) error {
		l := layers[k]
		c := first[l.Digest.String()]
		return send(ctx, &chunkLayer{f: files[c.file], off: c.off, size: c.n, digest: l.Digest})
	})
	if err != nil {
		return PushResult{}, fmt.Errorf("%s: %w", what, err)
	}

	// 4. The index, then the manifest.
	rawIndex, err := json.Marshal(ix)
	if err != nil {
		return PushResult{}, fmt.Errorf("%s: index: %w", what, err)
	}
	indexLayer := static.NewLayer(rawIndex, IndexMediaType)
	indexDigest, _ := indexLayer.Digest()
	if err := send(ctx, indexLayer); err != nil {
		return PushResult{}, fmt.Errorf("%s: index: %w", what, err)
	}
	ann := maps.Clone(req.Annotations)
	if ann == nil {
		ann = map[string]string{}
	}
	if _, ok := ann["org.opencontainers.image.created"]; !ok {
		ann["org.opencontainers.image.created"] = time.Now().UTC().Format(time.RFC3339)
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  ArtifactType,
		Config:        v1.Descriptor{MediaType: IndexMediaType, Size: int64(len(rawIndex)), Digest: indexDigest},
		Layers:        layers,
		Subject:       subject,
		Annotations:   ann,
	}
	if m.Layers == nil {
		m.Layers = []v1.Descriptor{} // "layers" is required, even empty
	}
	rawM, err := json.Marshal(m)
	if err != nil {
		return PushResult{}, fmt.Errorf("%s: manifest: %w", what, err)
	}
	sum := sha256.Sum256(rawM)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if err := pusher.Put(ctx, r.Digest(digest), rawManifest(rawM)); err != nil {
		return PushResult{}, registry.Translate(err, fmt.Sprintf("%s: manifest %s", what, digest))
	}
	uploaded.Add(int64(len(rawM)))

	// 5. Verify: the manifest and every blob are there.
	if err := s.c.Verify(ctx, registry.Image{Repo: req.Repo, Digest: digest}); err != nil {
		return PushResult{}, fmt.Errorf("%s: verify: %w", what, err)
	}

	a := Artifact{
		Repo: req.Repo, Digest: digest, Subject: req.Subject, Annotations: ann, Index: *ix,
		Blobs:        []Blob{{Digest: indexDigest.String(), Size: int64(len(rawIndex))}},
		ManifestSize: int64(len(rawM)),
	}
	for _, l := range layers {
		a.Blobs = append(a.Blobs, Blob{Digest: l.Digest.String(), Size: l.Size})
	}
	return PushResult{Artifact: a, Uploaded: uploaded.Load(), UploadedBlobs: int(uploadedBlobs.Load()), Mounted: mounted.Load()}, nil
}

// readDir opens the image directory's files (sorted by name) and makes an
// index of their names, sizes and modes, without extents.
func (s *Store) readDir(dir string) ([]*os.File, *Index, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil, fmt.Errorf("image directory: %w: %w", errdefs.ErrInvalidArgument, err)
		}
		return nil, nil, err
	}
	if len(entries) == 0 {
		return nil, nil, fmt.Errorf("image directory %s is empty: %w", dir, errdefs.ErrInvalidArgument)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	ix := &Index{}
	var files []*os.File
	for _, e := range entries {
		if !e.Type().IsRegular() {
			for _, f := range files {
				f.Close()
			}
			return nil, nil, fmt.Errorf("image directory entry %q is a %s, not a regular file: %w", e.Name(), e.Type(), errdefs.ErrInvalidArgument)
		}
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err == nil {
			var fi os.FileInfo
			if fi, err = f.Stat(); err == nil {
				files = append(files, f)
				ix.Files = append(ix.Files, IndexFile{
					Name: e.Name(), Size: fi.Size(), Mode: uint32(fi.Mode().Perm()),
				})
				continue
			}
			f.Close()
		}
		for _, f := range files {
			f.Close()
		}
		return nil, nil, err
	}
	return files, ix, nil
}

// hashChunks fills ix's digests of chunks on the Store's jobs goroutines.
func (s *Store) hashChunks(ctx context.Context, files []*os.File, ix *Index, chunks []chunkRef) error {
	var next atomic.Int64
	return s.eachWorker(ctx, func(ctx context.Context) error {
		buf := make([]byte, ix.Chunking.Max)
		for {
			k := int(next.Add(1) - 1)
			if k >= len(chunks) {
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			c := chunks[k]
			p := buf[:c.n]
			if _, err := files[c.file].ReadAt(p, c.off); err != nil {
				return fmt.Errorf("read %s at %d: %w", ix.Files[c.file].Name, c.off, err)
			}
			sum := sha256.Sum256(p)
			ix.Files[c.file].Chunks[c.i] = "sha256:" + hex.EncodeToString(sum[:])
		}
	})
}

// isZero says whether p holds only zero bytes.
func isZero(p []byte) bool {
	for len(p) >= 8 {
		if p[0]|p[1]|p[2]|p[3]|p[4]|p[5]|p[6]|p[7] != 0 {
			return false
		}
		p = p[8:]
	}
	for _, b := range p {
		if b != 0 {
			return false
		}
	}
	return true
}

// upload puts l in r unless r already holds it (a HEAD), and returns the
// bytes it uploaded or mounted (0 when the blob was there).
func (s *Store) upload(ctx context.Context, p *remote.Pusher, r name.Repository, hc *http.Client, l v1.Layer) (int64, error) {
	d, err := l.Digest()
	if err != nil {
		return 0, err
	}
	size, err := l.Size()
	if err != nil {
		return 0, err
	}
	ok, err := hasBlob(ctx, hc, r, d.String(), size)
	if err != nil || ok {
		return 0, err
	}
	if _, mount := l.(*remote.MountableLayer); mount {
		// go-containerregistry asks for the mount with the other
		// repository's pull scope, and uploads if the registry declines.
		if err := p.Upload(ctx, r, l); err != nil {
			return 0, registry.Translate(err, fmt.Sprintf("mount blob %s into %q", d, r.RepositoryStr()))
		}
		return size, nil
	}
	if err := putBlob(ctx, hc, r, d.String(), size, l); err != nil {
		return 0, err
	}
	return size, nil
}

// putBlob uploads l as blob digest in one PUT: a POST opens the upload,
// the PUT sends the bytes and commits them (the registry checks the
// digest). go-containerregistry's upload takes four requests (HEAD, POST,
// PATCH, PUT) where this takes two, and a push is mostly its per-blob
// requests (docs/notes/running-state.md, "Chunks").
func putBlob(ctx context.Context, hc *http.Client, r name.Repository, digest string, size int64, l v1.Layer) error {
	what := fmt.Sprintf("upload blob %s to %q", digest, r.RepositoryStr())
	start := fmt.Sprintf("%s://%s/v2/%s/blobs/uploads/", r.Scheme(), r.RegistryStr(), r.RepositoryStr())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, start, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return registry.Translate(err, what)
	}
	resp.Body.Close()
	if err := transport.CheckError(resp, http.StatusAccepted); err != nil {
		return registry.Translate(err, what)
	}
	loc, err := req.URL.Parse(resp.Header.Get("Location"))
	if err != nil || resp.Header.Get("Location") == "" {
		return fmt.Errorf("%s: upload location %q: %w", what, resp.Header.Get("Location"), err)
	}
	q := loc.Query()
	q.Set("digest", digest)
	loc.RawQuery = q.Encode()
	body, err := l.Compressed()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer body.Close()
	req, err = http.NewRequestWithContext(ctx, http.MethodPut, loc.String(), body)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err = hc.Do(req)
	if err != nil {
		return registry.Translate(err, what)
	}
	resp.Body.Close()
	return registry.Translate(transport.CheckError(resp, http.StatusCreated), what)
}

// hasBlob says whether r holds blob digest with size bytes.
func hasBlob(ctx context.Context, hc *http.Client, r name.Repository, digest string, size int64) (bool, error) {
	what := fmt.Sprintf("blob %s in %q", digest, r.RepositoryStr())
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, blobURL(r, digest), nil)
	if err != nil {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, registry.Translate(err, what)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return false, nil
	}
	if err := transport.CheckError(resp, http.StatusOK); err != nil {
		return false, registry.Translate(err, what)
	}
	// A blob of another size under the same digest cannot be; treat a
	// registry saying so as not holding it, and let the upload fail loudly.
	return resp.ContentLength < 0 || resp.ContentLength == size, nil
}

// each runs fn(ctx, k) for k in [0, n) on the Store's jobs goroutines and
// returns the first error (the others are canceled).
func (s *Store) each(ctx context.Context, n int, fn func(ctx context.Context, k int) error) error {
	var next atomic.Int64
	return s.eachWorker(ctx, func(ctx context.Context) error {
		for {
			k := int(next.Add(1) - 1)
			if k >= n {
				return nil
			}
			if err := fn(ctx, k); err != nil {
				return err
			}
		}
	})
}

// eachWorker runs worker on the Store's jobs goroutines until all return,
// canceling the others' context at the first error, which it returns.
func (s *Store) eachWorker(ctx context.Context, worker func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range s.o.jobs {
		wg.Go(func() {
			if err := worker(ctx); err != nil {
				once.Do(func() { first = err; cancel(err) })
			}
		})
	}
	wg.Wait()
	return first
}

// chunkLayer is one chunk of an image file as a blob to upload.
type chunkLayer struct {
	f         *os.File
	off, size int64
	digest    v1.Hash
}

func (l *chunkLayer) Digest() (v1.Hash, error)             { return l.digest, nil }
func (l *chunkLayer) DiffID() (v1.Hash, error)             { return l.digest, nil }
func (l *chunkLayer) Size() (int64, error)                 { return l.size, nil }
func (l *chunkLayer) MediaType() (types.MediaType, error)  { return ChunkMediaType, nil }
func (l *chunkLayer) Uncompressed() (io.ReadCloser, error) { return l.Compressed() }
func (l *chunkLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(io.NewSectionReader(l.f, l.off, l.size)), nil
}
