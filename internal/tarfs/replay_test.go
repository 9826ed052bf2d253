package tarfs

import (
	"archive/tar"
	"bytes"
	"io"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// node is a test value: the type and, for a file, its content.
type node struct {
	typ     byte
	content string
}

func (n node) IsDir() bool { return n.typ == tar.TypeDir }

func replayLayer(t *testing.T, hs ...tar.Header) io.Reader {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hs {
		body := h.Uname // a file's content, in a field these layers leave empty
		h.Uname = ""
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		require.NoError(t, tw.WriteHeader(&h))
		_, err := tw.Write([]byte(body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return &b
}

func dir(name string) tar.Header { return tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755} }
func file(name, content string) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Uname: content}
}
func hardlink(name, target string) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target}
}
func whiteout(name string) tar.Header { return tar.Header{Name: name, Typeflag: tar.TypeReg} }

var testReplay = Replay[node]{Value: func(e LayerEntry, target node, hasTarget bool) (node, error) {
	if e.Header.Typeflag == tar.TypeLink && hasTarget {
		return target, nil
	}
	b, err := io.ReadAll(e.Body)
	return node{typ: e.Header.Typeflag, content: string(b)}, err
}}

func TestReplay(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		want   func(string) Want
		layers [][]tar.Header
		tree   map[string]string // path -> content ("/" for a directory)
	}{
		{name: "root and eStargz entries are no files",
			layers: [][]tar.Header{{dir("./"), file("stargz.index.json", "{}"), file(".prefetch.landmark", "x"), file("a", "1")}},
			tree:   map[string]string{"/a": "1"}},
		{name: "whiteout deletes a path and what is below",
			layers: [][]tar.Header{{dir("d/"), file("d/x", "1"), file("e", "2")}, {whiteout(".wh.d")}},
			tree:   map[string]string{"/e": "2"}},
		{name: "opaque keeps the directory, hides what was below",
			layers: [][]tar.Header{{dir("d/"), file("d/x", "1")}, {dir("d/"), whiteout("d/.wh..wh..opq"), file("d/y", "2")}},
			tree:   map[string]string{"/d": "/", "/d/y": "2"}},
		{name: "a file replaces a directory and what was below",
			layers: [][]tar.Header{{dir("d/"), file("d/x", "1")}, {file("d", "now a file")}},
			tree:   map[string]string{"/d": "now a file"}},
		{name: "a hard link is its target's content",
			layers: [][]tar.Header{{file("a", "1"), hardlink("b", "a"), hardlink("c", "./a")}},
			tree:   map[string]string{"/a": "1", "/b": "1", "/c": "1"}},
		{name: "a removal above reaches what is recorded below",
			want: func(p string) Want {
				switch p {
				case "/d/x":
					return Record
				case "/", "/d":
					return Below
				}
				return Skip
			},
			layers: [][]tar.Header{{dir("d/"), file("d/x", "1"), file("d/y", "2")}, {file("d", "a file")}},
			tree:   map[string]string{}},
		{name: "an opaque root",
			layers: [][]tar.Header{{file("a", "1")}, {whiteout(".wh..wh..opq"), file("b", "2")}},
			tree:   map[string]string{"/b": "2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := testReplay
			r.Want = tc.want
			tree := map[string]node{}
			for _, l := range tc.layers {
				require.NoError(t, r.Apply(tree, replayLayer(t, l...)))
			}
			got := map[string]string{}
			for p, n := range tree {
				got[p] = n.content
				if n.IsDir() {
					got[p] = "/"
				}
			}
			assert.Equal(t, tc.tree, got, "paths %v", slices.Sorted(maps.Keys(tree)))
		})
	}
}
