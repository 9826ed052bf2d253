package squash

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/envd-dev/envd/internal/tarfs"
)

// Terms, for a stack of layer tars applied bottom (0) to top (n-1) on
// some tree below them (the base image):
//
//   - an entry at a path is visible when no layer above it replaced,
//     deleted or hid that path or one of its ancestors;
//   - the winner of a path is its visible entry in the highest layer;
//   - hiding: a whiteout of P, or a non-directory at P, hides everything at
//     and under P in the layers below and in the base; an opaque marker on
//     directory D hides what is under D below it.
//
// The merged layer has every winner, the whiteouts that win, and an opaque
// marker on each directory whose content below (the base's included) some
// visible layer hid, so that applied on the same base it gives the tree the
// whole stack gives.

// Opener opens the uncompressed tar of layer i of the stack.
type Opener func(ctx context.Context, i int) (io.ReadCloser, error)

// MergeStats counts what Merge wrote.
type MergeStats struct {
	Entries   int   // tar entries written (markers included)
	Whiteouts int   // whiteouts written
	Opaque    int   // opaque markers written
	Bytes     int64 // file content written
	Dropped   int   // entries of the stack that a higher layer hid or replaced
}

// at names one entry of the stack: its layer and its index in that tar.
type at struct{ layer, ord int }

type winner struct {
	at
	kind tarfs.Kind
	dir  bool
	hdr  *tar.Header // directories only: written before any other entry
}

// Merge writes to w one layer tar equal to the n layers that open gives,
// stacked. Each layer is read twice, top-down to decide what wins, then
// bottom-up to write the winners; scratch holds the content of hard link
// targets that a higher layer replaced (the link is written as a copy).
func Merge(ctx context.Context, open Opener, n int, scratch string, w io.Writer) (MergeStats, error) {
	var st MergeStats
	win := map[string]*winner{}
	hideAll := map[string]bool{}      // the path and everything under it, in lower layers
	hideChildren := map[string]bool{} // everything under the path, in lower layers
	opaque := map[string]bool{}       // directories the merged layer marks opaque
	links := map[at]string{}          // winning hard links -> their target

	hidden := func(p string) bool {
		for a := path.Dir(p); ; a = path.Dir(a) {
			if hideAll[a] || hideChildren[a] {
				return true
			}
			if a == "." || a == "/" {
				return false
			}
		}
	}
	for k := n - 1; k >= 0; k-- {
		pendingAll, pendingChildren := map[string]bool{}, map[string]bool{}
		ord := 0
		err := readLayer(ctx, open, k, func(e tarfs.LayerEntry) error {
			defer func() { ord++ }()
			p := e.Path
			if p != "." && hidden(p) {
				st.Dropped++
				return nil
			}
			if e.Kind == tarfs.Opaque {
				if !hideAll[p] {
					opaque[p] = true
					pendingChildren[p] = true
				}
				return nil
			}
			if hideAll[p] {
				st.Dropped++
				return nil
			}
			isDir := e.Kind == tarfs.Added && e.Header.Typeflag == tar.TypeDir
			if w0, ok := win[p]; ok && w0.layer != k {
				// Decided above: only a directory lets anything of a
				// lower layer through, and a lower deletion or
				// replacement of it means the base's content under it
				// is gone too.
				st.Dropped++
				if w0.dir && !isDir {
					opaque[p] = true
					pendingAll[p] = true
				}
				return nil
			}
			// Undecided, or a later entry of the same path in this layer
			// (the last one of a tar wins).
			wn := &winner{at: at{k, ord}, kind: e.Kind, dir: isDir}
			if isDir {
				h := *e.Header
				wn.hdr = &h
			}
			if old, ok := win[p]; ok {
				delete(links, old.at)
				st.Dropped++
			}
			win[p] = wn
			if !isDir {
				pendingAll[p] = true
			}
			if e.Kind == tarfs.Added && e.Header.Typeflag == tar.TypeLink {
				t, err := tarfs.Clean(e.Header.Linkname)
				if err != nil {
					return err
				}
				links[wn.at] = t
			}
			return nil
		})
		if err != nil {
			return st, fmt.Errorf("layer %d: %w", k, err)
		}
		for p := range pendingAll {
			hideAll[p] = true
		}
		for p := range pendingChildren {
			hideChildren[p] = true
		}
	}

	// A winning hard link whose target is not the winner of the target's
	// path in the same layer would point at another file in the merged
	// layer: its content is copied from its own layer instead.
	copies := map[at]bool{}            // link entries written as copies
	needs := map[int]map[string]bool{} // layer -> target paths whose content to keep
	for a, t := range links {
		if tw, ok := win[t]; ok && tw.layer == a.layer && tw.ord < a.ord {
			continue
		}
		copies[a] = true
		if needs[a.layer] == nil {
			needs[a.layer] = map[string]bool{}
		}
		needs[a.layer][t] = true
	}

	tw := tar.NewWriter(w)
	// Directories first, parents before children, then markers: every
	// later entry finds its parent, and the markers their directory.
	dirs := make([]string, 0, len(win))
	for p, wn := range win {
		if wn.dir {
			dirs = append(dirs, p)
		}
	}
	sort.Strings(dirs)
	for _, p := range dirs {
		h := *win[p].hdr
		h.Name = entryName(p, true)
		if err := tw.WriteHeader(&h); err != nil {
			return st, err
		}
		st.Entries++
	}
	marked := make([]string, 0, len(opaque))
	for p := range opaque {
		if wn, ok := win[p]; ok && !wn.dir {
			continue // replaced by a non-directory: nothing under it
		}
		marked = append(marked, p)
	}
	sort.Strings(marked)
	for _, p := range marked {
		if err := tw.WriteHeader(markerHeader(path.Join(p, tarfs.WhiteoutOpaque))); err != nil {
			return st, err
		}
		st.Entries++
		st.Opaque++
	}

	for k := 0; k < n; k++ {
		kept := map[string]string{}   // target path -> scratch file with its content
		copied := map[string]string{} // target path -> the merged name of its first copy
		ord := 0
		err := readLayer(ctx, open, k, func(e tarfs.LayerEntry) error {
			defer func() { ord++ }()
			p := e.Path
			wn, ok := win[p]
			isWinner := ok && wn.layer == k && wn.ord == ord && !wn.dir
			keep := e.Kind == tarfs.Added && e.Header.Typeflag == tar.TypeReg && needs[k][p]
			if !isWinner && !keep {
				return nil
			}
			var body io.Reader = e.Body
			if keep {
				f, err := os.CreateTemp(scratch, "link-*")
				if err != nil {
					return err
				}
				defer f.Close()
				kept[p] = f.Name()
				body = io.TeeReader(e.Body, f)
				if !isWinner {
					_, err := io.Copy(io.Discard, body)
					return err
				}
			}
			switch {
			case e.Kind == tarfs.Whiteout:
				h := markerHeader(path.Join(path.Dir(p), tarfs.WhiteoutPrefix+path.Base(p)))
				h.ModTime = e.Header.ModTime
				st.Whiteouts++
				return writeEntry(tw, h, nil, &st)
			case copies[wn.at]:
				t := links[wn.at]
				if first, ok := copied[t]; ok {
					h := *e.Header
					h.Name, h.Linkname = entryName(p, false), first
					return writeEntry(tw, &h, nil, &st)
				}
				src, ok := kept[t]
				if !ok {
					return fmt.Errorf("hard link %q: its target %q is not earlier in the layer", p, t)
				}
				f, err := os.Open(src)
				if err != nil {
					return err
				}
				defer f.Close()
				fi, err := f.Stat()
				if err != nil {
					return err
				}
				h := *e.Header
				h.Name, h.Typeflag, h.Linkname, h.Size = entryName(p, false), tar.TypeReg, "", fi.Size()
				copied[t] = h.Name
				return writeEntry(tw, &h, f, &st)
			default:
				h := *e.Header
				h.Name = entryName(p, false)
				if h.Typeflag == tar.TypeLink {
					h.Linkname = entryName(links[wn.at], false)
				}
				return writeEntry(tw, &h, body, &st)
			}
		})
		for _, f := range kept {
			_ = os.Remove(f)
		}
		if err != nil {
			return st, fmt.Errorf("layer %d: %w", k, err)
		}
	}
	return st, tw.Close()
}

func readLayer(ctx context.Context, open Opener, i int, fn func(tarfs.LayerEntry) error) error {
	rc, err := open(ctx, i)
	if err != nil {
		return err
	}
	defer rc.Close()
	return tarfs.ReadLayer(rc, fn)
}

func writeEntry(tw *tar.Writer, h *tar.Header, body io.Reader, st *MergeStats) error {
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	st.Entries++
	if body == nil || h.Typeflag != tar.TypeReg || h.Size == 0 {
		return nil
	}
	n, err := io.CopyN(tw, body, h.Size)
	st.Bytes += n
	if err != nil {
		return fmt.Errorf("content of %q: %w", h.Name, err)
	}
	return nil
}

// entryName is the tar name of the clean path p: relative, directories with
// a trailing slash, the root as "./".
func entryName(p string, dir bool) string {
	if p == "." {
		return "./"
	}
	if dir {
		return p + "/"
	}
	return p
}

func markerHeader(name string) *tar.Header {
	return &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(filepath.ToSlash(name), "./"), Mode: 0o600, Format: tar.FormatPAX}
}
