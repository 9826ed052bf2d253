package snapshotter

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// TestRootTwoPassHeldChangedAfterThaw changes a held file (see "Held
// files") after the frozen pass, in every way that changes content: the
// encode and WriteTar must fail with ErrChangedAfterThaw rather than write
// what the file holds now; with CopyContent the same change leaves the
// layer what Spool wrote while frozen. A file replaced by another under the
// same name (rename over it, as editors and package managers do) leaves the
// held inode's content as it was, but its link count and ctime change, and
// nothing tells that apart from a write: it counts as a change too.
func TestRootTwoPassHeldChangedAfterThaw(t *testing.T) {
	requireRoot(t)
	const size = 3 << 20
	mtime := unix.NsecToTimespec(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	for _, tc := range []struct {
		name string
		// before runs before Prepare (the file is written already); it
		// returns the change made after the frozen pass.
		before  func(t *testing.T, p string) func(t *testing.T)
		changed bool
	}{
		{"another file written", func(t *testing.T, p string) func(t *testing.T) {
			return func(t *testing.T) {
				require.NoError(t, os.WriteFile(filepath.Join(filepath.Dir(p), "other.bin"), make([]byte, 1<<20), 0o644))
			}
		}, false},
		{"rewritten with size and mtime kept", func(t *testing.T, p string) func(t *testing.T) {
			return func(t *testing.T) {
				f, err := os.OpenFile(p, os.O_WRONLY, 0)
				require.NoError(t, err)
				_, err = f.WriteAt([]byte("after the thaw"), size/2)
				require.NoError(t, err)
				require.NoError(t, f.Close())
				require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{mtime, mtime}, 0))
			}
		}, true},
		{"truncated", func(t *testing.T, p string) func(t *testing.T) {
			return func(t *testing.T) { require.NoError(t, os.Truncate(p, 100)) }
		}, true},
		{"stored to through a mapping dirtied before Prepare", func(t *testing.T, p string) func(t *testing.T) {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			require.NoError(t, err)
			t.Cleanup(func() { f.Close() })
			mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			require.NoError(t, err)
			t.Cleanup(func() { unix.Munmap(mem) })
			copy(mem[8192:], "dirty before Prepare")
			return func(t *testing.T) { copy(mem[8192:], "stored after the thaw") } // same page, no msync
		}, true},
		{"replaced by rename", func(t *testing.T, p string) func(t *testing.T) {
			return func(t *testing.T) {
				require.NoError(t, os.WriteFile(p+".new", []byte("another file"), 0o644))
				require.NoError(t, os.Rename(p+".new", p))
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, copyContent := range []bool{false, true} {
				t.Run(fmt.Sprintf("CopyContent=%v", copyContent), func(t *testing.T) {
					ctx := context.Background()
					env := newTwoPassEnv(t)
					writeFile(t, env.merged, "home/small.txt", "small\n", 0o644)
					big := filepath.Join(env.merged, "home/big.bin")
					writeBig(t, big, size)
					change := tc.before(t, big)
					time.Sleep(2 * TornMargin)

					p, err := Prepare(ctx, env.upper, env.workDir, SpoolOptions{Excludes: testExcludes, CopyContent: copyContent})
					require.NoError(t, err)
					defer p.Close()
					st := p.Prepared()
					assert.Equal(t, 2, st.Files)
					assert.Zero(t, st.Torn)
					if copyContent {
						assert.Zero(t, st.Held)
					} else {
						assert.Equal(t, 1, st.Held)
						assert.Equal(t, int64(size), st.HeldBytes)
					}
					_, err = p.Frozen(ctx)
					require.NoError(t, err)
					spoolTar := filepath.Join(t.TempDir(), "frozen.tar")
					sf, err := os.Create(spoolTar)
					require.NoError(t, err)
					_, err = Spool(ctx, env.upper, sf, SpoolOptions{Excludes: testExcludes})
					require.NoError(t, err)
					require.NoError(t, sf.Close())

					change(t) // the instance runs again

					layer, err := EncodeTwoPass(ctx, p, t.TempDir(), EncodeOptions{Compression: Estargz})
					if tc.changed && !copyContent {
						require.ErrorIs(t, err, ErrChangedAfterThaw)
						require.ErrorIs(t, err, errdefs.ErrConflict)
						_, err = EncodeTwoPass(ctx, p, t.TempDir(), EncodeOptions{Compression: Zstd})
						require.ErrorIs(t, err, ErrChangedAfterThaw)
						require.ErrorIs(t, p.WriteTar(ctx, io.Discard), ErrChangedAfterThaw)
						return
					}
					require.NoError(t, err)
					checkLayer(t, layer, Estargz, spoolTar)
					zl, err := EncodeTwoPass(ctx, p, t.TempDir(), EncodeOptions{Compression: Zstd})
					require.NoError(t, err)
					checkLayer(t, zl, Zstd, spoolTar) // its DiffID is the frozen tar's digest
				})
			}
		})
	}
}

// TestEstargzHeldSameAsCopied checks that holding files changes nothing in
// the layer: files of one chunk, of several, of exactly one, hard links
// (held under the first name), small copied files, for eStargz, zstd and
// gzip, and with prioritized files.
func TestEstargzHeldSameAsCopied(t *testing.T) {
	ctx := context.Background()
	upper := filepath.Join(t.TempDir(), "upper")
	esgzTestTree(t, upper)
	time.Sleep(2 * TornMargin)
	encodeAll := func(copyContent bool) (PrepareStats, []Layer) {
		p, err := Prepare(ctx, upper, t.TempDir(), SpoolOptions{CopyContent: copyContent})
		require.NoError(t, err)
		defer p.Close()
		_, err = p.Frozen(ctx)
		require.NoError(t, err)
		var layers []Layer
		for _, c := range []Compression{Estargz, Zstd, Gzip} {
			l, err := EncodeTwoPass(ctx, p, t.TempDir(), EncodeOptions{Compression: c, PrioritizedFiles: []string{"/usr/lib/big.so"}})
			require.NoError(t, err)
			layers = append(layers, l)
		}
		return p.Prepared(), layers
	}
	heldStats, held := encodeAll(false)
	copiedStats, copied := encodeAll(true)
	// tool (and its hard link tool2, counted once), big.so, exact.bin.
	assert.Equal(t, 3, heldStats.Held)
	assert.Equal(t, int64(700_000+9<<20+123+4<<20), heldStats.HeldBytes)
	assert.Zero(t, copiedStats.Held)
	assert.Equal(t, copiedStats.Files, heldStats.Files)
	assert.Equal(t, copiedStats.Bytes, heldStats.Bytes)
	for i := range held {
		assert.Equal(t, copied[i].Digest, held[i].Digest)
		assert.Equal(t, copied[i].DiffID, held[i].DiffID)
		assert.Equal(t, copied[i].Annotations, held[i].Annotations)
	}
}

// TestTwoPassHeldLimit checks that at most maxHeld files are held and the
// rest copied, and that Close releases the held files; its many small
// files also keep many eStargz members in flight at once.
func TestTwoPassHeldLimit(t *testing.T) {
	ctx := context.Background()
	upper := filepath.Join(t.TempDir(), "upper")
	n := maxHeld + 5
	data := make([]byte, HeldMinSize)
	for i := range n {
		p := filepath.Join(upper, fmt.Sprintf("d%02d/f%04d", i%10, i))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		data[0], data[1] = byte(i), byte(i>>8)
		require.NoError(t, os.WriteFile(p, data, 0o644))
	}
	time.Sleep(2 * TornMargin)
	// heldFDs counts this process's open files in upper.
	heldFDs := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		require.NoError(t, err)
		n := 0
		for _, e := range ents {
			if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(target, upper+"/") {
				n++
			}
		}
		return n
	}
	p, err := Prepare(ctx, upper, t.TempDir(), SpoolOptions{})
	require.NoError(t, err)
	st := p.Prepared()
	assert.Equal(t, n, st.Files)
	assert.Equal(t, maxHeld, st.Held)
	assert.Equal(t, maxHeld, heldFDs())
	_, err = p.Frozen(ctx)
	require.NoError(t, err)
	layer, err := EncodeTwoPass(ctx, p, t.TempDir(), EncodeOptions{Compression: Zstd})
	require.NoError(t, err)
	// Many small members in flight at once in the eStargz encoder.
	esgz, err := EncodeTwoPass(ctx, p, t.TempDir(), EncodeOptions{Compression: Estargz})
	require.NoError(t, err)
	require.NoError(t, p.Close())
	assert.Zero(t, heldFDs(), "the held files are closed")

	spoolTar := filepath.Join(t.TempDir(), "spool.tar")
	f, err := os.Create(spoolTar)
	require.NoError(t, err)
	_, err = Spool(ctx, upper, f, SpoolOptions{})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	checkLayer(t, layer, Zstd, spoolTar)
	checkLayer(t, esgz, Estargz, spoolTar)
}
