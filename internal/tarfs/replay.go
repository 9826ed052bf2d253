package tarfs

import (
	"archive/tar"
	"io"
	"path"
	"strings"
)

// Replay is the one layer-tree replay: it applies image layers in order to
// a flattened file system, map of absolute path ("/etc/hosts") to the
// caller's value for the entry. Migrations (their conflicts), spec export
// (the configuration trees) and version changes all flatten images with it.
//
// Apply's rules, the same for every caller:
//   - the root entry and eStargz's own entries (stargz.index.json, the
//     prefetch landmarks) are not part of the file system;
//   - a whiteout deletes its path and everything below it; an opaque
//     marker deletes everything below its directory (which stays);
//   - an entry that is not a directory deletes what was below its path
//     (a file replacing a directory);
//   - a hard link's value is made with its target's (Value's target), so
//     content that changes under one name shows under the other;
//   - Want decides what is recorded, and a removal reaches every recorded
//     path below the entry whatever Want says of the entry itself.
type Replay[V Node] struct {
	// Want says what a path is to the caller; nil records every path.
	Want func(p string) Want
	// Value makes the value of a recorded entry from its header and, for a
	// regular file, its content (e.Body). A hard link's target (hasTarget
	// false: not recorded) is passed with it.
	Value func(e LayerEntry, target V, hasTarget bool) (V, error)
}

// Node is a replayed entry's value: the replay needs to know directories.
type Node interface{ IsDir() bool }

// Want is what a path is to a replay's caller.
type Want int

const (
	// Skip: neither the path nor anything below it is recorded.
	Skip Want = iota
	// Below: the path is not recorded but paths below it may be (a parent
	// of what the caller records): its removal or replacement applies.
	Below
	// Record: the path is recorded.
	Record
)

// Entries of an eStargz layer's tar that are not part of the file system.
var estargzMeta = map[string]bool{
	"stargz.index.json": true, ".prefetch.landmark": true, ".no.prefetch.landmark": true,
}

// WalkLayer calls f for each entry of an uncompressed layer tar, whiteouts
// decoded and Path made absolute ("/usr/bin"), leaving out the root and the
// eStargz metadata entries.
func WalkLayer(layer io.Reader, f func(LayerEntry) error) error {
	return ReadLayer(layer, func(e LayerEntry) error {
		if e.Kind == Added && (e.Path == "." || estargzMeta[e.Path]) {
			return nil
		}
		e.Path = path.Join("/", e.Path)
		return f(e)
	})
}

// Apply applies one uncompressed layer tar to t.
func (r Replay[V]) Apply(t map[string]V, layer io.Reader) error {
	want := r.Want
	if want == nil {
		want = func(string) Want { return Record }
	}
	return WalkLayer(layer, func(e LayerEntry) error {
		w := want(e.Path)
		if w == Skip {
			return nil
		}
		switch e.Kind {
		case Opaque:
			removeUnder(t, e.Path, false)
			return nil
		case Whiteout:
			removeUnder(t, e.Path, true)
			return nil
		}
		h := e.Header
		if h.Typeflag != tar.TypeDir {
			// Only a directory has descendants. A path not recorded
			// (Below) may be one.
			if old, ok := t[e.Path]; w == Below || ok && old.IsDir() {
				removeUnder(t, e.Path, false)
			}
		}
		if w != Record {
			return nil
		}
		var target V
		hasTarget := false
		if h.Typeflag == tar.TypeLink {
			if p, err := Clean(h.Linkname); err == nil {
				target, hasTarget = t[path.Join("/", p)]
			}
		}
		v, err := r.Value(e, target, hasTarget)
		if err != nil {
			return err
		}
		t[e.Path] = v
		return nil
	})
}

// removeUnder deletes p's descendants from t, and p itself when self.
// Only a directory has descendants: for a path recorded as anything else
// it is one map operation.
func removeUnder[V Node](t map[string]V, p string, self bool) {
	old, ok := t[p]
	if self {
		delete(t, p)
	}
	if ok && !old.IsDir() {
		return
	}
	prefix := strings.TrimSuffix(p, "/") + "/"
	for k := range t {
		if strings.HasPrefix(k, prefix) {
			delete(t, k)
		}
	}
}
