// Package changes tells what changed between two versions of a project:
// the packages added, removed and upgraded (from the package databases),
// the files added, modified and deleted, with noisy directories summarised,
// and where the bytes went.
//
// Versions are images whose layers usually share a prefix (the base and
// the history before the older version), so only the layers after the
// common prefix are read whole; the prefix is read once, keeping only the
// paths those layers touch.
package changes

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/tarfs"
	"github.com/envd-dev/envd/registry"
)

// Layers opens the uncompressed tar of an image's i-th layer
// (*registry.Client).
type Layers interface {
	OpenLayer(ctx context.Context, img registry.Image, i int) (io.ReadCloser, error)
}

// DefaultLimit is how many entries each of the added, modified and deleted
// lists holds unless the caller asks otherwise.
const DefaultLimit = 1000

// Compute compares the file systems of two images, before and after, and
// lists at most limit entries of each kind (DefaultLimit when <= 0).
func Compute(ctx context.Context, src Layers, before, after registry.Image, limit int) (types.Changes, error) {
	if limit <= 0 {
		limit = DefaultLimit
	}
	common := 0
	for common < len(before.Layers) && common < len(after.Layers) && before.Layers[common].Digest == after.Layers[common].Digest {
		common++
	}
	in := newInterest()
	for _, side := range []registry.Image{before, after} {
		for i := common; i < len(side.Layers); i++ {
			if err := readLayer(ctx, src, side, i, func(r io.Reader) error {
				return tarfs.WalkLayer(r, func(e tarfs.LayerEntry) error { in.note(e); return nil })
			}); err != nil {
				return types.Changes{}, err
			}
		}
	}
	// The package databases are compared whenever a side's own layers
	// touch one.
	dbs := map[string][]byte{}
	for _, p := range []string{dpkgStatus, apkInstalled} {
		if in.wants(p) {
			dbs[p] = nil
		}
	}
	base := state{}
	for i := range common {
		if len(in.paths) == 0 {
			break // nothing touched: the images have the same file system
		}
		if err := readLayer(ctx, src, after, i, func(r io.Reader) error { return base.apply(r, in, dbs) }); err != nil {
			return types.Changes{}, err
		}
	}
	sides := [2]state{}
	sideDBs := [2]map[string][]byte{}
	for s, img := range []registry.Image{before, after} {
		st, content := base.clone(), cloneBytes(dbs)
		for i := common; i < len(img.Layers); i++ {
			if err := readLayer(ctx, src, img, i, func(r io.Reader) error { return st.apply(r, nil, content) }); err != nil {
				return types.Changes{}, err
			}
		}
		sides[s], sideDBs[s] = st, content
	}
	out := compare(sides[0], sides[1], limit)
	out.Packages = packages(sides, sideDBs)
	return out, nil
}

func readLayer(ctx context.Context, src Layers, img registry.Image, i int, f func(io.Reader) error) error {
	rc, err := src.OpenLayer(ctx, img, i)
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := f(rc); err != nil {
		return fmt.Errorf("layer %d of %s: %w", i, img.Ref(), err)
	}
	return nil
}

func cloneBytes(m map[string][]byte) map[string][]byte {
	out := make(map[string][]byte, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// packages compares the package databases of the two sides, nil when
// neither side's own layers touched one (the package set is the same) and
// when neither side has one.
func packages(sides [2]state, dbs [2]map[string][]byte) *types.PackageChanges {
	for _, db := range []struct {
		path, manager string
		parse         func([]byte) packageDB
	}{{dpkgStatus, "dpkg", parseDpkgStatus}, {apkInstalled, "apk", parseApkInstalled}} {
		if _, ok := dbs[1][db.path]; !ok {
			continue
		}
		var sets [2]packageDB
		present := false
		for s := range sides {
			sets[s] = packageDB{}
			if e, ok := sides[s][db.path]; ok && typeName(e.typ) == types.FileTypeFile {
				sets[s], present = db.parse(dbs[s][db.path]), true
			}
		}
		if present {
			return comparePackages(db.manager, sets[0], sets[1])
		}
	}
	return nil
}

// compare lists the differences from before to after.
func compare(before, after state, limit int) types.Changes {
	out := types.Changes{Added: []types.FileChange{}, Modified: []types.FileChange{}, Deleted: []types.FileChange{}, Summarized: []types.DirSummary{}, TopDirs: []types.DirBytes{}}
	summaries := map[string]*types.DirSummary{}
	top := map[string]*types.DirBytes{}
	paths := make([]string, 0, len(after))
	for p := range after {
		paths = append(paths, p)
	}
	for p := range before {
		if _, ok := after[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	add := func(list *[]types.FileChange, fc types.FileChange) {
		if len(*list) < limit {
			*list = append(*list, fc)
		} else {
			out.Truncated = true
		}
	}
	for _, p := range paths {
		a, inAfter := after[p]
		b, inBefore := before[p]
		var kind string
		switch {
		case inAfter && !inBefore:
			kind = "added"
		case inBefore && !inAfter:
			kind = "deleted"
		case a.same(b):
			continue
		case a.typ == b.typ && typeName(a.typ) == types.FileTypeDir && a.mode == b.mode && a.uid == b.uid && a.gid == b.gid:
			continue
		default:
			kind = "modified"
		}
		var bytes int64
		if kind != "deleted" && typeName(a.typ) == types.FileTypeFile {
			bytes = a.size
			out.Totals.AddedBytes += bytes
			d := topDir(p)
			if top[d] == nil {
				top[d] = &types.DirBytes{Path: d}
			}
			top[d].Bytes += bytes
			top[d].Files++
		}
		if dir, reason, ok := summarised(p); ok {
			s := summaries[dir]
			if s == nil {
				s = &types.DirSummary{Path: dir, Reason: reason}
				summaries[dir] = s
			}
			s.Bytes += bytes
			switch kind {
			case "added":
				s.Added++
			case "modified":
				s.Modified++
			case "deleted":
				s.Deleted++
			}
		}
		switch kind {
		case "added":
			out.Totals.Added++
			if _, _, ok := summarised(p); !ok {
				add(&out.Added, fileChange(p, a))
			}
		case "deleted":
			out.Totals.Deleted++
			if _, _, ok := summarised(p); !ok {
				add(&out.Deleted, fileChange(p, b))
			}
		case "modified":
			out.Totals.Modified++
			if _, _, ok := summarised(p); !ok {
				fc := fileChange(p, a)
				was := fileChange(p, b)
				fc.Was = &types.FileState{Type: was.Type, Size: was.Size, Mode: was.Mode, UID: was.UID, GID: was.GID, Link: was.Link}
				add(&out.Modified, fc)
			}
		}
	}
	for _, s := range summaries {
		out.Summarized = append(out.Summarized, *s)
	}
	sort.Slice(out.Summarized, func(i, j int) bool { return out.Summarized[i].Path < out.Summarized[j].Path })
	for _, d := range top {
		out.TopDirs = append(out.TopDirs, *d)
	}
	sort.Slice(out.TopDirs, func(i, j int) bool {
		if out.TopDirs[i].Bytes != out.TopDirs[j].Bytes {
			return out.TopDirs[i].Bytes > out.TopDirs[j].Bytes
		}
		return out.TopDirs[i].Path < out.TopDirs[j].Path
	})
	if len(out.TopDirs) > topDirs {
		out.TopDirs = out.TopDirs[:topDirs]
	}
	return out
}

// topDirs is how many directories TopDirs holds.
const topDirs = 10

func fileChange(p string, e entry) types.FileChange {
	return types.FileChange{Path: p, Type: typeName(e.typ), Size: e.size, Mode: fmt.Sprintf("%04o", e.mode), UID: e.uid, GID: e.gid, Link: e.link}
}

// topDir is the directory two levels deep that holds p ("/usr/lib" for
// "/usr/lib/x/y"); a file at the first or second level counts under its
// parent.
func topDir(p string) string {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	n := min(2, len(parts)-1)
	if n <= 0 {
		return "/"
	}
	return "/" + strings.Join(parts[:n], "/")
}

// Summarised directories: package manager and tool state that follows from
// the package changes, caches, logs and temporary files. A pattern's "*"
// matches one path element.
var summaries = []struct {
	pattern, reason string
}{
	{"/var/lib/apt", "apt's state and package lists (apt-get update)"},
	{"/var/lib/dpkg", "dpkg's database (see packages)"},
	{"/lib/apk/db", "apk's database (see packages)"},
	{"/var/cache", "caches"},
	{"/var/log", "logs"},
	{"/tmp", "temporary files"},
	{"/var/tmp", "temporary files"},
	{"/root/.cache", "caches"},
	{"/home/*/.cache", "caches"},
	{"/usr/share/doc", "package documentation"},
	{"/usr/share/man", "package documentation"},
	{"/usr/share/locale", "translations"},
}

// summarised tells whether p is under a summarised directory, and which.
func summarised(p string) (dir, reason string, ok bool) {
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for _, s := range summaries {
		pat := strings.Split(strings.TrimPrefix(s.pattern, "/"), "/")
		if len(parts) <= len(pat) {
			continue // the directory itself is listed; its contents are summarised
		}
		if slices.EqualFunc(pat, parts[:len(pat)], func(a, b string) bool { return a == "*" || a == b }) {
			return "/" + strings.Join(parts[:len(pat)], "/"), s.reason, true
		}
	}
	return "", "", false
}
