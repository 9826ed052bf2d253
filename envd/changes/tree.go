package changes

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/envd-dev/envd/api/types"
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

// IsDir: the replay removes what was below a directory.
func (e entry) IsDir() bool { return e.typ == tar.TypeDir }

// state is a flattened file system, or the part of one a diff looks at.
type state map[string]entry

func (s state) clone() state {
	out := make(state, len(s))
	for k, v := range s {
		out[k] = v
	}
	return out
}

// interest is the part of a file system a diff needs: the paths the
// compared layers touch, and everything under the paths they may replace
// or delete. parents are the directories above them: a removal there
// reaches them.
type interest struct {
	paths   map[string]bool
	subtree map[string]bool
	parents map[string]bool
}

func newInterest() *interest {
	return &interest{paths: map[string]bool{}, subtree: map[string]bool{}, parents: map[string]bool{}}
}

// note records what one layer entry touches.
func (in *interest) note(e tarfs.LayerEntry) {
	in.paths[e.Path] = true
	// A whiteout or opaque directory deletes what is under it; any
	// entry that is not a directory replaces one that was.
	if e.Kind != tarfs.Added || e.Header.Typeflag != tar.TypeDir {
		in.subtree[e.Path] = true
	}
	for d := e.Path; d != "/" && d != "."; {
		d = path.Dir(d)
		if in.parents[d] {
			break
		}
		in.parents[d] = true
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

// want is in as the replay's Want: nil wants everything.
func (in *interest) want(p string) tarfs.Want {
	switch {
	case in == nil || in.wants(p):
		return tarfs.Record
	case in.parents[p]:
		return tarfs.Below
	}
	return tarfs.Skip
}

// apply applies one layer to s (tarfs.Replay). With in set, only wanted
// paths are kept (and hashed). content receives the bytes of the files
// named in it. A hard link carries its target's size and digest.
func (s state) apply(layer io.Reader, in *interest, content map[string][]byte) error {
	return tarfs.Replay[entry]{Want: in.want, Value: func(e tarfs.LayerEntry, target entry, hasTarget bool) (entry, error) {
		h := e.Header
		en := entry{typ: h.Typeflag, mode: h.Mode & 0o7777, uid: h.Uid, gid: h.Gid, link: h.Linkname}
		if h.Typeflag == tar.TypeLink && hasTarget {
			en.size, en.digest = target.size, target.digest
		}
		if h.Typeflag == tar.TypeReg {
			hash := sha256.New()
			var w io.Writer = hash
			var buf *strings.Builder
			if _, ok := content[e.Path]; ok {
				buf = &strings.Builder{}
				w = io.MultiWriter(hash, buf)
			}
			n, err := io.Copy(w, e.Body)
			if err != nil {
				return entry{}, fmt.Errorf("read %s: %w", e.Path, err)
			}
			en.size, en.digest = n, hex.EncodeToString(hash.Sum(nil))
			if buf != nil {
				content[e.Path] = []byte(buf.String())
			}
		}
		return en, nil
	}}.Apply(s, layer)
}

// typeName is the wire name of a tar typeflag.
func typeName(t byte) string {
	switch t {
	case tar.TypeReg, tar.TypeRegA:
		return types.FileTypeFile
	case tar.TypeDir:
		return types.FileTypeDir
	case tar.TypeSymlink:
		return types.FileTypeSymlink
	case tar.TypeLink:
		return "hardlink"
	case tar.TypeChar:
		return types.FileTypeChar
	case tar.TypeBlock:
		return types.FileTypeBlock
	case tar.TypeFifo:
		return types.FileTypeFIFO
	}
	return fmt.Sprintf("type-%c", t)
}
