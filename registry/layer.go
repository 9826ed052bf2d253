package registry

import (
	"fmt"
	"io"
	"maps"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/envd-dev/envd/errdefs"
)

// LayerInfo describes one layer of a stored image, as its manifest
// descriptor and the config's diff_ids give it.
type LayerInfo struct {
	Digest      string // sha256 of the compressed blob
	DiffID      string // sha256 of the uncompressed tar
	MediaType   string
	Size        int64 // compressed size
	Annotations map[string]string
}

// LayerFile is a compressed layer already written to disk by envd's
// snapshotter package.
type LayerFile struct {
	Path        string            // the compressed blob
	MediaType   string            // e.g. types.OCILayer (gzip), types.OCILayerZStd, or gzip for eStargz
	Digest      string            // sha256 of the compressed file
	DiffID      string            // sha256 of the uncompressed tar
	Size        int64             // size of the compressed file
	Annotations map[string]string // e.g. containerd.io/snapshot/stargz/toc.digest, io.containers.estargz.uncompressed-size
}

func (f LayerFile) validate() error {
	if f.Path == "" {
		return fmt.Errorf("layer file has no path: %w", errdefs.ErrInvalidArgument)
	}
	if err := validateDigest(f.Digest); err != nil {
		return fmt.Errorf("layer %q digest: %w", f.Path, err)
	}
	if err := validateDigest(f.DiffID); err != nil {
		return fmt.Errorf("layer %q diff id: %w", f.Path, err)
	}
	switch types.MediaType(f.MediaType) {
	case types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer, types.DockerLayer:
	default:
		return fmt.Errorf("layer %q media type %q: %w", f.Path, f.MediaType, errdefs.ErrInvalidArgument)
	}
	st, err := os.Stat(f.Path)
	if err != nil {
		return fmt.Errorf("layer file: %w", errdefs.ErrInvalidArgument)
	}
	if !st.Mode().IsRegular() || st.Size() != f.Size {
		return fmt.Errorf("layer file %q is %d bytes, want a regular file of %d: %w",
			f.Path, st.Size(), f.Size, errdefs.ErrInvalidArgument)
	}
	return nil
}

// fileLayer is a v1.Layer backed by a LayerFile: the blob is streamed from
// disk on every Compressed call and never held in memory. The digests are
// trusted as given; the registry checks the compressed digest on upload.
type fileLayer struct {
	f              LayerFile
	digest, diffID v1.Hash
}

var _ v1.Layer = (*fileLayer)(nil)

func newFileLayer(f LayerFile) (*fileLayer, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	d, err := v1.NewHash(f.Digest)
	if err != nil {
		return nil, fmt.Errorf("layer digest %q: %w", f.Digest, errdefs.ErrInvalidArgument)
	}
	diffID, err := v1.NewHash(f.DiffID)
	if err != nil {
		return nil, fmt.Errorf("layer diff id %q: %w", f.DiffID, errdefs.ErrInvalidArgument)
	}
	return &fileLayer{f: f, digest: d, diffID: diffID}, nil
}

func (l *fileLayer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l *fileLayer) Size() (int64, error)     { return l.f.Size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) {
	return types.MediaType(l.f.MediaType), nil
}

// Descriptor gives mutate the layer's annotations (partial.Descriptor uses
// it when present), so they reach the manifest.
func (l *fileLayer) Descriptor() (*v1.Descriptor, error) {
	return &v1.Descriptor{
		MediaType:   types.MediaType(l.f.MediaType),
		Size:        l.f.Size,
		Digest:      l.digest,
		Annotations: maps.Clone(l.f.Annotations),
	}, nil
}

func (l *fileLayer) Compressed() (io.ReadCloser, error) {
	return os.Open(l.f.Path)
}

// Uncompressed decompresses the file according to its media type.
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.f.Path)
	if err != nil {
		return nil, err
	}
	switch types.MediaType(l.f.MediaType) {
	case types.OCIUncompressedLayer:
		return f, nil
	case types.OCILayerZStd:
		zr, err := zstd.NewReader(f)
		if err != nil {
			f.Close()
			return nil, err
		}
		return readCloser{Reader: zr, close: func() error { zr.Close(); return f.Close() }}, nil
	default: // gzip, including eStargz
		zr, err := gzip.NewReader(f)
		if err != nil {
			f.Close()
			return nil, err
		}
		return readCloser{Reader: zr, close: func() error { zr.Close(); return f.Close() }}, nil
	}
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }
