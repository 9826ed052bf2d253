package changes

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/envd-dev/envd/internal/tarfs"
)

// entry is a file system entry's state, as far as a diff cares: not its
// mtime (a rewrite with the same content is no change).
type entry struct {
	typ    byte // tar typeflag
	mode   int64
	uid    int
	gid    int
	size   int64
	link   string
	digest string // sha256 of a regular file's content
}

func (e entry) same(o entry) bool { return e == o }

// state is a flattened file system, or the part of one a diff looks at.
type state map[string]entry

func (s state) clone() state {
	out := make(state, len(s))
	for k, v := range s {
		out[k] = v
	}
	return out
}

// removeUnder deletes p's descendants, and p itself when self. Only a
// directory has descendants: for anything else it is one map operation.
func (s state) removeUnder(p string, self bool) {
	old, ok := s[p]
	if self {
		delete(s, p)
	}
	if ok && old.typ != tar.TypeDir {
		return
	}
	prefix := p + "/"
	if p == "/" {
		prefix = "/"
	}
	for k := range s {
		if strings.HasPrefix(k, prefix) {
			delete(s, k)
		}
	}
}

// Entries of an eStargz layer's tar that are not part of the file system.
var estargzMeta = map[string]bool{
	"stargz.index.json": true, ".prefetch.landmark": true, ".no.prefetch.landmark": true,
}

// walk calls f for each entry of an uncompressed layer tar, whiteouts
// decoded and paths absolute, without the root and eStargz's own entries.
func walk(layer io.Reader, f func(tarfs.LayerEntry) error) error {
	return tarfs.ReadLayer(layer, func(e tarfs.LayerEntry) error {
		if e.Kind == tarfs.Added && (e.Path == "." || estargzMeta[e.Path]) {
			return nil
		}
		e.Path = path.Join("/", e.Path)
		return f(e)
	})
}

// interest is the part of a file system a diff needs: the paths the
// compared layers touch, and everything under the paths they may replace
// or delete.
type interest struct {
	paths   map[string]bool
	subtree map[string]bool
}

func newInterest() *interest {
	return &interest{paths: map[string]bool{}, subtree: map[string]bool{}}
}

// note records what one layer entry touches.
func (in *interest) note(e tarfs.LayerEntry) {
	in.paths[e.Path] = true
	// A whiteout or opaque directory deletes what is under it; any
	// entry that is not a directory replaces one that was.
	if e.Kind != tarfs.Added || e.Header.Typeflag != tar.TypeDir {
		in.subtree[e.Path] = true
	}
}

func (in *interest) wants(p string) bool {
	if in.paths[p] || in.subtree[p] {
		return true
	}
	for d := p; d != "/" && d != "."; {
		d = path.Dir(d)
		if in.subtree[d] {
			return true
		}
	}
	return false
}

// apply applies one layer to s. With in set, only wanted paths are kept
// (and hashed). content receives the bytes of the files named in it.
func (s state) apply(layer io.Reader, in *interest, content map[string][]byte) error {
	return walk(layer, func(e tarfs.LayerEntry) error {
		if in != nil && !in.wants(e.Path) {
			return nil
		}
		switch e.Kind {
		case tarfs.Opaque:
			s.removeUnder(e.Path, false)
			return nil
		case tarfs.Whiteout:
			s.removeUnder(e.Path, true)
			return nil
		}
		h := e.Header
		if old, ok := s[e.Path]; ok && old.typ == tar.TypeDir && h.Typeflag != tar.TypeDir {
			s.removeUnder(e.Path, false) // a file replacing a directory
		}
		en := entry{typ: h.Typeflag, mode: h.Mode & 0o7777, uid: h.Uid, gid: h.Gid, link: h.Linkname}
		if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeRegA {
			en.typ = tar.TypeReg
			hash := sha256.New()
			var w io.Writer = hash
			var buf *strings.Builder
			if _, ok := content[e.Path]; ok {
				buf = &strings.Builder{}
				w = io.MultiWriter(hash, buf)
			}
			n, err := io.Copy(w, e.Body)
			if err != nil {
				return fmt.Errorf("read %s: %w", e.Path, err)
			}
			en.size, en.digest = n, hex.EncodeToString(hash.Sum(nil))
			if buf != nil {
				content[e.Path] = []byte(buf.String())
			}
		}
		s[e.Path] = en
		return nil
	})
}

// typeName is the wire name of a tar typeflag.
func typeName(t byte) string {
	switch t {
	case tar.TypeReg, tar.TypeRegA:
		return "file"
	case tar.TypeDir:
		return "dir"
	case tar.TypeSymlink:
		return "symlink"
	case tar.TypeLink:
		return "hardlink"
	case tar.TypeChar:
		return "char"
	case tar.TypeBlock:
		return "block"
	case tar.TypeFifo:
		return "fifo"
	}
	return fmt.Sprintf("type-%c", t)
}
