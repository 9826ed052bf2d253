package changes

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/registry"
)

// layers serves in-memory layer tars by digest.
type layers map[string][]byte

func (l layers) OpenLayer(_ context.Context, img registry.Image, i int) (io.ReadCloser, error) {
	b, ok := l[img.Layers[i].Digest]
	if !ok {
		return nil, fmt.Errorf("no layer %s", img.Layers[i].Digest)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

// f is one tar entry: a name ending in "/" is a directory, "->" a symlink.
type f struct {
	name, body string
	mode       int64
}

func layer(t *testing.T, entries ...f) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		switch {
		case strings.HasSuffix(e.name, "/"):
			h.Typeflag, h.Size, h.Mode = tar.TypeDir, 0, 0o755
		case strings.Contains(e.name, " -> "):
			name, target, _ := strings.Cut(e.name, " -> ")
			h.Name, h.Typeflag, h.Linkname, h.Size = name, tar.TypeSymlink, target, 0
		}
		require.NoError(t, tw.WriteHeader(h))
		if h.Typeflag == tar.TypeReg {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

func image(digests ...string) registry.Image {
	img := registry.Image{Repo: "envd/projects/p", Digest: "sha256:" + strings.Join(digests, "-")}
	for _, d := range digests {
		img.Layers = append(img.Layers, registry.LayerInfo{Digest: d})
	}
	return img
}

const statusBefore = `Package: alpha
Status: install ok installed
Architecture: amd64
Version: 1.0
Description: first
 continued line

Package: beta
Status: install ok installed
Architecture: all
Version: 2.0

Package: gone-long-ago
Status: deinstall ok config-files
Version: 0.1
`

const statusAfter = `Package: alpha
Status: install ok installed
Architecture: amd64
Version: 1.1

Package: gamma
Status: install ok installed
Architecture: amd64
Version: 3.0-1

Package: libx
Status: install ok installed
Architecture: amd64
Version: 5

Package: libx
Status: install ok installed
Architecture: i386
Version: 5
`

func fixture(t *testing.T) layers {
	return layers{
		"base": layer(t, f{name: "etc/"}, f{name: "etc/a", body: "a1"}, f{name: "etc/keep", body: "k"},
			f{name: "usr/"}, f{name: "usr/bin/"}, f{name: "usr/bin/x", body: "x", mode: 0o755},
			f{name: "var/lib/dpkg/status", body: statusBefore},
			f{name: "fixtures/"}, f{name: "fixtures/dir/"}, f{name: "fixtures/dir/1", body: "1"}, f{name: "fixtures/dir/sub/"}, f{name: "fixtures/dir/sub/2", body: "2"},
			f{name: "fixtures/opq/"}, f{name: "fixtures/opq/old", body: "old"},
			f{name: "usr/lib/"}, f{name: "usr/lib/big", body: strings.Repeat("b", 100)}),
		"own1": layer(t, f{name: "home/"}, f{name: "home/u/"}, f{name: "home/u/notes", body: "n"}),
		"own2": layer(t,
			f{name: "usr/bin/dot", body: "dot-binary", mode: 0o755},
			f{name: "usr/lib/graphviz/"}, f{name: "usr/lib/graphviz/libgvc.so", body: strings.Repeat("g", 3000)},
			f{name: "etc/a", body: "a2", mode: 0o600},
			f{name: "fixtures/.wh.dir"},
			f{name: "fixtures/opq/"}, f{name: "fixtures/opq/.wh..wh..opq"}, f{name: "fixtures/opq/new", body: "new"},
			f{name: "usr/bin/x", body: "x", mode: 0o755}, // rewritten, same content and mode: no change
			f{name: "var/lib/dpkg/status", body: statusAfter},
			f{name: "var/lib/apt/lists/deb_main", body: strings.Repeat("l", 50)},
			f{name: "var/cache/apt/pkgcache.bin", body: "c"},
			f{name: "usr/bin/graphviz -> dot"}),
		"other": layer(t, f{name: "etc/a", body: "a3"}, f{name: "opt/"}, f{name: "opt/tool", body: "t"}),
	}
}

func TestComputeAgainstParent(t *testing.T) {
	src := fixture(t)
	got, err := Compute(context.Background(), src, image("base", "own1"), image("base", "own1", "own2"), 0)
	require.NoError(t, err)

	require.NotNil(t, got.Packages)
	assert.Equal(t, "dpkg", got.Packages.Manager)
	assert.Equal(t, []types.Package{{Name: "gamma", Version: "3.0-1", Arch: "amd64"}, {Name: "libx", Version: "5", Arch: "amd64"}, {Name: "libx", Version: "5", Arch: "i386"}}, got.Packages.Added)
	assert.Equal(t, []types.Package{{Name: "beta", Version: "2.0", Arch: "all"}}, got.Packages.Removed, "config-files only is not installed")
	assert.Equal(t, []types.PackageUpgrade{{Name: "alpha", From: "1.0", To: "1.1"}}, got.Packages.Upgraded)

	assert.Equal(t, []string{"/fixtures/opq/new", "/usr/bin/dot", "/usr/bin/graphviz", "/usr/lib/graphviz", "/usr/lib/graphviz/libgvc.so"}, paths(got.Added))
	assert.Equal(t, []string{"/etc/a"}, paths(got.Modified))
	require.NotNil(t, got.Modified[0].Was)
	assert.Equal(t, types.FileChange{Path: "/etc/a", Type: "file", Size: 2, Mode: "0600",
		Was: &types.FileState{Type: "file", Size: 2, Mode: "0644"}}, got.Modified[0])
	assert.Equal(t, []string{"/fixtures/dir", "/fixtures/dir/1", "/fixtures/dir/sub", "/fixtures/dir/sub/2", "/fixtures/opq/old"}, paths(got.Deleted))
	assert.Equal(t, "symlink", got.Added[2].Type)
	assert.Equal(t, "dot", got.Added[2].Link)

	assert.Equal(t, []types.DirSummary{
		{Path: "/var/cache", Reason: "caches", Added: 1, Bytes: 1},
		{Path: "/var/lib/apt", Reason: "apt's state and package lists (apt-get update)", Added: 1, Bytes: 50},
		{Path: "/var/lib/dpkg", Reason: "dpkg's database (see packages)", Modified: 1, Bytes: int64(len(statusAfter))},
	}, got.Summarized)
	assert.Equal(t, types.ChangeTotals{Added: 7, Modified: 2, Deleted: 5, AddedBytes: int64(3000 + 10 + 3 + 2 + 50 + 1 + len(statusAfter))}, got.Totals)
	require.NotEmpty(t, got.TopDirs)
	assert.Equal(t, types.DirBytes{Path: "/usr/lib", Bytes: 3000, Files: 1}, got.TopDirs[0])
	assert.False(t, got.Truncated)
}

func paths(fcs []types.FileChange) []string {
	out := []string{}
	for _, fc := range fcs {
		out = append(out, fc.Path)
	}
	return out
}

// Two versions on different branches (neither's layers a prefix of the
// other's) compare by their flattened trees.
func TestComputeAcrossBranches(t *testing.T) {
	src := fixture(t)
	got, err := Compute(context.Background(), src, image("base", "own1", "own2"), image("base", "other"), 0)
	require.NoError(t, err)
	assert.Contains(t, paths(got.Added), "/opt/tool")
	assert.Contains(t, paths(got.Added), "/fixtures/dir/1", "what own2 deleted is back")
	assert.Contains(t, paths(got.Deleted), "/usr/bin/dot")
	assert.Contains(t, paths(got.Deleted), "/home/u/notes")
	assert.Equal(t, []string{"/etc/a"}, paths(got.Modified))
	require.NotNil(t, got.Packages)
	assert.Equal(t, []types.PackageUpgrade{{Name: "alpha", From: "1.1", To: "1.0"}}, got.Packages.Upgraded, "a downgrade is a version change")
}

func TestComputeSameImageAndLimit(t *testing.T) {
	src := fixture(t)
	got, err := Compute(context.Background(), src, image("base", "own1"), image("base", "own1"), 0)
	require.NoError(t, err)
	assert.Equal(t, types.ChangeTotals{}, got.Totals)
	assert.Nil(t, got.Packages, "no package database touched")
	assert.Empty(t, got.Added)

	got, err = Compute(context.Background(), src, image("base", "own1"), image("base", "own1", "own2"), 2)
	require.NoError(t, err)
	assert.Len(t, got.Added, 2)
	assert.True(t, got.Truncated)
	assert.Equal(t, 7, got.Totals.Added, "totals count past the limit")
}

func TestParseApkInstalled(t *testing.T) {
	db := parseApkInstalled([]byte("C:Q1abc=\nP:musl\nV:1.2.4-r2\nA:x86_64\nS:383152\n\nP:busybox\nV:1.36.1-r5\nA:x86_64\n"))
	assert.Equal(t, packageDB{"musl": {Name: "musl", Version: "1.2.4-r2", Arch: "x86_64"}, "busybox": {Name: "busybox", Version: "1.36.1-r5", Arch: "x86_64"}}, db)
}

func TestSummarised(t *testing.T) {
	for p, want := range map[string]string{
		"/var/lib/apt/lists/x":      "/var/lib/apt",
		"/home/ann/.cache/pip/x":    "/home/ann/.cache",
		"/home/ann/.cache":          "",
		"/var/cache":                "",
		"/usr/share/doc/gv/README":  "/usr/share/doc",
		"/usr/share/graphviz/x.txt": "",
	} {
		dir, _, ok := summarised(p)
		assert.Equal(t, want != "", ok, p)
		assert.Equal(t, want, dir, p)
	}
}

func TestCacheDropsTheLeastRecentlyUsed(t *testing.T) {
	c := NewCache(2)
	c.Put("a", "b", 10, types.Changes{Version: 1})
	c.Put("b", "c", 10, types.Changes{Version: 2})
	_, ok := c.Get("a", "b", 10)
	require.True(t, ok)
	c.Put("c", "d", 10, types.Changes{Version: 3})
	_, ok = c.Get("b", "c", 10)
	assert.False(t, ok, "the least recently used entry is gone")
	got, ok := c.Get("a", "b", 10)
	assert.True(t, ok)
	assert.Equal(t, 1, got.Version)
	_, ok = c.Get("a", "b", 5)
	assert.False(t, ok, "another limit is another entry")
}

// rawLayer writes tar headers as given (hard links, no parent entries).
func rawLayer(t *testing.T, entries ...tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = h.Uname // the content, carried in a field a layer leaves empty here
			h.Uname, h.Size = "", int64(len(body))
		}
		require.NoError(t, tw.WriteHeader(&h))
		_, err := tw.Write([]byte(body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// A file's content rewritten under one name of a hard link changed it
// under both: the link is modified too.
func TestComputeHardLinkFollowsItsTarget(t *testing.T) {
	src := layers{
		"base": rawLayer(t, tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
			tar.Header{Name: "bin/a", Typeflag: tar.TypeReg, Mode: 0o755, Uname: "one"},
			tar.Header{Name: "bin/b", Typeflag: tar.TypeLink, Mode: 0o755, Linkname: "bin/a"}),
		"rewrite": rawLayer(t, tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755},
			tar.Header{Name: "bin/a", Typeflag: tar.TypeReg, Mode: 0o755, Uname: "two!"},
			tar.Header{Name: "bin/b", Typeflag: tar.TypeLink, Mode: 0o755, Linkname: "bin/a"}),
	}
	got, err := Compute(context.Background(), src, image("base"), image("base", "rewrite"), 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"/bin/a", "/bin/b"}, paths(got.Modified))
}

// A whiteout in the shared layers deletes a directory whose entries a
// newer layer names without their parents: what that layer brings back is
// added, not "unchanged" against what the whiteout deleted.
func TestComputeWhiteoutAboveWhatALayerNames(t *testing.T) {
	src := layers{
		"base": rawLayer(t, tar.Header{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755}, tar.Header{Name: "a/b/", Typeflag: tar.TypeDir, Mode: 0o755},
			tar.Header{Name: "a/b/c", Typeflag: tar.TypeReg, Mode: 0o644, Uname: "c"}),
		"gone": rawLayer(t, tar.Header{Name: ".wh.a", Typeflag: tar.TypeReg}),
		"back": rawLayer(t, tar.Header{Name: "a/b/c", Typeflag: tar.TypeReg, Mode: 0o644, Uname: "c"}),
	}
	got, err := Compute(context.Background(), src, image("base", "gone"), image("base", "gone", "back"), 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"/a/b/c"}, paths(got.Added))
	assert.Empty(t, got.Modified)
}
