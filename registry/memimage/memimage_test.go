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

// A second checkpoint after pages were inserted and removed near the
// start and a contiguous tenth of the memory rewritten (runsc's pages.img
// after a program rewrote a tenth of its heap) stores only the chunks
// around the changes: what issue 25 asks (at most 25% of the first).
func TestSecondPushAfterAShiftStoresOnlyWhatChanged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := startStore(t)
	src := imageDir(t, 128)

	first, err := s.Push(ctx, PushRequest{Dir: src, Repo: repo})
	require.NoError(t, err)

	pagesPath := filepath.Join(src, "pages.img")
	pages, err := os.ReadFile(pagesPath)
	require.NoError(t, err)
	shifted := append([]byte{}, pages[:300*pageSize]...)
	shifted = append(shifted, randomBytes(4*pageSize)...) // 4 pages in
	shifted = append(shifted, pages[300*pageSize:9000*pageSize]...)
	shifted = append(shifted, pages[9002*pageSize:]...) // 2 pages out
	start := len(shifted) / 3
	_, _ = rand.Read(shifted[start : start+len(shifted)/10])
	require.NoError(t, os.WriteFile(pagesPath, shifted, 0o640))
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

// lazyDir is an image directory whose pages.img is a hole of 1 MiB, 6 MiB
// and 3 pages of seeded bytes (the same chunks in every run), a short tail.
func lazyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	pages := append(make([]byte, 1<<20), seededBytes(11, 6<<20+3*pageSize+100)...)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pages.img"), pages, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "checkpoint.img"), seededBytes(12, 170_001), 0o600))
	return dir
}

// The lazy Reader reads exactly the file's bytes, whatever extents a read
// spans, fetching each chunk once while cached (two here) and holes never:
// on the content-defined index Push writes and on a fixed-chunk (v1) one.
func TestLazyReader(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := startStore(t, WithCacheChunks(2))
	src := lazyDir(t)
	want, err := os.ReadFile(filepath.Join(src, "pages.img"))
	require.NoError(t, err)
	res, err := s.Push(ctx, PushRequest{Dir: src, Repo: repo})
	require.NoError(t, err)

	for _, a := range []struct {
		name string
		a    Artifact
	}{
		{"content-defined", res.Artifact},
		{"fixed (v1)", pushV1(t, s, src, 1<<20)},
	} {
		t.Run(a.name, func(t *testing.T) {
			rd, err := s.Open(ctx, a.a, "pages.img")
			require.NoError(t, err)
			assert.Equal(t, int64(len(want)), rd.Size())

			// Extents: 0 is the hole, then at least three chunks.
			f := &a.a.Index.Files[1]
			require.Equal(t, "pages.img", f.Name)
			offs := a.a.Index.offsets(f)
			require.GreaterOrEqual(t, len(f.Chunks), 6, "a hole and five chunks at least")
			require.Equal(t, "", f.Chunks[0])
			require.Equal(t, int64(1<<20), offs[1])
			t.Logf("extents at %v", offs)

			for _, c := range []struct {
				name    string
				off, n  int64
				fetches int64
			}{
				{"in the hole", 4096, 8192, 0},
				{"one page of the first chunk", offs[1] + 4096, 4096, 1},
				{"the same page again", offs[1] + 4096, 4096, 0},
				{"across the first and second chunks", offs[2] - 100, 200, 1},
				{"from the hole into the first chunk", offs[1] - 10, 20, 0},
				{"the second chunk's last byte to the third's first", offs[3] - 1, 2, 1},
				{"three chunks: the end of the second to the start of the fourth", offs[3] - 5, offs[4] - offs[3] + 10, 1},
				{"the tail", int64(len(want)) - 5000, 5000, 1},
				{"a byte at the last extent's start", offs[len(offs)-2], 1, 0},
				{"the first chunk again, evicted", offs[1], 1, 1},
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
			p := make([]byte, 100)
			n, err := rd.ReadAt(p, int64(len(want))-10)
			assert.ErrorIs(t, err, io.EOF)
			assert.Equal(t, 10, n)
			assert.Equal(t, want[len(want)-10:], p[:10])

			// The whole file through io.SectionReader, as a FUSE file would
			// read it, and in odd-sized pieces at every offset.
			got, err := io.ReadAll(io.NewSectionReader(rd, 0, rd.Size()))
			require.NoError(t, err)
			assert.True(t, bytes.Equal(want, got))
			for off := int64(0); off < rd.Size(); off += 777_777 {
				p := make([]byte, min(300_001, rd.Size()-off))
				_, err := rd.ReadAt(p, off)
				require.NoError(t, err)
				require.True(t, bytes.Equal(want[off:off+int64(len(p))], p), "at %d", off)
			}
		})
	}
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

// An artifact whose index names a file outside the pull's directory, does
// not tile its files with its extents, or names chunks the manifest does
// not hold, is refused before anything is written: content-defined (v2)
// and fixed (v1) indexes alike.
func TestHostileIndexRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _ := startStore(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a"), seededBytes(13, 8192), 0o600))
	res, err := s.Push(ctx, PushRequest{Dir: dir, Repo: repo})
	require.NoError(t, err)
	good := res.Artifact
	require.Len(t, good.Blobs, 2, "the index and one chunk")
	d := good.Blobs[1].Digest
	require.Equal(t, int64(8192), good.Blobs[1].Size)
	unknown := "sha256:" + string(bytes.Repeat([]byte("1"), 64))

	cd := &Chunking{Method: ChunkingMethod, Avg: 1 << 20, Min: 256 << 10, Max: 4 << 20, MinHole: 64 << 10}
	v2 := func(files ...IndexFile) Index { return Index{Chunking: cd, Files: files} }
	withMax := func(max int64, files ...IndexFile) Index {
		c := *cd
		c.Max = max
		return Index{Chunking: &c, Files: files}
	}
	type file = IndexFile
	for _, c := range []struct {
		name      string
		mediaType string
		ix        Index
		want      string
		getOnly   bool // the media type disagrees with the index: Get's check
	}{
		{"a path out of the directory", IndexMediaType, v2(file{Name: "../evil", Size: 1, Chunks: []string{""}, Lengths: []int64{1}}), "not a distinct plain name", false},
		{"a path into a subdirectory", IndexMediaType, v2(file{Name: "a/b", Size: 1, Chunks: []string{""}, Lengths: []int64{1}}), "not a distinct plain name", false},
		{"two files of one name", IndexMediaType, v2(file{Name: "a", Chunks: []string{}}, file{Name: "a", Chunks: []string{}}), "not a distinct plain name", false},
		{"a chunk not in the manifest", IndexMediaType, v2(file{Name: "a", Size: 8192, Chunks: []string{unknown}, Lengths: []int64{8192}}), "is not in the manifest", false},
		{"a chunk of another length", IndexMediaType, v2(file{Name: "a", Size: 4096, Chunks: []string{d}, Lengths: []int64{4096}}), "is not in the manifest with 4096 bytes", false},
		{"overlapping extents (a negative length)", IndexMediaType, v2(file{Name: "a", Size: 8192, Chunks: []string{"", d, ""}, Lengths: []int64{8192, -4096, 4096}}), "length -4096", false},
		{"an empty extent", IndexMediaType, v2(file{Name: "a", Size: 8192, Chunks: []string{"", d}, Lengths: []int64{0, 8192}}), "length 0", false},
		{"a gap: the lengths sum to less than the size", IndexMediaType, v2(file{Name: "a", Size: 16384, Chunks: []string{d}, Lengths: []int64{8192}}), "extents cover 8192 of 16384 bytes", false},
		{"past the end: the lengths sum to more than the size", IndexMediaType, v2(file{Name: "a", Size: 8192, Chunks: []string{d, ""}, Lengths: []int64{8192, 4096}}), "length 4096, 0 bytes left", false},
		{"lengths that would overflow", IndexMediaType, v2(file{Name: "a", Size: 1 << 62, Chunks: []string{"", "", ""}, Lengths: []int64{1 << 62, 1 << 62, -(1 << 62)}}), "length 4611686018427387904, 0 bytes left", false},
		{"fewer lengths than chunks", IndexMediaType, v2(file{Name: "a", Size: 8192, Chunks: []string{d}}), "0 lengths for 1 chunks", false},
		{"a chunk longer than the index's longest", IndexMediaType, withMax(4096, file{Name: "a", Size: 8192, Chunks: []string{d}, Lengths: []int64{8192}}), "longer than the index's longest chunk (4096)", false},
		{"a longest chunk past the bound", IndexMediaType, withMax(1<<40, file{Name: "a", Size: 8192, Chunks: []string{d}, Lengths: []int64{8192}}), "longest chunk 1099511627776", false},
		{"neither chunk size nor chunking", IndexMediaType, Index{Files: []IndexFile{{Name: "a", Chunks: []string{}}}}, "neither", false},
		{"both chunk size and chunking", IndexMediaType, Index{ChunkSize: 8192, Chunking: cd, Files: []IndexFile{{Name: "a", Size: 8192, Chunks: []string{d}}}}, "an index of type", false},
		{"a v2 media type on a fixed index", IndexMediaType, Index{ChunkSize: 8192, Files: []IndexFile{{Name: "a", Size: 8192, Chunks: []string{d}}}}, "an index of type application/vnd.envd.memory.index.v2+json with a chunk size of 8192", true},
		{"a v1 media type on a content-defined index", IndexV1MediaType, v2(file{Name: "a", Size: 8192, Chunks: []string{d}, Lengths: []int64{8192}}), "an index of type application/vnd.envd.memory.index.v1+json with a chunk size of 0", true},

		{"v1: a path out of the directory", IndexV1MediaType, Index{ChunkSize: 4096, Files: []IndexFile{{Name: "../evil", Size: 1, Chunks: []string{""}}}}, "not a distinct plain name", false},
		{"v1: a chunk not in the manifest", IndexV1MediaType, Index{ChunkSize: 8192, Files: []IndexFile{{Name: "a", Size: 8192, Chunks: []string{unknown}}}}, "is not in the manifest", false},
		{"v1: a chunk of another length", IndexV1MediaType, Index{ChunkSize: 16384, Files: []IndexFile{{Name: "a", Size: 16384, Chunks: []string{d}}}}, "is not in the manifest with 16384 bytes", false},
		{"v1: too few chunks for the size", IndexV1MediaType, Index{ChunkSize: 4096, Files: []IndexFile{{Name: "a", Size: 1 << 40, Chunks: []string{""}}}}, "1 chunks of 4096 bytes for 1099511627776 bytes", false},
		{"v1: a chunk size past the bound", IndexV1MediaType, Index{ChunkSize: 1 << 40, Files: []IndexFile{{Name: "a", Size: 1 << 40, Chunks: []string{""}}}}, "chunk size 1099511627776", false},
		{"v1: a chunk size not of pages", IndexV1MediaType, Index{ChunkSize: 1000, Files: []IndexFile{{Name: "a", Size: 1000, Chunks: []string{""}}}}, "chunk size 1000", false},
		{"v1: lengths in a fixed index", IndexV1MediaType, Index{ChunkSize: 8192, Files: []IndexFile{{Name: "a", Size: 8192, Chunks: []string{d}, Lengths: []int64{8192}}}}, "1 chunks of 8192 bytes for 8192 bytes", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			digest := pushRaw(t, s, c.mediaType, c.ix, good.Blobs[1:])
			_, err := s.Get(ctx, repo, digest)
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			assert.ErrorContains(t, err, c.want)
			if c.getOnly {
				return
			}
			// A caller holding a forged Artifact is refused by Pull and
			// Open too.
			forged := good
			forged.Digest, forged.Index = digest, c.ix
			dst := filepath.Join(t.TempDir(), "out")
			assert.ErrorIs(t, s.Pull(ctx, forged, dst), errdefs.ErrInvalidArgument)
			assert.NoFileExists(t, filepath.Join(filepath.Dir(dst), "evil"))
			assert.NoDirExists(t, dst)
			_, err = s.Open(ctx, forged, "a")
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		})
	}
}

// pushRaw stores a memory image manifest with the given index (of
// mediaType) and chunk blobs (already in repo), as a hostile or broken
// client could.
func pushRaw(t testing.TB, s *Store, mediaType string, ix any, chunks []Blob) string {
	t.Helper()
	ctx := context.Background()
	r, opts, hc, err := s.c.Remote(ctx, repo)
	require.NoError(t, err)
	raw, err := json.Marshal(ix)
	require.NoError(t, err)
	l := static.NewLayer(raw, types.MediaType(mediaType))
	pusher, err := remote.NewPusher(opts...)
	require.NoError(t, err)
	_, err = s.upload(ctx, pusher, r, hc, l)
	require.NoError(t, err)
	d, _ := l.Digest()
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: ArtifactType,
		Config: v1.Descriptor{MediaType: types.MediaType(mediaType), Size: int64(len(raw)), Digest: d}, Layers: []v1.Descriptor{}}
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

// The fixed-chunk index that pushes before content-defined chunks wrote
// (application/vnd.envd.memory.index.v1+json), field for field.
type v1Index struct {
	ChunkSize int64    `json:"chunkSize"`
	Files     []v1File `json:"files"`
}

type v1File struct {
	Name   string   `json:"name"`
	Size   int64    `json:"size"`
	Mode   uint32   `json:"mode"`
	Chunks []string `json:"chunks"`
}

// pushV1 stores dir as the fixed-chunk artifact an earlier envd pushed:
// chunk i of a file is its bytes [i*cs, (i+1)*cs), "" when all zeros, each
// distinct chunk a blob; it returns the artifact as Get reads it.
func pushV1(t testing.TB, s *Store, dir string, cs int64) Artifact {
	t.Helper()
	ctx := context.Background()
	r, _, hc, err := s.c.Remote(ctx, repo)
	require.NoError(t, err)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	ix := v1Index{ChunkSize: cs}
	var blobs []Blob
	seen := map[string]bool{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		fi, err := e.Info()
		require.NoError(t, err)
		f := v1File{Name: e.Name(), Size: int64(len(b)), Mode: uint32(fi.Mode().Perm()), Chunks: []string{}}
		for off := int64(0); off < int64(len(b)); off += cs {
			c := b[off:min(off+cs, int64(len(b)))]
			if isZero(c) {
				f.Chunks = append(f.Chunks, "")
				continue
			}
			l := static.NewLayer(c, ChunkMediaType)
			d, _ := l.Digest()
			f.Chunks = append(f.Chunks, d.String())
			if !seen[d.String()] {
				seen[d.String()] = true
				require.NoError(t, putBlob(ctx, hc, r, d.String(), int64(len(c)), l))
				blobs = append(blobs, Blob{Digest: d.String(), Size: int64(len(c))})
			}
		}
		ix.Files = append(ix.Files, f)
	}
	a, err := s.Get(ctx, repo, pushRaw(t, s, IndexV1MediaType, ix, blobs))
	require.NoError(t, err)
	require.Equal(t, cs, a.Index.ChunkSize)
	require.Nil(t, a.Index.Chunking)
	return a
}

// An artifact an earlier envd pushed with fixed 1 MiB chunks (index v1)
// still reads: Get, a full pull byte for byte with its holes, what it
// stores, what a content-defined push of the same directory adds to it, and
// the registry's GC keeping then freeing it.
func TestFixedChunkIndexStillReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, c, srv := startStoreServer(t)
	src := imageDir(t, 8)
	old := pushV1(t, s, src, 1<<20)

	dst := filepath.Join(t.TempDir(), "old")
	require.NoError(t, s.Pull(ctx, old, dst))
	sameFiles(t, src, dst)
	u := old.Usage()
	assert.Equal(t, int64(2<<20), u.Zero, "8 MiB with every fourth MiB zero: two chunks of zeros")
	assert.Equal(t, int64(8<<20+3*4096+170_001+1984), u.Logical)

	// A push of the same directory now: other chunks, none shared.
	res, err := s.Push(ctx, PushRequest{Dir: src, Repo: repo})
	require.NoError(t, err)
	assert.Equal(t, res.Uploaded, NewBytes(res.Artifact, old.Blobs))
	assert.Equal(t, u.Zero, res.Artifact.Usage().Zero, "the same holes, page for page")

	require.NoError(t, c.DeleteManifest(ctx, registry.Image{Repo: repo, Digest: res.Artifact.Digest}))
	st, err := srv.GarbageCollect(ctx, registry.GCOptions{})
	require.NoError(t, err)
	assert.Equal(t, NewBytes(res.Artifact, old.Blobs), st.BytesBefore-st.BytesAfter, "the old image keeps its chunks")
	require.NoError(t, s.Pull(ctx, old, filepath.Join(t.TempDir(), "again")))

	require.NoError(t, c.DeleteManifest(ctx, registry.Image{Repo: repo, Digest: old.Digest}))
	st, err = srv.GarbageCollect(ctx, registry.GCOptions{})
	require.NoError(t, err)
	assert.Equal(t, u.Stored, st.BytesBefore-st.BytesAfter)
	assert.Equal(t, 0, st.BlobsAfter)
}
