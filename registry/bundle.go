package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/envd-dev/envd/errdefs"
)

// Several manifests in one OCI image layout tar: a checkpoint's version
// image and the memory image whose subject it is travel together
// (envd/checkpoint's export and import). Each manifest keeps its bytes,
// so its digest, and its subject's digest, are the same on both sides.

// LayoutManifest is one manifest an export writes into a layout.
type LayoutManifest struct {
	Image Image // Repo and Digest of a stored manifest
	// Annotations go on its descriptor in index.json.
	Annotations map[string]string
	// Platform marks the descriptor linux/GOARCH: an image a runtime
	// pulls. An artifact (a memory image) has none.
	Platform bool
}

// ExportManifests writes a tar of an OCI image layout to w: oci-layout,
// index.json (one descriptor per manifest of ms, in order, with its
// artifactType) and each manifest's bytes, config and layer blobs as
// stored, each blob once. Blobs are read from the registry with their
// digests checked.
func (c *Client) ExportManifests(ctx context.Context, ms []LayoutManifest, w io.Writer) error {
	type entry struct {
		raw  []byte
		m    *v1.Manifest
		desc v1.Descriptor
		repo string
	}
	var entries []entry
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, lm := range ms {
		ref, err := c.digestRef(lm.Image.Repo, lm.Image.Digest)
		if err != nil {
			return err
		}
		got, err := remote.Get(ref, c.options(ctx)...)
		if err != nil {
			return translate(err, fmt.Sprintf("manifest %q", lm.Image.Ref()))
		}
		m, err := v1.ParseManifest(bytes.NewReader(got.Manifest))
		if err != nil {
			return fmt.Errorf("manifest %q: %w: %w", lm.Image.Ref(), errdefs.ErrInvalidArgument, err)
		}
		d := v1.Descriptor{MediaType: got.MediaType, Digest: got.Digest, Size: int64(len(got.Manifest)),
			ArtifactType: m.ArtifactType, Annotations: lm.Annotations}
		if lm.Platform {
			d.Platform = &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
		}
		index.Manifests = append(index.Manifests, d)
		entries = append(entries, entry{raw: got.Manifest, m: m, desc: d, repo: lm.Image.Repo})
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	file := func(name string, size int64, body io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		n, err := io.Copy(tw, body)
		if err == nil && n != size {
			err = fmt.Errorf("%s: %d bytes, want %d", name, n, size)
		}
		return err
	}
	blobName := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Mode: 0o755, Typeflag: tar.TypeDir}); err != nil {
			return err
		}
	}
	const layoutFile = `{"imageLayoutVersion": "1.0.0"}`
	if err := file("oci-layout", int64(len(layoutFile)), strings.NewReader(layoutFile)); err != nil {
		return err
	}
	if err := file("index.json", int64(len(indexJSON)), bytes.NewReader(indexJSON)); err != nil {
		return err
	}
	written := map[v1.Hash]bool{}
	for _, e := range entries {
		if !written[e.desc.Digest] {
			written[e.desc.Digest] = true
			if err := file(blobName(e.desc.Digest), int64(len(e.raw)), bytes.NewReader(e.raw)); err != nil {
				return err
			}
		}
		r, err := c.repository(e.repo)
		if err != nil {
			return err
		}
		for _, b := range append([]v1.Descriptor{e.m.Config}, e.m.Layers...) {
			if written[b.Digest] {
				continue
			}
			written[b.Digest] = true
			what := fmt.Sprintf("blob %s of %s@%s", b.Digest, e.repo, e.desc.Digest)
			l, err := remote.Layer(r.Digest(b.Digest.String()), c.options(ctx)...)
			if err != nil {
				return translate(err, what)
			}
			rc, err := l.Compressed() // checks the digest as it reads
			if err != nil {
				return translate(err, what)
			}
			err = file(blobName(b.Digest), b.Size, rc)
			rc.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
	}
	return tw.Close()
}

// Layout is an OCI image layout read from a tar (ReadLayout): every blob
// its manifests name is in Dir with the size and digest they give.
type Layout struct {
	Dir       string
	Manifests []LayoutEntry // index.json's, in order
}

// LayoutEntry is one manifest of a Layout.
type LayoutEntry struct {
	Descriptor v1.Descriptor // as index.json gives it (annotations included)
	Raw        []byte        // the manifest's bytes
	Manifest   *v1.Manifest
}

// Blob reads blob d of the layout whole (for small blobs: a memory
// image's index).
func (l *Layout) Blob(d v1.Hash) ([]byte, error) {
	return os.ReadFile(l.blobPath(d))
}

func (l *Layout) blobPath(d v1.Hash) string {
	return filepath.Join(l.Dir, "blobs", d.Algorithm, d.Hex)
}

// maxLayoutManifest bounds a manifest (and index.json) read into memory:
// distribution's own limit.
const maxLayoutManifest = 4 << 20

// errLayout is the error of an archive that is not a whole, uncorrupted
// layout: errdefs.ErrInvalidArgument with details reason "archive_corrupt".
func errLayout(format string, args ...any) error {
	return errdefs.WithDetails(fmt.Errorf("archive: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...),
		map[string]any{"reason": "archive_corrupt"})
}

// ReadLayout extracts the OCI image layout tar at src (plain or gzip) into
// dir (made empty by the caller) and checks it: index.json lists image
// manifests only (no nested index), and each manifest, config and layer
// blob they name is in the tar with the size its descriptor gives and the
// sha256 that names it. A truncated or corrupted archive is
// errdefs.ErrInvalidArgument (details reason "archive_corrupt"), before
// anything is pushed.
func ReadLayout(src, dir string) (*Layout, error) {
	if err := extractLayout(src, dir); err != nil {
		return nil, errLayout("%v", err)
	}
	l := &Layout{Dir: dir}
	raw, err := readBounded(filepath.Join(dir, "index.json"))
	if err != nil {
		return nil, errLayout("index.json: %v", err)
	}
	var idx v1.IndexManifest
	if err := json.Unmarshal(raw, &idx); err != nil {
		return nil, errLayout("index.json: %v", err)
	}
	if len(idx.Manifests) == 0 {
		return nil, errLayout("index.json lists no manifest")
	}
	checked := map[v1.Hash]bool{}
	for _, d := range idx.Manifests {
		if !d.MediaType.IsImage() {
			return nil, errLayout("index.json: %s is %q, not an image manifest", d.Digest, d.MediaType)
		}
		if err := l.checkBlob(d, checked); err != nil {
			return nil, err
		}
		raw, err := readBounded(l.blobPath(d.Digest))
		if err != nil {
			return nil, errLayout("manifest %s: %v", d.Digest, err)
		}
		m, err := v1.ParseManifest(bytes.NewReader(raw))
		if err != nil {
			return nil, errLayout("manifest %s: %v", d.Digest, err)
		}
		for _, b := range append([]v1.Descriptor{m.Config}, m.Layers...) {
			if err := l.checkBlob(b, checked); err != nil {
				return nil, err
			}
		}
		l.Manifests = append(l.Manifests, LayoutEntry{Descriptor: d, Raw: raw, Manifest: m})
	}
	return l, nil
}

// checkBlob says whether blob d is in the layout with d's size and digest.
func (l *Layout) checkBlob(d v1.Descriptor, checked map[v1.Hash]bool) error {
	if checked[d.Digest] {
		return nil
	}
	if d.Digest.Algorithm != "sha256" || len(d.Digest.Hex) != 64 {
		return errLayout("blob %q: not a sha256 digest", d.Digest)
	}
	f, err := os.Open(l.blobPath(d.Digest))
	if errors.Is(err, os.ErrNotExist) {
		return errLayout("blob %s is missing (a truncated archive?)", d.Digest)
	}
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return err
	}
	if n != d.Size {
		return errLayout("blob %s has %d bytes, its descriptor says %d", d.Digest, n, d.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != d.Digest.Hex {
		return errLayout("blob %s has digest sha256:%s", d.Digest, got)
	}
	checked[d.Digest] = true
	return nil
}

func readBounded(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxLayoutManifest+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxLayoutManifest {
		return nil, fmt.Errorf("larger than %d bytes", maxLayoutManifest)
	}
	return raw, nil
}

// MissingBytes is the bytes of the blobs of e that repo does not hold,
// plus e's manifest: what pushing e to repo adds to it.
func (c *Client) MissingBytes(ctx context.Context, repo string, e LayoutEntry) (int64, error) {
	r, _, hc, err := c.Remote(ctx, repo)
	if err != nil {
		return 0, err
	}
	n := int64(len(e.Raw))
	seen := map[v1.Hash]bool{}
	for _, b := range append([]v1.Descriptor{e.Manifest.Config}, e.Manifest.Layers...) {
		if seen[b.Digest] {
			continue
		}
		seen[b.Digest] = true
		err := headBlob(ctx, hc, r, b)
		switch {
		case errors.Is(err, errdefs.ErrNotFound):
			n += b.Size
		case err != nil:
			return 0, err
		}
	}
	return n, nil
}

// PushLayoutManifest pushes manifest e of l to repo as it is (the same
// bytes, so the same digest): the blobs the repository lacks, then the
// manifest by digest, then a verification of all of them. Image.Size is
// the manifest's, config's and layers' bytes; Layers is left empty.
func (c *Client) PushLayoutManifest(ctx context.Context, l *Layout, e LayoutEntry, repo string) (Image, error) {
	r, opts, hc, err := c.Remote(ctx, repo)
	if err != nil {
		return Image{}, err
	}
	out := Image{Repo: repo, Digest: e.Descriptor.Digest.String(), Size: int64(len(e.Raw))}
	for _, b := range append([]v1.Descriptor{e.Manifest.Config}, e.Manifest.Layers...) {
		out.Size += b.Size
		err := headBlob(ctx, hc, r, b)
		if err == nil {
			continue
		}
		if !errors.Is(err, errdefs.ErrNotFound) {
			return Image{}, err
		}
		bl := &layoutBlob{path: l.blobPath(b.Digest), desc: b}
		if err := remote.WriteLayer(r, bl, opts...); err != nil {
			return Image{}, translate(err, fmt.Sprintf("push blob %s to %q", b.Digest, repo))
		}
	}
	mt := e.Descriptor.MediaType
	if e.Manifest.MediaType != "" {
		mt = e.Manifest.MediaType
	}
	if err := remote.Put(r.Digest(out.Digest), rawTyped{raw: e.Raw, mt: mt}, opts...); err != nil {
		return Image{}, translate(err, fmt.Sprintf("push manifest %s to %q", out.Digest, repo))
	}
	if err := c.Verify(ctx, out); err != nil {
		return Image{}, fmt.Errorf("verify pushed manifest: %w", err)
	}
	return out, nil
}

// rawTyped is a manifest remote.Put sends as it is, with its media type.
type rawTyped struct {
	raw []byte
	mt  types.MediaType
}

func (m rawTyped) RawManifest() ([]byte, error)        { return m.raw, nil }
func (m rawTyped) MediaType() (types.MediaType, error) { return m.mt, nil }

// layoutBlob is a blob of a layout as a v1.Layer to upload: streamed
// from its file, already checked by ReadLayout.
type layoutBlob struct {
	path string
	desc v1.Descriptor
}

func (b *layoutBlob) Digest() (v1.Hash, error)            { return b.desc.Digest, nil }
func (b *layoutBlob) DiffID() (v1.Hash, error)            { return b.desc.Digest, nil }
func (b *layoutBlob) Size() (int64, error)                { return b.desc.Size, nil }
func (b *layoutBlob) MediaType() (types.MediaType, error) { return b.desc.MediaType, nil }
func (b *layoutBlob) Compressed() (io.ReadCloser, error)  { return os.Open(b.path) }
func (b *layoutBlob) Uncompressed() (io.ReadCloser, error) {
	return nil, fmt.Errorf("layout blob %s: uncompressed form not available: %w", b.desc.Digest, errdefs.ErrFailedPrecondition)
}
