package stargz

import (
	"fmt"
	"io"
	"sort"

	"github.com/containerd/stargz-snapshotter/estargz"
)

// PrefetchRange is what the snapshotter fetches of an eStargz layer when it
// mounts it: the bytes before the layer's prefetch landmark, which hold the
// files a save put first (EncodeOptions.PrioritizedFiles). A start waits
// for it only up to Config.PrefetchHoldBytes.
type PrefetchRange struct {
	Bytes int64 // compressed bytes before the landmark; 0 without one
	// Files are the regular files stored before the landmark, largest
	// first, with their uncompressed sizes.
	Files []PrefetchFile
}

// PrefetchFile is a file of a PrefetchRange.
type PrefetchFile struct {
	Path string // "/usr/bin/dot"
	Size int64
}

// LayerPrefetchRange reads the TOC of the eStargz blob of size bytes at r
// and returns its prefetch range.
func LayerPrefetchRange(r io.ReaderAt, size int64) (PrefetchRange, error) {
	var pr PrefetchRange
	er, err := estargz.Open(io.NewSectionReader(r, 0, size))
	if err != nil {
		return pr, fmt.Errorf("open eStargz layer: %w", err)
	}
	lm, ok := er.Lookup(estargz.PrefetchLandmark)
	if !ok {
		return pr, nil
	}
	pr.Bytes = lm.Offset
	var walk func(e *estargz.TOCEntry)
	walk = func(e *estargz.TOCEntry) {
		e.ForeachChild(func(_ string, c *estargz.TOCEntry) bool {
			switch {
			case c.Type == "dir":
				walk(c)
			case c.Type == "reg" && c.Offset < lm.Offset && c.Name != estargz.PrefetchLandmark:
				pr.Files = append(pr.Files, PrefetchFile{Path: "/" + c.Name, Size: c.Size})
			}
			return true
		})
	}
	if root, ok := er.Lookup(""); ok {
		walk(root)
	}
	sort.Slice(pr.Files, func(i, j int) bool { return pr.Files[i].Size > pr.Files[j].Size })
	return pr, nil
}
