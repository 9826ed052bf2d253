package builder

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/envd-dev/envd/internal/tarfs"
)

// Entries of an eStargz layer's tar that are not part of the file system.
var estargzMeta = map[string]bool{
	"stargz.index.json": true, ".prefetch.landmark": true, ".no.prefetch.landmark": true,
}

// DatabasePaths are the package databases: a rebase whose base update and
// user changes both touch one has merged two package sets by file, and the
// package manager's view of the result is the user's, not the new base's.
var DatabasePaths = []string{"/var/lib/dpkg/status", "/lib/apk/db/installed"}

// Tree is a flattened file system: path -> a signature of the entry (type,
// mode, owner, size, link target, content digest).
type Tree map[string]string

// Apply adds one layer (an uncompressed OCI layer tar) to t: whiteouts
// delete, opaque markers empty their directory, other entries replace.
func (t Tree) Apply(layer io.Reader) error {
	return walkLayer(layer, func(e tarfs.LayerEntry) error {
		switch e.Kind {
		case tarfs.Opaque:
			t.removeUnder(e.Path, false)
		case tarfs.Whiteout:
			t.removeUnder(e.Path, true)
		default:
			sig, err := signature(e.Header, e.Body)
			if err != nil {
				return fmt.Errorf("read %s: %w", e.Path, err)
			}
			t[e.Path] = sig
		}
		return nil
	})
}

// walkLayer calls f for each entry of a layer (uncompressed tar), whiteouts
// decoded and Path made absolute ("/usr/bin"), leaving out the root and the
// eStargz metadata entries.
func walkLayer(layer io.Reader, f func(tarfs.LayerEntry) error) error {
	return tarfs.ReadLayer(layer, func(e tarfs.LayerEntry) error {
		if e.Kind == tarfs.Added && (e.Path == "." || estargzMeta[e.Path]) {
			return nil
		}
		e.Path = path.Join("/", e.Path)
		return f(e)
	})
}

// removeUnder deletes everything below p, and p itself when self is set.
func (t Tree) removeUnder(p string, self bool) {
	if self {
		delete(t, p)
	}
	prefix := strings.TrimSuffix(p, "/") + "/"
	for k := range t {
		if strings.HasPrefix(k, prefix) {
			delete(t, k)
		}
	}
}

func signature(h *tar.Header, r io.Reader) (string, error) {
	sig := fmt.Sprintf("%c %o %d:%d %d %s", h.Typeflag, h.Mode&0o7777, h.Uid, h.Gid, h.Size, h.Linkname)
	if h.Typeflag == tar.TypeReg {
		d := sha256.New()
		if _, err := io.Copy(d, r); err != nil {
			return "", err
		}
		sig += " " + hex.EncodeToString(d.Sum(nil))
	}
	return sig, nil
}

// Changed is what a layer changes: Paths it adds, modifies or deletes, and
// Hidden, the paths below which it hides everything of the layers under it
// (a whiteout's deleted path, an opaque directory).
type Changed struct {
	Paths  []string
	Hidden []string
}

// Changes reads a layer (uncompressed tar) and adds what it changes to c.
func (c *Changed) Changes(layer io.Reader) error {
	return walkLayer(layer, func(e tarfs.LayerEntry) error {
		switch e.Kind {
		case tarfs.Opaque:
			c.Hidden = append(c.Hidden, e.Path)
		case tarfs.Whiteout:
			c.Paths = append(c.Paths, e.Path)
			c.Hidden = append(c.Hidden, e.Path)
		default:
			c.Paths = append(c.Paths, e.Path)
		}
		return nil
	})
}

// Conflicts returns the paths that the base update changed (they differ
// between the old and the new base) and that the user's layers also
// changed, sorted, package databases first: a path the user wrote, or any
// path below one the user deleted or made opaque (the new base's version
// of it is hidden). Directories count only when their own metadata
// changed on both sides.
func Conflicts(oldBase, newBase Tree, user Changed) []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if !seen[p] && oldBase[p] != newBase[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, p := range user.Paths {
		add(p)
	}
	for _, h := range user.Hidden {
		prefix := strings.TrimSuffix(h, "/") + "/"
		for _, t := range []Tree{oldBase, newBase} {
			for p := range t {
				if strings.HasPrefix(p, prefix) {
					add(p)
				}
			}
		}
	}
	db := map[string]bool{}
	for _, p := range DatabasePaths {
		db[p] = true
	}
	sort.Slice(out, func(i, j int) bool {
		if db[out[i]] != db[out[j]] {
			return db[out[i]]
		}
		return out[i] < out[j]
	})
	return out
}
