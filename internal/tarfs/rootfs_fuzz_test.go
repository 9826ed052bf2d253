package tarfs_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/tarfs"
)

// tarOf builds a tar from headers; a regular file's body is its name.
func tarOf(hdrs ...*tar.Header) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		var body []byte
		if h.Typeflag == tar.TypeReg {
			body = []byte(h.Name)
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			panic(err)
		}
		_, _ = tw.Write(body)
	}
	_ = tw.Close()
	return b.Bytes()
}

func gzipped(b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return out.Bytes()
}

func rootfsSeeds() [][]byte {
	good := tarOf(
		&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "./bin/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "./bin/sh", Typeflag: tar.TypeReg, Mode: 0o755},
		&tar.Header{Name: "./bin/ash", Typeflag: tar.TypeLink, Linkname: "./bin/sh"},
		&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeSymlink, Linkname: "/bin/sh"},
		&tar.Header{Name: "dev/null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666},
		&tar.Header{Name: "dev/sda", Typeflag: tar.TypeBlock, Devmajor: 8, Mode: 0o660},
		&tar.Header{Name: "run/fifo", Typeflag: tar.TypeFifo, Mode: 0o600},
		&tar.Header{Name: "etc/x", Typeflag: tar.TypeReg, Mode: 0o644, PAXRecords: map[string]string{"SCHILY.xattr.user.a": "b"}},
	)
	return [][]byte{
		good,
		gzipped(good),
		tarOf(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg}),
		tarOf(&tar.Header{Name: "/abs/file", Typeflag: tar.TypeReg}),
		tarOf(&tar.Header{Name: "a", Typeflag: tar.TypeLink, Linkname: "../../etc/shadow"}),
		tarOf(&tar.Header{Name: "a", Typeflag: tar.TypeLink, Linkname: "later"}, &tar.Header{Name: "later", Typeflag: tar.TypeReg}),
		tarOf(&tar.Header{Name: "g", Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"comment": "x"}}),
		good[:700], // cut inside a body
		[]byte("not a tar at all"),
		{},
		{0x1f, 0x8b, 0, 0},
	}
}

// FuzzCopyRootfs feeds uploads to the image import's tar reader (what
// registry.WriteRootfsTar runs on an uploaded tar). It
// must never panic; a refusal is errdefs.ErrInvalidArgument; an accepted
// upload becomes a layer tar whose every entry stays under the root, whose
// hardlinks point at earlier files, and which holds no device nodes.
func FuzzCopyRootfs(f *testing.F) {
	for _, s := range rootfsSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, upload []byte) {
		var out bytes.Buffer
		tw := tar.NewWriter(&out)
		err := tarfs.CopyRootfs(tw, bytes.NewReader(upload), "upload.tar")
		if err == nil {
			err = tw.Close()
		}
		if err != nil {
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			return
		}
		tr := tar.NewReader(&out)
		files := map[string]bool{}
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, "the layer is a readable tar")
			name := strings.TrimSuffix(hdr.Name, "/")
			require.NotEmpty(t, name)
			require.Falsef(t, path.IsAbs(name), "entry %q is absolute", hdr.Name)
			require.Equalf(t, name, path.Clean(name), "entry %q is not clean", hdr.Name)
			require.NotEqualf(t, "..", strings.Split(name, "/")[0], "entry %q leaves the root", hdr.Name)
			switch hdr.Typeflag {
			case tar.TypeChar, tar.TypeBlock:
				t.Fatalf("entry %q is a device node", hdr.Name)
			case tar.TypeLink:
				require.Truef(t, files[hdr.Linkname], "hardlink %q to %q, not an earlier file", hdr.Name, hdr.Linkname)
			case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeFifo:
			default:
				t.Fatalf("entry %q has type %q", hdr.Name, hdr.Typeflag)
			}
			if hdr.Typeflag != tar.TypeDir {
				files[name] = true
			}
			n, err := io.Copy(io.Discard, tr)
			require.NoError(t, err)
			assert.Equal(t, hdr.Size, n)
		}
	})
}

// The seeds' outcomes, as a plain test: what an admin importing them sees.
func TestCopyRootfsRefusesEscapesAndDropsDevices(t *testing.T) {
	seeds := rootfsSeeds()
	write := func(b []byte) (*tar.Reader, error) {
		var out bytes.Buffer
		tw := tar.NewWriter(&out)
		err := tarfs.CopyRootfs(tw, bytes.NewReader(b), "u.tar")
		if err == nil {
			err = tw.Close()
		}
		return tar.NewReader(&out), err
	}
	for _, b := range [][]byte{seeds[0], seeds[1]} {
		tr, err := write(b)
		require.NoError(t, err)
		var names []string
		for {
			hdr, err := tr.Next()
			if err != nil {
				break
			}
			names = append(names, hdr.Name)
		}
		assert.Equal(t, []string{"bin/", "bin/sh", "bin/ash", "bin/busybox", "run/fifo", "etc/x"}, names)
	}
	// A leading "/" is only made relative.
	tr, err := write(seeds[3])
	require.NoError(t, err)
	hdr, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, "abs/file", hdr.Name)
	for i, b := range seeds[2:] {
		if i+2 == 3 {
			continue
		}
		_, err := write(b)
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "seed %d", i+2)
	}
}
