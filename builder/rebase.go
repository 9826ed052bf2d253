package builder

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/envd-dev/envd/internal/tarfs"
)

// DatabasePaths are the package databases: a rebase whose base update and
// user changes both touch one has merged two package sets by file, and the
// package manager's view of the result is the user's, not the new base's.
var DatabasePaths = []string{"/var/lib/dpkg/status", "/lib/apk/db/installed"}

// Tree is a flattened file system: path -> a signature of the entry (type,
// mode, owner, size, link target, content digest).
type Tree map[string]Signature

// Signature is what a conflict compares of an entry: two equal signatures
// are the same entry.
type Signature string

// IsDir: the replay removes what was below a directory.
func (s Signature) IsDir() bool { return len(s) > 0 && s[0] == tar.TypeDir }

// Apply adds one layer (an uncompressed OCI layer tar) to t (tarfs.Replay):
// whiteouts delete, opaque markers empty their directory, other entries
// replace. A hard link's signature holds its target's, so a base update
// that changes a file's content changes every name of it.
func (t Tree) Apply(layer io.Reader) error {
	return tarfs.Replay[Signature]{Value: func(e tarfs.LayerEntry, target Signature, _ bool) (Signature, error) {
		h := e.Header
		sig := fmt.Sprintf("%c %o %d:%d %d %s", h.Typeflag, h.Mode&0o7777, h.Uid, h.Gid, h.Size, h.Linkname)
		switch h.Typeflag {
		case tar.TypeReg:
			d := sha256.New()
			if _, err := io.Copy(d, e.Body); err != nil {
				return "", fmt.Errorf("read %s: %w", e.Path, err)
			}
			sig += " " + hex.EncodeToString(d.Sum(nil))
		case tar.TypeLink:
			sig += " = " + string(target)
		}
		return Signature(sig), nil
	}}.Apply(t, layer)
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
	return tarfs.WalkLayer(layer, func(e tarfs.LayerEntry) error {
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
