package squash

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ent is one entry of a test layer.
type ent struct {
	name  string
	typ   byte // tar.TypeReg when 0
	body  string
	mode  int64
	uid   int
	link  string
	xattr map[string]string
	major int64
}

// capNetBind is a version 2 file capability: cap_net_bind_service+ep.
const capNetBind = "\x01\x00\x00\x02" + "\x00\x04\x00\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00" + "\x00\x00\x00\x00"

var epoch = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func layerTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i, e := range ents {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		h := &tar.Header{Typeflag: typ, Name: e.name, Mode: mode, Uid: e.uid, Gid: e.uid, Linkname: e.link,
			ModTime: epoch.Add(time.Duration(i) * time.Minute), Devmajor: e.major, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		for k, v := range e.xattr {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		require.NoError(t, tw.WriteHeader(h))
		if typ == tar.TypeReg {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

func opener(layers [][]byte) Opener {
	return func(_ context.Context, i int) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layers[i])), nil
	}
}

func dirEnt(name string) ent { return ent{name: name, typ: tar.TypeDir} }

// baseLayer is what every case's stack sits on.
func baseLayer(t testing.TB) []byte {
	return layerTar(t,
		dirEnt("etc"), ent{name: "etc/hosts", body: "base hosts\n"}, ent{name: "etc/passwd", body: "root:x:0:0\n"},
		dirEnt("usr"), dirEnt("usr/lib"), ent{name: "usr/lib/a.so", body: "a"}, ent{name: "usr/lib/b.so", body: "b"},
		dirEnt("opt"), dirEnt("opt/tool"), ent{name: "opt/tool/bin", body: "tool"}, dirEnt("opt/tool/share"), ent{name: "opt/tool/share/x", body: "x"},
		dirEnt("var"), ent{name: "var/file-then-dir", body: "f"}, dirEnt("var/dir-then-file"), ent{name: "var/dir-then-file/in", body: "in"},
		ent{name: "bin-sh", typ: tar.TypeSymlink, link: "/bin/busybox"},
	)
}

var mergeCases = []struct {
	name   string
	layers func(t testing.TB) [][]byte
}{
	{"modified twice, the top wins", func(t testing.TB) [][]byte {
		return [][]byte{
			layerTar(t, dirEnt("etc"), ent{name: "etc/hosts", body: "one\n"}, ent{name: "home-file", body: "h1"}),
			layerTar(t, dirEnt("etc"), ent{name: "etc/hosts", body: "two, longer\n", mode: 0o600, uid: 1000}),
		}
	}},
	{"base file deleted, added file deleted", func(t testing.TB) [][]byte {
		return [][]byte{
			layerTar(t, dirEnt("tmpx"), ent{name: "tmpx/scratch", body: "s"}, dirEnt("etc"), ent{name: "etc/.wh.passwd"}),
			layerTar(t, dirEnt("tmpx"), ent{name: "tmpx/.wh.scratch"}),
		}
	}},
	{"directory deleted then made again", func(t testing.TB) [][]byte {
		return [][]byte{
			layerTar(t, dirEnt("opt"), ent{name: "opt/.wh.tool"}),
			layerTar(t, dirEnt("opt"), dirEnt("opt/tool"), ent{name: "opt/tool/new", body: "n"}),
		}
	}},
	{"opaque directory", func(t testing.TB) [][]byte {
		return [][]byte{
			layerTar(t, dirEnt("usr"), dirEnt("usr/lib"), ent{name: "usr/lib/c.so", body: "c"}),
			layerTar(t, dirEnt("usr"), dirEnt("usr/lib"), ent{name: "usr/lib/.wh..wh..opq"}, ent{name: "usr/lib/d.so", body: "d"}),
			layerTar(t, dirEnt("usr"), dirEnt("usr/lib"), ent{name: "usr/lib/e.so", body: "e"}),
		}
	}},
	{"file to directory and directory to file", func(t testing.TB) [][]byte {
		return [][]byte{
			layerTar(t, dirEnt("var"), ent{name: "var/.wh.file-then-dir"}, dirEnt("var/file-then-dir"), ent{name: "var/file-then-dir/y", body: "y"},
				ent{name: "var/.wh.dir-then-file"}, ent{name: "var/dir-then-file", body: "now a file"}),
			layerTar(t, dirEnt("var"), dirEnt("var/file-then-dir"), ent{name: "var/file-then-dir/z", body: "z"}),
		}
	}},
	{"directory metadata only", func(t testing.TB) [][]byte {
		return [][]byte{
			layerTar(t, ent{name: "opt", typ: tar.TypeDir, mode: 0o700, uid: 1000}),
			layerTar(t, ent{name: "opt", typ: tar.TypeDir, mode: 0o1777}),
		}
	}},
	{"symlinks, fifos, devices and xattrs", func(t testing.TB) [][]byte {
		return [][]byte{
			layerTar(t, ent{name: "bin-sh", typ: tar.TypeSymlink, link: "/bin/dash"}, ent{name: "pipe", typ: tar.TypeFifo},
				ent{name: "null2", typ: tar.TypeChar, major: 1}, ent{name: "tagged", body: "t", xattr: map[string]string{"user.k": "v1"}}),
			layerTar(t, ent{name: "tagged", body: "t", xattr: map[string]string{"user.k": "v2", "security.capability": capNetBind}},
				ent{name: ".wh.pipe"}),
		}
	}},
	{"hard links, one target replaced above", func(t testing.TB) [][]byte {
		return [][]byte{
			layerTar(t, dirEnt("h"), ent{name: "h/a", body: "first a"}, ent{name: "h/b", typ: tar.TypeLink, link: "h/a"},
				ent{name: "h/c", typ: tar.TypeLink, link: "h/a"}, ent{name: "h/k", body: "kept"}, ent{name: "h/l", typ: tar.TypeLink, link: "h/k"}),
			layerTar(t, dirEnt("h"), ent{name: "h/a", body: "second a"}),
		}
	}},
	{"the same path twice in a layer", func(t testing.TB) [][]byte {
		return [][]byte{
			layerTar(t, ent{name: "dup", body: "old"}, ent{name: "dup", body: "new one"}),
			layerTar(t, ent{name: "other", body: "o"}),
		}
	}},
}

// TestRootMergeMatchesStack squashes each stack and checks, with Verify
// (containerd's applier on both sides), that base + merged = base + stack.
func TestRootMergeMatchesStack(t *testing.T) {
	requireRoot(t)
	for _, tc := range mergeCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			user := tc.layers(t)
			all := append([][]byte{baseLayer(t)}, user...)
			dir := t.TempDir()
			merged := filepath.Join(dir, "merged.tar")
			f, err := os.Create(merged)
			require.NoError(t, err)
			_, err = Merge(ctx, opener(user), len(user), dir, f)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			require.NoError(t, Verify(ctx, opener(all), 1, len(all), merged, filepath.Join(dir, "trees")))
		})
	}
}

// TestRootVerifyCatchesAWrongSquash gives Verify a merged layer that lost
// a whiteout: it must say which path differs.
func TestRootVerifyCatchesAWrongSquash(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	user := [][]byte{
		layerTar(t, dirEnt("etc"), ent{name: "etc/.wh.passwd"}),
		layerTar(t, ent{name: "new", body: "n"}),
	}
	all := append([][]byte{baseLayer(t)}, user...)
	dir := t.TempDir()
	wrong := filepath.Join(dir, "wrong.tar")
	require.NoError(t, os.WriteFile(wrong, layerTar(t, dirEnt("etc"), ent{name: "new", body: "n"}), 0o644))
	err := Verify(ctx, opener(all), 1, len(all), wrong, filepath.Join(dir, "trees"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "etc/passwd should not be there")
}

// TestMergeEntries checks the merged tar itself: one entry per path, the
// markers a base needs, hidden content dropped.
func TestMergeEntries(t *testing.T) {
	user := [][]byte{
		layerTar(t, dirEnt("d"), ent{name: "d/gone", body: "g"}, ent{name: "d/kept", body: "k1"}, dirEnt("etc"), ent{name: "etc/.wh.passwd"}),
		layerTar(t, dirEnt("d"), ent{name: "d/.wh.gone"}, ent{name: "d/kept", body: "k2"}),
		layerTar(t, dirEnt("o"), ent{name: "o/.wh..wh..opq"}, ent{name: "o/x", body: "x"}),
	}
	var buf bytes.Buffer
	st, err := Merge(context.Background(), opener(user), len(user), t.TempDir(), &buf)
	require.NoError(t, err)
	got := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		_, dup := got[h.Name]
		assert.False(t, dup, "%s written twice", h.Name)
		got[h.Name] = string(b)
	}
	assert.Equal(t, map[string]string{
		"d/": "", "etc/": "", "o/": "", "o/.wh..wh..opq": "", "o/x": "x",
		"d/kept": "k2", "d/.wh.gone": "", "etc/.wh.passwd": "",
	}, got)
	assert.Equal(t, 2, st.Whiteouts)
	assert.Equal(t, 1, st.Opaque)
	assert.Equal(t, 3, st.Dropped) // d/ of layer 0, d/gone of layer 0, d/kept of layer 0
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (owners and device nodes); CI runs it as root")
	}
}
