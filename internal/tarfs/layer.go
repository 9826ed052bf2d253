package tarfs

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// Kind is what a layer entry does to the tree below it.
type Kind int

const (
	// Added is an entry added or replaced, of any type.
	Added Kind = iota
	// Whiteout deletes Path (the entry ".wh.<base>").
	Whiteout
	// Opaque makes the directory Path hide everything of the layers below
	// it (the entry "<dir>/.wh..wh..opq").
	Opaque
)

// LayerEntry is one entry of a layer tar with its whiteout naming decoded.
type LayerEntry struct {
	Kind Kind
	// Path is the path in the tree the entry is about, as Clean gives it
	// ("." for the root).
	Path   string
	Header *tar.Header
	// Body is a regular file's content (Added entries only).
	Body io.Reader
}

// ReadLayer calls fn for each entry of an uncompressed layer tar, whiteouts
// and opaque markers decoded (the read side of Options.Overlay). A name that
// Clean refuses fails with errdefs.ErrInvalidArgument.
func ReadLayer(layer io.Reader, fn func(LayerEntry) error) error {
	tr := tar.NewReader(layer)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		p, err := Clean(h.Name)
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		e := LayerEntry{Kind: Added, Path: p, Header: h, Body: tr}
		dir, base := path.Split(p)
		switch {
		case base == WhiteoutOpaque:
			e.Kind, e.Path = Opaque, path.Clean(dir)
		case strings.HasPrefix(base, WhiteoutPrefix):
			e.Kind, e.Path = Whiteout, path.Join(dir, strings.TrimPrefix(base, WhiteoutPrefix))
		}
		if err := fn(e); err != nil {
			return err
		}
	}
}
