package memimage

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
)

const repo = "envd/projects/p1"

// startStore runs an embedded registry for the test and returns a Store on
// it with a node's credential, and the registry client.
func startStore(t testing.TB, opts ...Option) (*Store, *registry.Client) {
	t.Helper()
	s, c, _ := startStoreServer(t, opts...)
	return s, c
}

// startStoreServer is startStore that also returns the registry, whose
// client deletes with the GC's credential.
func startStoreServer(t testing.TB, opts ...Option) (*Store, *registry.Client, *registry.Server) {
	t.Helper()
	srv, err := registry.Serve(context.Background(), t.TempDir(), "127.0.0.1:0", registry.WithLogWriter(io.Discard))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		assert.NoError(t, srv.Close(ctx))
	})
	c, err := registry.NewClient(srv.Addr(), registry.WithCredential(srv.Access().Node), registry.WithDeleteCredential(srv.Access().GC))
	require.NoError(t, err)
	s, err := New(c, opts...)
	require.NoError(t, err)
	return s, c, srv
}

// version pushes a one-file rootfs image into repo: the version a memory
// image belongs to.
func version(t testing.TB, c *registry.Client) registry.Image {
	t.Helper()
	root := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(root, "hello"), []byte("hi\n"), 0o644))
	img, err := c.ImportRootfs(context.Background(), root, repo, "")
	require.NoError(t, err)
	return img
}

// imageDir writes an image directory like runsc's: a small kernel state, a
// pages file of pagesMiB MiB of random bytes with every fourth MiB zero
// (and a size that is not a multiple of the chunk size), and a tiny
// metadata file.
func imageDir(t testing.TB, pagesMiB int) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name string, b []byte, mode os.FileMode) {
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), b, mode))
		require.NoError(t, os.Chmod(filepath.Join(dir, name), mode))
	}
	write("checkpoint.img", randomBytes(170_001), 0o600)
	pages := randomBytes(pagesMiB<<20 + 3*4096)
	for off := 0; off+1<<20 <= len(pages); off += 4 << 20 {
		clear(pages[off : off+1<<20])
	}
	write("pages.img", pages, 0o640)
	write("pages_meta.img", randomBytes(1984), 0o600)
	return dir
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// sameFiles asserts that dirs a and b hold the same files, bytes and modes.
func sameFiles(t *testing.T, a, b string) {
	t.Helper()
	ea, err := os.ReadDir(a)
	require.NoError(t, err)
	eb, err := os.ReadDir(b)
	require.NoError(t, err)
	require.Equal(t, len(ea), len(eb), "files in %s and %s", a, b)
	for i := range ea {
		require.Equal(t, ea[i].Name(), eb[i].Name())
		ba, err := os.ReadFile(filepath.Join(a, ea[i].Name()))
		require.NoError(t, err)
		bb, err := os.ReadFile(filepath.Join(b, eb[i].Name()))
		require.NoError(t, err)
		assert.True(t, bytes.Equal(ba, bb), "file %s differs", ea[i].Name())
		ia, _ := ea[i].Info()
		ib, _ := eb[i].Info()
		assert.Equal(t, ia.Mode(), ib.Mode(), "mode of %s", ea[i].Name())
	}
}

func TestPushPullRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, c := startStore(t)
	v := version(t, c)
	src := imageDir(t, 8)

	res, err := s.Push(ctx, PushRequest{Dir: src, Repo: repo, Subject: v.Digest,
		Annotations: map[string]string{"dev.envd.memory.engine": "runsc test"}})
	require.NoError(t, err)
	a := res.Artifact

	got, err := s.Get(ctx, repo, a.Digest)
	require.NoError(t, err)
	assert.Equal(t, v.Digest, got.Subject, "the artifact refers to its version")
	assert.Equal(t, "runsc test", got.Annotations["dev.envd.memory.engine"])
	assert.Equal(t, a.Index, got.Index)
	assert.Equal(t, a.Blobs, got.Blobs)

	// What another registry client sees: an OCI 1.1 artifact of ours.
	desc, err := remote.Get(mustRef(t, c, a), remoteOpts(t, s)...)
	require.NoError(t, err)
	var m v1.Manifest
	require.NoError(t, json.Unmarshal(desc.Manifest, &m))
	assert.Equal(t, ArtifactType, m.ArtifactType)
	assert.Equal(t, types.MediaType(IndexMediaType), m.Config.MediaType)
	require.NotNil(t, m.Subject)
	assert.Equal(t, v.Digest, m.Subject.Digest.String())
	for _, l := range m.Layers {
		assert.Equal(t, types.MediaType(ChunkMediaType), l.MediaType)
	}

	dst := filepath.Join(t.TempDir(), "restore")
	require.NoError(t, s.Pull(ctx, got, dst))
	sameFiles(t, src, dst)

	// The zero MiBs of pages.img are holes: stored as nothing.
	u := got.Usage()
	assert.Equal(t, int64(2<<20), u.Zero, "8 MiB with every fourth MiB zero")
	assert.Less(t, u.Stored, u.Logical-u.Zero+64<<10, "holes cost nothing")
	assert.Greater(t, u.Stored, u.Logical-u.Zero, "the rest is stored")
	assert.Equal(t, res.Uploaded, u.Stored, "a first push uploads everything it stores")
}

func mustRef(t *testing.T, c *registry.Client, a Artifact) name.Digest {
	t.Helper()
	r, _, _, err := c.Remote(context.Background(), a.Repo)
	require.NoError(t, err)
	return r.Digest(a.Digest)
}

func remoteOpts(t *testing.T, s *Store) []remote.Option {
	t.Helper()
	_, opts, _, err := s.c.Remote(context.Background(), repo)
	require.NoError(t, err)
	return opts
}

// A second checkpoint after a change of 10% of the memory stores only the
// chunks that changed: what issue 25 asks (at most 25% of the first).
func TestSecondPushStoresOnlyChangedChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := startStore(t)
	src := imageDir(t, 16)

	first, err := s.Push(ctx, PushRequest{Dir: src, Repo: repo})
	require.NoError(t, err)

	// Change 10% of pages.img: a program rewriting a tenth of its heap.
	// (Scattered small writes cost more: a chunk is stored again when any of
	// its pages changed; docs/notes/running-state.md, "Chunk size".)
	pagesPath := filepath.Join(src, "pages.img")
	pages, err := os.ReadFile(pagesPath)
	require.NoError(t, err)
	start := len(pages) / 3
	_, _ = rand.Read(pages[start : start+len(pages)/10])
	require.NoError(t, os.WriteFile(pagesPath, pages, 0o640))
	// The kernel state changes whole between two checkpoints.
	require.NoError(t, os.WriteFile(filepath.Join(src, "checkpoint.img"), randomBytes(170_001), 0o600))

	second, err := s.Push(ctx, PushRequest{Dir: src, Repo: repo})
	require.NoError(t, err)
	ratio := float64(second.Uploaded) / float64(first.Uploaded)
	t.Logf("first push %d bytes (%d blobs), second %d bytes (%d blobs): %.1f%%",
		first.Uploaded, first.UploadedBlobs, second.Uploaded, second.UploadedBlobs, 100*ratio)
	assert.LessOrEqual(t, ratio, 0.25)
	assert.Equal(t, second.Uploaded, NewBytes(second.Artifact, first.Artifact.Blobs),
		"the bytes new to the registry are the blobs the first artifact does not hold, and the manifest")

	// Both still pull whole: the second shares the first's unchanged chunks.
	dst := filepath.Join(t.TempDir(), "second")
	require.NoError(t, s.Pull(ctx, second.Artifact, dst))
	sameFiles(t, src, dst)

	// A third push of the same directory uploads no blob.
	third, err := s.Push(ctx, PushRequest{Dir: src, Repo: repo,
		Annotations: map[string]string{"org.opencontainers.image.created": "2026-12-02T00:00:00Z"}})
	require.NoError(t, err)
	assert.Equal(t, 0, third.UploadedBlobs)
	assert.Equal(t, third.Artifact.ManifestSize, third.Uploaded, "only the manifest is new")
}

// An image of zeros (a process that allocated and never touched its
// memory) costs its index and manifest only.
func TestZeroPagesCostNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := startStore(t)
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "pages.img"))
	require.NoError(t, err)
	require.NoError(t, f.Truncate(64<<20))
	require.NoError(t, f.Close())

	res, err := s.Push(ctx, PushRequest{Dir: dir, Repo: repo})
	require.NoError(t, err)
	u := res.Artifact.Usage()
	assert.Equal(t, int64(64<<20), u.Zero)
	assert.Less(t, u.Stored, int64(64<<10), "64 MiB of zeros stored in %d bytes", u.Stored)
	assert.Equal(t, 1, res.UploadedBlobs, "the index only")

	dst := filepath.Join(t.TempDir(), "zeros")
	require.NoError(t, s.Pull(ctx, res.Artifact, dst))
	sameFiles(t, dir, dst)
}

func TestLazyReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := startStore(t, WithCacheChunks(2))
	src := imageDir(t, 4)
	res, err := s.Push(ctx, PushRequest{Dir: src, Repo: repo})
	require.NoError(t, err)
	want, err := os.ReadFile(filepath.Join(src, "pages.img"))
	require.NoError(t, err)

	rd, err := s.Open(ctx, res.Artifact, "pages.img")
	require.NoError(t, err)
	assert.Equal(t, int64(len(want)), rd.Size())

	// The first MiB is a hole: it reads as zeros without a request.
	p := make([]byte, 8192)
	n, err := rd.ReadAt(p, 4096)
	require.NoError(t, err)
	assert.Equal(t, len(p), n)
	assert.Equal(t, want[4096:4096+8192], p)
	assert.Equal(t, int64(0), rd.Fetches(), "a hole is not fetched")

	// Reads across chunk boundaries, and one page read twice: one fetch.
	for _, c := range []struct {
		name    string
		off, n  int64
		fetches int64
	}{
		{"one page", 2<<20 + 4096, 4096, 1},
		{"same page again", 2<<20 + 4096, 4096, 0},
		{"across two chunks, the first cached", 2<<20 + DefaultChunkSize - 100, 200, 1},
		{"hole to data", 1<<20 - 10, 20, 1},
		{"the tail past a chunk size", int64(len(want)) - 5000, 5000, 1},
	} {
		before := rd.Fetches()
		p := make([]byte, c.n)
		n, err := rd.ReadAt(p, c.off)
		require.NoError(t, err, c.name)
		assert.Equal(t, int(c.n), n, c.name)
		assert.Equal(t, want[c.off:c.off+c.n], p, c.name)
		assert.Equal(t, c.fetches, rd.Fetches()-before, c.name)
	}

	// Past the end: io.EOF with what there was.
	p = make([]byte, 100)
	n, err = rd.ReadAt(p, int64(len(want))-10)
	assert.ErrorIs(t, err, io.EOF)
	assert.Equal(t, 10, n)
	assert.Equal(t, want[len(want)-10:], p[:10])

	// The whole file through io.SectionReader, as a FUSE file would read it.
	got, err := io.ReadAll(io.NewSectionReader(rd, 0, rd.Size()))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got))
}

func TestErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, c := startStore(t)
	v := version(t, c)
	src := imageDir(t, 1)
	res, err := s.Push(ctx, PushRequest{Dir: src, Repo: repo})
	require.NoError(t, err)

	withSubdir := imageDir(t, 1)
	require.NoError(t, os.Mkdir(filepath.Join(withSubdir, "sub"), 0o755))
	withLink := imageDir(t, 1)
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(withLink, "link")))
	existing := t.TempDir()

	for _, c := range []struct {
		name string
		err  error
		kind error
	}{
		{"missing directory", push(s, PushRequest{Dir: filepath.Join(src, "nope"), Repo: repo}), errdefs.ErrInvalidArgument},
		{"empty directory", push(s, PushRequest{Dir: t.TempDir(), Repo: repo}), errdefs.ErrInvalidArgument},
		{"a subdirectory", push(s, PushRequest{Dir: withSubdir, Repo: repo}), errdefs.ErrInvalidArgument},
		{"a symlink", push(s, PushRequest{Dir: withLink, Repo: repo}), errdefs.ErrInvalidArgument},
		{"bad repository", push(s, PushRequest{Dir: src, Repo: "Bad Repo"}), errdefs.ErrInvalidArgument},
		{"bad subject", push(s, PushRequest{Dir: src, Repo: repo, Subject: "sha256:nothex"}), errdefs.ErrInvalidArgument},
		{"subject in another repository", push(s, PushRequest{Dir: src, Repo: "envd/projects/p2", Subject: v.Digest}), errdefs.ErrNotFound},
		{"pull into an existing directory", s.Pull(ctx, res.Artifact, existing), errdefs.ErrAlreadyExists},
		{"get a missing artifact", get(s, repo, "sha256:"+string(bytes.Repeat([]byte("0"), 64))), errdefs.ErrNotFound},
		{"get a rootfs image", get(s, repo, v.Digest), errdefs.ErrInvalidArgument},
		{"open an unknown file", open(s, res.Artifact, "nope.img"), errdefs.ErrNotFound},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.ErrorIs(t, c.err, c.kind)
		})
	}
	entries, err := os.ReadDir(existing)
	require.NoError(t, err)
	assert.Empty(t, entries, "a refused pull writes nothing")

	// An image of more distinct chunks than a manifest holds is refused
	// before any upload.
	small, _ := startStore(t)
	small.o.maxChunks = 2
	_, err = small.Push(ctx, PushRequest{Dir: src, Repo: repo})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	assert.ErrorContains(t, err, "more than a manifest holds (2)")

	_, err = New(c, WithChunkSize(1000))
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	_, err = New(nil)
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}

func push(s *Store, req PushRequest) error {
	_, err := s.Push(context.Background(), req)
	return err
}

func get(s *Store, repo, digest string) error {
	_, err := s.Get(context.Background(), repo, digest)
	return err
}

func open(s *Store, a Artifact, name string) error {
	_, err := s.Open(context.Background(), a, name)
	return err
}

// An artifact whose index names a file outside the pull's directory, or
// chunks the manifest does not hold, is refused before anything is written.
func TestHostileIndexRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := startStore(t)
	res, err := s.Push(ctx, PushRequest{Dir: imageDir(t, 1), Repo: repo})
	require.NoError(t, err)
	good := res.Artifact
	chunk := good.Blobs[1]

	for _, c := range []struct {
		name string
		ix   Index
	}{
		{"a path out of the directory", Index{ChunkSize: 4096, Files: []IndexFile{{Name: "../evil", Size: 1, Chunks: []string{""}}}}},
		{"a path into a subdirectory", Index{ChunkSize: 4096, Files: []IndexFile{{Name: "a/b", Size: 1, Chunks: []string{""}}}}},
		{"two files of one name", Index{ChunkSize: 4096, Files: []IndexFile{{Name: "a", Chunks: []string{}}, {Name: "a", Chunks: []string{}}}}},
		{"a chunk not in the manifest", Index{ChunkSize: 4096, Files: []IndexFile{{Name: "a", Size: 4096, Chunks: []string{"sha256:" + string(bytes.Repeat([]byte("1"), 64))}}}}},
		{"a chunk of another length", Index{ChunkSize: chunk.Size * 2, Files: []IndexFile{{Name: "a", Size: chunk.Size * 2, Chunks: []string{chunk.Digest}}}}},
		{"too few chunks for the size", Index{ChunkSize: 4096, Files: []IndexFile{{Name: "a", Size: 1 << 40, Chunks: []string{""}}}}},
		{"no chunk size", Index{Files: []IndexFile{{Name: "a", Size: 0, Chunks: []string{}}}}},
		{"a chunk size past the bound", Index{ChunkSize: 1 << 40, Files: []IndexFile{{Name: "a", Size: 1 << 40, Chunks: []string{""}}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			digest := pushRaw(t, s, c.ix, []Blob{chunk})
			_, err := s.Get(ctx, repo, digest)
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			// A caller holding a forged Artifact is refused by Pull too.
			forged := good
			forged.Digest, forged.Index = digest, c.ix
			dst := filepath.Join(t.TempDir(), "out")
			assert.ErrorIs(t, s.Pull(ctx, forged, dst), errdefs.ErrInvalidArgument)
			assert.NoFileExists(t, filepath.Join(filepath.Dir(dst), "evil"))
			assert.NoDirExists(t, dst)
		})
	}
}

// pushRaw stores a memory image manifest with the given index and chunk
// blobs (already in repo), as a hostile or broken client could.
func pushRaw(t *testing.T, s *Store, ix Index, chunks []Blob) string {
	t.Helper()
	ctx := context.Background()
	r, opts, hc, err := s.c.Remote(ctx, repo)
	require.NoError(t, err)
	raw, err := json.Marshal(ix)
	require.NoError(t, err)
	l := static.NewLayer(raw, IndexMediaType)
	pusher, err := remote.NewPusher(opts...)
	require.NoError(t, err)
	_, err = s.upload(ctx, pusher, r, hc, l)
	require.NoError(t, err)
	d, _ := l.Digest()
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: ArtifactType,
		Config: v1.Descriptor{MediaType: IndexMediaType, Size: int64(len(raw)), Digest: d}, Layers: []v1.Descriptor{}}
	for _, b := range chunks {
		h, err := v1.NewHash(b.Digest)
		require.NoError(t, err)
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: ChunkMediaType, Size: b.Size, Digest: h})
	}
	rawM, err := json.Marshal(m)
	require.NoError(t, err)
	h, _, err := v1.SHA256(bytes.NewReader(rawM))
	require.NoError(t, err)
	require.NoError(t, remote.Put(r.Digest(h.String()), rawManifest(rawM), opts...))
	return h.String()
}

// A checkpoint pushed into another repository (a fork into another
// project) mounts the chunks its previous image holds instead of sending
// them again.
func TestPushMountsFromPreviousRepository(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := startStore(t)
	src := imageDir(t, 4)
	first, err := s.Push(ctx, PushRequest{Dir: src, Repo: repo})
	require.NoError(t, err)

	res, err := s.Push(ctx, PushRequest{Dir: src, Repo: "envd/projects/p2", Previous: &first.Artifact})
	require.NoError(t, err)
	assert.Equal(t, 0, res.UploadedBlobs, "no blob sent")
	assert.Equal(t, res.Artifact.ManifestSize, res.Uploaded, "only the manifest is new")
	assert.Equal(t, first.Artifact.Usage().Stored-first.Artifact.ManifestSize, res.Mounted)
	dst := filepath.Join(t.TempDir(), "p2")
	require.NoError(t, s.Pull(ctx, res.Artifact, dst), "the mounted blobs are readable in the new repository")
	sameFiles(t, src, dst)

	// Without a previous image, the other repository gets every blob.
	res, err = s.Push(ctx, PushRequest{Dir: src, Repo: "envd/projects/p3"})
	require.NoError(t, err)
	assert.Equal(t, int64(0), res.Mounted)
	assert.Equal(t, first.Uploaded, res.Uploaded)
}

// The registry's garbage collection keeps every chunk of a stored memory
// image (its manifest references them all) and a chunk two images share
// until neither is left; once both manifests are deleted, a sweep frees
// their bytes.
func TestGarbageCollectKeepsAndFreesChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, c, srv := startStoreServer(t)
	src := imageDir(t, 4)
	first, err := s.Push(ctx, PushRequest{Dir: src, Repo: repo})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(src, "checkpoint.img"), randomBytes(170_001), 0o600))
	second, err := s.Push(ctx, PushRequest{Dir: src, Repo: repo})
	require.NoError(t, err)

	st, err := srv.GarbageCollect(ctx, registry.GCOptions{})
	require.NoError(t, err)
	assert.Equal(t, st.BytesBefore, st.BytesAfter, "a sweep with both images stored frees nothing")

	require.NoError(t, c.DeleteManifest(ctx, registry.Image{Repo: repo, Digest: first.Artifact.Digest}))
	st, err = srv.GarbageCollect(ctx, registry.GCOptions{})
	require.NoError(t, err)
	freed := st.BytesBefore - st.BytesAfter
	assert.Equal(t, NewBytes(first.Artifact, second.Artifact.Blobs), freed,
		"the first image's own blobs and manifest go; the chunks it shares with the second stay")
	dst := filepath.Join(t.TempDir(), "second")
	require.NoError(t, s.Pull(ctx, second.Artifact, dst))
	sameFiles(t, src, dst)

	require.NoError(t, c.DeleteManifest(ctx, registry.Image{Repo: repo, Digest: second.Artifact.Digest}))
	st, err = srv.GarbageCollect(ctx, registry.GCOptions{})
	require.NoError(t, err)
	assert.Equal(t, second.Artifact.Usage().Stored, st.BytesBefore-st.BytesAfter)
	assert.Equal(t, 0, st.BlobsAfter)
}

// A manifest whose index claims to be huge is refused before the index is
// fetched (nothing is allocated for it).
func TestHugeIndexRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := startStore(t)
	res, err := s.Push(ctx, PushRequest{Dir: imageDir(t, 1), Repo: repo})
	require.NoError(t, err)
	r, opts, _, err := s.c.Remote(ctx, repo)
	require.NoError(t, err)
	h, err := v1.NewHash(res.Artifact.Blobs[0].Digest)
	require.NoError(t, err)
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: ArtifactType,
		Config: v1.Descriptor{MediaType: IndexMediaType, Size: 1 << 40, Digest: h}, Layers: []v1.Descriptor{}}
	rawM, err := json.Marshal(m)
	require.NoError(t, err)
	d, _, err := v1.SHA256(bytes.NewReader(rawM))
	require.NoError(t, err)
	require.NoError(t, remote.Put(r.Digest(d.String()), rawManifest(rawM), opts...))

	_, err = s.Get(ctx, repo, d.String())
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	assert.ErrorContains(t, err, "index of 1099511627776 bytes")
}
