package builder

import (
	"archive/tar"
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type entry struct {
	name, body string
	dir        bool
	link       string // a hard link to this name
}

func layer(t *testing.T, entries ...entry) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.body)), Typeflag: tar.TypeReg}
		if e.dir {
			h = &tar.Header{Name: e.name, Mode: 0o755, Typeflag: tar.TypeDir}
		}
		if e.link != "" {
			h = &tar.Header{Name: e.name, Mode: 0o644, Typeflag: tar.TypeLink, Linkname: e.link}
		}
		require.NoError(t, tw.WriteHeader(h))
		_, err := tw.Write([]byte(e.body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return &b
}

func TestConflicts(t *testing.T) {
	t.Parallel()
	oldBase, newBase := Tree{}, Tree{}
	require.NoError(t, oldBase.Apply(layer(t,
		entry{name: "etc/", dir: true}, entry{name: "etc/motd", body: "old"}, entry{name: "etc/hosts", body: "h"},
		entry{name: "var/lib/dpkg/status", body: "a"}, entry{name: "usr/bin/gone", body: "x"},
		entry{name: "stargz.index.json", body: "{}"})))
	require.NoError(t, newBase.Apply(layer(t,
		entry{name: "./etc/", dir: true}, entry{name: "./etc/motd", body: "new"}, entry{name: "./etc/hosts", body: "h"},
		entry{name: "./var/lib/dpkg/status", body: "a b"}, entry{name: "./etc/issue", body: "12"})))
	assert.NotContains(t, oldBase, "/stargz.index.json", "eStargz metadata is not a file")

	var user Changed
	require.NoError(t, user.Changes(layer(t,
		entry{name: "etc/motd", body: "mine"}, entry{name: "etc/hosts", body: "mine"}, entry{name: "home/u/f", body: "f"},
		entry{name: "var/lib/dpkg/status", body: "a c"}, entry{name: "usr/bin/.wh.gone"}, entry{name: "etc/issue", body: "mine"})))
	assert.Contains(t, user.Paths, "/usr/bin/gone", "a whiteout names the deleted path")
	assert.Equal(t, []string{"/var/lib/dpkg/status", "/etc/issue", "/etc/motd", "/usr/bin/gone"}, Conflicts(oldBase, newBase, user),
		"the package database first; /etc/hosts did not change in the base, /home/u/f is the user's alone")
}

func TestTreeWhiteouts(t *testing.T) {
	t.Parallel()
	tr := Tree{}
	require.NoError(t, tr.Apply(layer(t, entry{name: "a/", dir: true}, entry{name: "a/x", body: "1"}, entry{name: "a/y", body: "2"},
		entry{name: "b/", dir: true}, entry{name: "b/z", body: "3"})))
	require.NoError(t, tr.Apply(layer(t, entry{name: "a/.wh.x"}, entry{name: "b/.wh..wh..opq"}, entry{name: "b/w", body: "4"})))
	_, hasX := tr["/a/x"]
	_, hasZ := tr["/b/z"]
	assert.False(t, hasX)
	assert.False(t, hasZ, "an opaque directory hides what was below")
	assert.Contains(t, tr, "/a/y")
	assert.Contains(t, tr, "/b/w")
	assert.Contains(t, tr, "/b", "the opaque directory itself stays")
}

// A directory the user emptied and made again (opaque) hides the new
// base's changes below it: they are conflicts too.
func TestConflictsBelowOpaqueDirectory(t *testing.T) {
	t.Parallel()
	oldBase, newBase := Tree{}, Tree{}
	require.NoError(t, oldBase.Apply(layer(t, entry{name: "etc/foo/", dir: true}, entry{name: "etc/foo/bar", body: "1"}, entry{name: "etc/other", body: "o"})))
	require.NoError(t, newBase.Apply(layer(t, entry{name: "etc/foo/", dir: true}, entry{name: "etc/foo/bar", body: "2"}, entry{name: "etc/foo/new", body: "n"}, entry{name: "etc/other", body: "p"})))
	var user Changed
	require.NoError(t, user.Changes(layer(t, entry{name: "etc/foo/", dir: true}, entry{name: "etc/foo/.wh..wh..opq"}, entry{name: "etc/foo/mine", body: "m"})))
	assert.Equal(t, []string{"/etc/foo/bar", "/etc/foo/new"}, Conflicts(oldBase, newBase, user),
		"not /etc/other, which the user did not touch")
}

// A file where a directory was replaces it and what was below it.
func TestTreeFileReplacesDirectory(t *testing.T) {
	t.Parallel()
	tr := Tree{}
	require.NoError(t, tr.Apply(layer(t, entry{name: "lib/", dir: true}, entry{name: "lib/x", body: "1"})))
	require.NoError(t, tr.Apply(layer(t, entry{name: "lib", body: "a file now"})))
	assert.Contains(t, tr, "/lib")
	assert.NotContains(t, tr, "/lib/x")
	assert.False(t, tr["/lib"].IsDir())
}

// A base update that rewrites a file rewrites every hard link to it: a
// user's change of the other name conflicts.
func TestConflictsThroughHardLink(t *testing.T) {
	t.Parallel()
	oldBase, newBase := Tree{}, Tree{}
	require.NoError(t, oldBase.Apply(layer(t, entry{name: "usr/bin/", dir: true}, entry{name: "usr/bin/vi", body: "v1"}, entry{name: "usr/bin/ex", link: "usr/bin/vi"})))
	require.NoError(t, newBase.Apply(layer(t, entry{name: "usr/bin/", dir: true}, entry{name: "usr/bin/vi", body: "v2"}, entry{name: "usr/bin/ex", link: "usr/bin/vi"})))
	var user Changed
	require.NoError(t, user.Changes(layer(t, entry{name: "usr/bin/ex", body: "mine"})))
	assert.Equal(t, []string{"/usr/bin/ex"}, Conflicts(oldBase, newBase, user))
}
