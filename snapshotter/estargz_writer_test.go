package snapshotter

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/stargz-snapshotter/estargz"
	kgzip "github.com/klauspost/compress/gzip"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// kgzipCompression is estargz's gzip compression with klauspost's writer,
// the one Encode's members are written with.
type kgzipCompression struct {
	*estargz.GzipCompressor
	*estargz.GzipDecompressor
	level int
}

func (c kgzipCompression) Writer(w io.Writer) (estargz.WriteFlushCloser, error) {
	return kgzip.NewWriterLevel(w, c.level)
}

// esgzTestTree makes an upper dir with what a layer can hold: files of no,
// one and several chunks (one exactly a chunk), directories, a symlink, a
// hard link, a long and a non-ASCII name, xattrs, a fifo.
func esgzTestTree(t *testing.T, upper string) {
	t.Helper()
	fill := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*int(seed+3)) ^ byte(i>>11) ^ seed
		}
		return b
	}
	files := map[string][]byte{
		"etc/empty":                  nil,
		"etc/app.conf":               []byte(strings.Repeat("key = value\n", 300)),
		"usr/bin/tool":               fill(700_000, 1),
		"usr/lib/big.so":             fill(9<<20+123, 2), // three chunks
		"usr/lib/exact.bin":          fill(4<<20, 3),     // one full chunk
		"usr/share/ünïcödé/файл.txt": []byte("non-ASCII name\n"),
		"var/" + strings.Repeat("long-directory-name/", 8) + "f": []byte("long name\n"),
	}
	for name, data := range files {
		p := filepath.Join(upper, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, data, 0o644))
	}
	require.NoError(t, os.Symlink("../lib/big.so", filepath.Join(upper, "usr/bin/link")))
	require.NoError(t, os.Link(filepath.Join(upper, "usr/bin/tool"), filepath.Join(upper, "usr/bin/tool2")))
	require.NoError(t, unix.Mkfifo(filepath.Join(upper, "var/fifo"), 0o600))
	require.NoError(t, unix.Setxattr(filepath.Join(upper, "etc/app.conf"), "user.envd.test", []byte("value"), 0))
	require.NoError(t, os.Mkdir(filepath.Join(upper, "empty-dir"), 0o700))
}

// TestEstargzSameAsBuild checks that Encode with whole-file digests writes,
// byte for byte, the blob estargz.Build writes with one part and the same
// gzip writer, so the layers the stargz snapshotter reads are those it
// always read (TestEstargzChunkedFileDigest checks what differs without
// whole-file digests); and that
// EncodeTwoPass writes the same layer as Encode of WriteTar's tar.
func TestEstargzSameAsBuild(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	upper := filepath.Join(dir, "upper")
	esgzTestTree(t, upper)
	spoolPath := spoolTree(t, upper, dir)

	for _, tc := range []struct {
		name        string
		prioritized []string
	}{
		{"no prioritized files", nil},
		{"prioritized", []string{"/usr/lib/big.so", "/usr/bin/tool2", "/not/there", "etc/app.conf"}},
		{"all prioritized missing", []string{"/not/there"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sf, err := os.Open(spoolPath)
			require.NoError(t, err)
			defer sf.Close()
			fi, err := sf.Stat()
			require.NoError(t, err)
			var missed []string
			blob, err := estargz.Build(io.NewSectionReader(sf, 0, fi.Size()),
				estargz.WithParallelism(1),
				estargz.WithCompression(kgzipCompression{
					GzipCompressor:   estargz.NewGzipCompressorWithLevel(DefaultGzipLevel),
					GzipDecompressor: &estargz.GzipDecompressor{},
					level:            DefaultGzipLevel,
				}),
				estargz.WithPrioritizedFiles(tc.prioritized),
				estargz.WithAllowPrioritizeNotFound(&missed),
			)
			require.NoError(t, err)
			want, err := io.ReadAll(blob)
			require.NoError(t, err)
			require.NoError(t, blob.Close())

			for _, workers := range []int{1, 2, 7} {
				layer, err := Encode(ctx, spoolPath, t.TempDir(), EncodeOptions{
					Compression: Estargz, Workers: workers, PrioritizedFiles: tc.prioritized, wholeFileDigests: true})
				require.NoError(t, err)
				got, err := os.ReadFile(layer.Path)
				require.NoError(t, err)
				require.True(t, bytes.Equal(want, got), "%d workers: blob differs from estargz.Build's (%d and %d bytes)", workers, len(want), len(got))
				assert.Equal(t, blob.DiffID(), layer.DiffID)
				assert.Equal(t, blob.TOCDigest().String(), layer.Annotations[estargz.TOCJSONDigestAnnotation])
				checkLayer(t, layer, Estargz, spoolPath)
			}
		})
	}

	t.Run("two-pass", func(t *testing.T) {
		work := t.TempDir()
		p, err := Prepare(ctx, upper, work, SpoolOptions{})
		require.NoError(t, err)
		defer p.Close()
		_, err = p.Frozen(ctx)
		require.NoError(t, err)
		tarPath := filepath.Join(work, "layer.tar")
		tf, err := os.Create(tarPath)
		require.NoError(t, err)
		require.NoError(t, p.WriteTar(ctx, tf))
		require.NoError(t, tf.Close())
		for _, c := range []Compression{Estargz, Zstd, Gzip} {
			t.Run(string(c), func(t *testing.T) {
				opts := EncodeOptions{Compression: c, PrioritizedFiles: []string{"/usr/bin/tool"}}
				want, err := Encode(ctx, tarPath, t.TempDir(), opts)
				require.NoError(t, err)
				got, err := EncodeTwoPass(ctx, p, t.TempDir(), opts)
				require.NoError(t, err)
				assert.Equal(t, want.Digest, got.Digest)
				assert.Equal(t, want.DiffID, got.DiffID)
				assert.Equal(t, want.UncompressedSize, got.UncompressedSize)
				assert.Equal(t, want.Annotations, got.Annotations)
				checkLayer(t, got, c, tarPath)
			})
		}
	})
}

// TestEncodeTwoPassNeedsPlan checks that EncodeTwoPass refuses a spool
// without a frozen pass, as WriteTar does.
func TestEncodeTwoPassNeedsPlan(t *testing.T) {
	ctx := context.Background()
	upper := filepath.Join(t.TempDir(), "upper")
	require.NoError(t, os.MkdirAll(upper, 0o755))
	p, err := Prepare(ctx, upper, t.TempDir(), SpoolOptions{})
	require.NoError(t, err)
	defer p.Close()
	_, err = EncodeTwoPass(ctx, p, t.TempDir(), EncodeOptions{})
	require.ErrorContains(t, err, "has no plan")
}
