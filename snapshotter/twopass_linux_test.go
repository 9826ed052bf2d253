package snapshotter

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// The two-pass suite: on a real overlay, make changes through the merged dir,
// Prepare, make a second set of changes through merged (what the instance
// does between Prepare and the freeze), then Frozen and WriteTar, and compare
// the tar byte for byte with what Spool writes right after Frozen.

type twoPassCase struct {
	name    string
	before  func(t *testing.T, merged string) // after twoPassBase, before Prepare
	between func(t *testing.T, merged string) // between Prepare and Frozen
	// wantRecopied is how many files Frozen must copy itself.
	wantRecopied int
	check        func(t *testing.T, env *twoPassEnv, st FrozenStats)
}

// twoPassBase are the changes every case starts from: upper-only files, a
// modified and a deleted base file, a hard link pair, a symlink, an xattr.
func twoPassBase(t *testing.T, m string) {
	writeFile(t, m, "home/user/a.txt", "alpha alpha alpha\n", 0o644)
	writeFile(t, m, "home/user/docs/b.txt", "bravo\n", 0o600)
	writeFile(t, m, "etc/hosts", "127.0.0.1 envd\n", 0o644)
	require.NoError(t, os.Remove(filepath.Join(m, "etc/config/b.conf")))
	writeFile(t, m, "usr/lib/libx.so", "shared\n", 0o755)
	require.NoError(t, os.Link(filepath.Join(m, "usr/lib/libx.so"), filepath.Join(m, "usr/lib/libx.so.1")))
	require.NoError(t, os.Symlink("libx.so", filepath.Join(m, "usr/lib/libx.so.2")))
	require.NoError(t, unix.Lsetxattr(filepath.Join(m, "home/user/docs/b.txt"), "user.tag", []byte("b"), 0))
	writeFile(t, m, "proc/ignored", "excluded\n", 0o644)
}

const bigSize = 200 << 20

var twoPassCases = []twoPassCase{
	{
		name:         "nothing changed",
		wantRecopied: 0,
	},
	{
		name: "rewritten in place with same size and mtime restored",
		between: func(t *testing.T, m string) {
			p := filepath.Join(m, "home/user/a.txt")
			var before unix.Stat_t
			require.NoError(t, unix.Lstat(p, &before))
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteAt([]byte("ALPHA"), 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
			stamp := fmt.Sprintf("@%d.%09d", before.Mtim.Sec, before.Mtim.Nsec)
			out, err := exec.Command("touch", "-m", "-d", stamp, p).CombinedOutput()
			require.NoError(t, err, string(out))
			var after unix.Stat_t
			require.NoError(t, unix.Lstat(p, &after))
			require.Equal(t, before.Mtim, after.Mtim, "mtime restored")
			require.Equal(t, before.Size, after.Size)
			require.NotEqual(t, before.Ctim, after.Ctim, "ctime moved")
		},
		wantRecopied: 1,
	},
	{
		name:         "truncated",
		between:      func(t *testing.T, m string) { require.NoError(t, os.Truncate(filepath.Join(m, "home/user/a.txt"), 5)) },
		wantRecopied: 1,
	},
	{
		name: "appended",
		between: func(t *testing.T, m string) {
			f, err := os.OpenFile(filepath.Join(m, "home/user/a.txt"), os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = f.WriteString("more\n")
			require.NoError(t, err)
			require.NoError(t, f.Close())
		},
		wantRecopied: 1,
	},
	{
		name: "deleted",
		between: func(t *testing.T, m string) {
			require.NoError(t, os.Remove(filepath.Join(m, "home/user/a.txt")))   // upper only: gone
			require.NoError(t, os.Remove(filepath.Join(m, "etc/config/a.conf"))) // in lower: whiteout
			require.NoError(t, os.Remove(filepath.Join(m, "usr/lib/libx.so")))   // one name of a pair
		},
		wantRecopied: 1, // libx.so.1: its link count changed
		check: func(t *testing.T, env *twoPassEnv, st FrozenStats) {
			assert.Equal(t, 2, st.Whiteouts)
		},
	},
	{
		name:         "new file",
		between:      func(t *testing.T, m string) { writeFile(t, m, "home/user/new.txt", "new\n", 0o644) },
		wantRecopied: 1,
	},
	{
		name: "file replaced by directory",
		between: func(t *testing.T, m string) {
			require.NoError(t, os.Remove(filepath.Join(m, "home/user/a.txt")))
			writeFile(t, m, "home/user/a.txt/inner", "inner\n", 0o644)
			require.NoError(t, os.Remove(filepath.Join(m, "filetodir"))) // a base file
			require.NoError(t, os.Mkdir(filepath.Join(m, "filetodir"), 0o711))
		},
		wantRecopied: 1,
	},
	{
		name: "directory replaced by file",
		between: func(t *testing.T, m string) {
			require.NoError(t, os.RemoveAll(filepath.Join(m, "home/user/docs")))
			writeFile(t, m, "home/user/docs", "now a file\n", 0o644)
		},
		wantRecopied: 1,
	},
	{
		name: "new hard link to an existing file",
		between: func(t *testing.T, m string) {
			// home/a-link sorts before home/user/a.txt: the new name is the
			// one the tar holds the content under.
			require.NoError(t, os.Link(filepath.Join(m, "home/user/a.txt"), filepath.Join(m, "home/a-link")))
		},
		wantRecopied: 1,
		check: func(t *testing.T, env *twoPassEnv, _ FrozenStats) {
			hdrs := tarHeaders(t, env.twoPassTar)
			assert.Equal(t, byte(tar.TypeReg), hdrs["home/a-link"].Typeflag)
			assert.Equal(t, byte(tar.TypeLink), hdrs["home/user/a.txt"].Typeflag)
			assert.Equal(t, "home/a-link", hdrs["home/user/a.txt"].Linkname)
		},
	},
	{
		name: "xattr added",
		between: func(t *testing.T, m string) {
			require.NoError(t, unix.Lsetxattr(filepath.Join(m, "home/user/a.txt"), "user.new", []byte("v"), 0))
			require.NoError(t, unix.Lsetxattr(filepath.Join(m, "home/user"), "user.dir", []byte("d"), 0))
		},
		wantRecopied: 1,
		check: func(t *testing.T, env *twoPassEnv, _ FrozenStats) {
			hdrs := tarHeaders(t, env.twoPassTar)
			assert.Equal(t, "v", hdrs["home/user/a.txt"].PAXRecords["SCHILY.xattr.user.new"])
			assert.Equal(t, "d", hdrs["home/user/"].PAXRecords["SCHILY.xattr.user.dir"])
		},
	},
	{
		name: "chmod only",
		between: func(t *testing.T, m string) {
			require.NoError(t, os.Chmod(filepath.Join(m, "home/user/a.txt"), 0o600))
			require.NoError(t, os.Chmod(filepath.Join(m, "home/user/docs"), 0o700))
		},
		wantRecopied: 1,
	},
	{
		name:   "200 MB file unchanged",
		before: func(t *testing.T, m string) { writeBig(t, filepath.Join(m, "home/user/big.bin"), bigSize) },
		between: func(t *testing.T, m string) {
			writeFile(t, m, "home/user/small.txt", "small\n", 0o644)
		},
		wantRecopied: 1,
		check: func(t *testing.T, env *twoPassEnv, st FrozenStats) {
			assert.Less(t, st.RecopiedBytes, int64(1<<10), "Frozen copied none of the big file")
			assert.GreaterOrEqual(t, env.prepared.Bytes, int64(bigSize))
			t.Logf("200 MB unchanged: Prepare %v, Frozen %v (recopied %d bytes), Spool %v",
				env.prepared.Duration, st.Duration, st.RecopiedBytes, env.spoolStats.Duration)
		},
	},
	{
		name:   "200 MB file changed",
		before: func(t *testing.T, m string) { writeBig(t, filepath.Join(m, "home/user/big.bin"), bigSize) },
		between: func(t *testing.T, m string) {
			f, err := os.OpenFile(filepath.Join(m, "home/user/big.bin"), os.O_WRONLY, 0)
			require.NoError(t, err)
			_, err = f.WriteAt([]byte("changed"), bigSize/2)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		},
		wantRecopied: 1,
		check: func(t *testing.T, env *twoPassEnv, st FrozenStats) {
			assert.Equal(t, int64(bigSize), st.RecopiedBytes)
			t.Logf("200 MB changed: Prepare %v, Frozen %v (recopied %d bytes), Spool %v",
				env.prepared.Duration, st.Duration, st.RecopiedBytes, env.spoolStats.Duration)
		},
	},
}

// twoPassEnv is one case's overlay and results.
type twoPassEnv struct {
	upper, merged, workDir string
	twoPassTar, spoolTar   string
	prepared               PrepareStats
	spoolStats             SpoolStats
}

func newTwoPassEnv(t *testing.T) *twoPassEnv {
	t.Helper()
	base := t.TempDir()
	lower, upper, work, merged := filepath.Join(base, "lower"), filepath.Join(base, "upper"),
		filepath.Join(base, "work"), filepath.Join(base, "merged")
	env := &twoPassEnv{
		upper: upper, merged: merged, workDir: filepath.Join(base, "spool"),
		twoPassTar: filepath.Join(base, "twopass.tar"), spoolTar: filepath.Join(base, "spool.tar"),
	}
	for _, d := range []string{lower, upper, work, merged, env.workDir} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	buildLower(t, lower)
	mountOverlay(t, lower, upper, work, merged) // unmounted by t.Cleanup
	return env
}

// frozenAndCompare runs Frozen and WriteTar, then Spool on the same upper
// dir, and checks that the two tars are identical.
func (env *twoPassEnv) frozenAndCompare(t *testing.T, p *TwoPass) FrozenStats {
	t.Helper()
	ctx := context.Background()
	st, err := p.Frozen(ctx)
	require.NoError(t, err)
	// Spool "at the moment of Frozen": nothing writes to merged any more.
	sf, err := os.Create(env.spoolTar)
	require.NoError(t, err)
	env.spoolStats, err = Spool(ctx, env.upper, sf, SpoolOptions{Excludes: testExcludes})
	require.NoError(t, err)
	require.NoError(t, sf.Close())

	// Anything may happen to the upper dir once thawed.
	require.NoError(t, os.WriteFile(filepath.Join(env.merged, "home/after-thaw"), []byte("late\n"), 0o644))

	tf, err := os.Create(env.twoPassTar)
	require.NoError(t, err)
	require.NoError(t, p.WriteTar(ctx, tf))
	require.NoError(t, tf.Close())

	if fileSHA256(t, env.spoolTar) != fileSHA256(t, env.twoPassTar) {
		assert.Equal(t, tarListing(t, env.spoolTar), tarListing(t, env.twoPassTar), "entries")
		t.Fatal("TwoPass tar differs from Spool's")
	}
	assert.Equal(t, env.spoolStats.Entries, st.Entries)
	assert.Equal(t, env.spoolStats.Whiteouts, st.Whiteouts)
	assert.Equal(t, env.spoolStats.OpaqueDirs, st.OpaqueDirs)
	assert.Equal(t, env.spoolStats.Bytes, st.Bytes)
	return st
}

func TestRootTwoPass(t *testing.T) {
	requireRoot(t)
	for _, tc := range twoPassCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := newTwoPassEnv(t)
			twoPassBase(t, env.merged)
			if tc.before != nil {
				tc.before(t, env.merged)
			}
			// Past TornMargin, so that Prepare's copies are trusted.
			time.Sleep(2 * TornMargin)

			p, err := Prepare(ctx, env.upper, env.workDir, SpoolOptions{Excludes: testExcludes})
			require.NoError(t, err)
			defer p.Close()
			env.prepared = p.Prepared()
			assert.Zero(t, env.prepared.Torn, "no copy torn")
			entries, err := os.ReadDir(env.workDir)
			require.NoError(t, err)
			assert.Empty(t, entries, "the data file is unlinked")

			if tc.between != nil {
				tc.between(t, env.merged)
			}
			st := env.frozenAndCompare(t, p)
			assert.Equal(t, tc.wantRecopied, st.RecopiedFiles, "files Frozen copied")
			if tc.check != nil {
				tc.check(t, env, st)
			}

			// WriteTar can be repeated; Close leaves nothing in workDir.
			h := sha256.New()
			require.NoError(t, p.WriteTar(ctx, h))
			assert.Equal(t, fileSHA256(t, env.spoolTar), hex.EncodeToString(h.Sum(nil)))
			require.NoError(t, p.Close())
			entries, err = os.ReadDir(env.workDir)
			require.NoError(t, err)
			assert.Empty(t, entries)
			assert.ErrorIs(t, p.WriteTar(ctx, io.Discard), errdefs.ErrFailedPrecondition)
		})
	}
}

// TestRootTwoPassRoundTripCases runs the round-trip suite's changes through
// TwoPass with nothing changed between the passes.
func TestRootTwoPassRoundTripCases(t *testing.T) {
	requireRoot(t)
	for _, tc := range roundTripCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := newTwoPassEnv(t)
			tc.change(t, env.merged)
			time.Sleep(2 * TornMargin)
			p, err := Prepare(context.Background(), env.upper, env.workDir, SpoolOptions{Excludes: testExcludes})
			require.NoError(t, err)
			defer p.Close()
			st := env.frozenAndCompare(t, p)
			assert.Zero(t, st.RecopiedFiles)
		})
	}
}

// TestRootTwoPassRecentChange checks the coarse-timestamp rule: a file
// changed less than TornMargin before Prepare read it is copied again by
// Frozen, even though nothing changed it since.
func TestRootTwoPassRecentChange(t *testing.T) {
	requireRoot(t)
	env := newTwoPassEnv(t)
	writeFile(t, env.merged, "home/user/fresh.txt", "just written\n", 0o644)
	p, err := Prepare(context.Background(), env.upper, env.workDir, SpoolOptions{Excludes: testExcludes})
	require.NoError(t, err)
	defer p.Close()
	assert.Equal(t, 1, p.Prepared().Torn)
	st := env.frozenAndCompare(t, p)
	assert.Equal(t, 1, st.RecopiedFiles)
	assert.Equal(t, int64(len("just written\n")), st.RecopiedBytes)
}

// TestRootTwoPassSharedMapping checks stores through a shared writable
// mapping: once a page is dirty its later stores do not update the file's
// times, unless writeback has write-protected it again. Prepare writes back
// before it copies, so a store after Prepare is seen.
func TestRootTwoPassSharedMapping(t *testing.T) {
	requireRoot(t)
	env := newTwoPassEnv(t)
	f, err := os.OpenFile(filepath.Join(env.merged, "home/mapped.bin"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, f.Truncate(1<<20))
	mem, err := unix.Mmap(int(f.Fd()), 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(mem)
	copy(mem[8192:], "first")
	time.Sleep(2 * TornMargin)

	p, err := Prepare(context.Background(), env.upper, env.workDir, SpoolOptions{Excludes: testExcludes})
	require.NoError(t, err)
	defer p.Close()
	require.Zero(t, p.Prepared().Torn)
	copy(mem[8192:], "second") // same page, no msync
	st := env.frozenAndCompare(t, p)
	assert.Equal(t, 1, st.RecopiedFiles)
}

// TestRootTwoPassConcurrentWriter rewrites files in place, size and mtime
// kept, while Prepare copies them; whatever Prepare keeps, the tar must be
// Spool's.
func TestRootTwoPassConcurrentWriter(t *testing.T) {
	requireRoot(t)
	env := newTwoPassEnv(t)
	names := []string{"home/w1.bin", "home/w2.bin", "home/w3.bin"}
	for _, n := range names {
		writeBig(t, filepath.Join(env.merged, n), 16<<20)
	}
	time.Sleep(2 * TornMargin)
	var (
		stop  atomic.Bool
		wg    sync.WaitGroup
		mtime = unix.NsecToTimespec(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	)
	for i, n := range names {
		wg.Go(func() {
			f, err := os.OpenFile(filepath.Join(env.merged, n), os.O_WRONLY, 0)
			if !assert.NoError(t, err) {
				return
			}
			defer f.Close()
			for k := 0; !stop.Load(); k++ {
				_, err := f.WriteAt([]byte{byte(k), byte(i)}, int64(k*4099)%(16<<20-2))
				assert.NoError(t, err)
				assert.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, f.Name(), []unix.Timespec{mtime, mtime}, 0))
			}
		})
	}
	p, err := Prepare(context.Background(), env.upper, env.workDir, SpoolOptions{Excludes: testExcludes})
	stop.Store(true)
	wg.Wait()
	require.NoError(t, err)
	defer p.Close()
	t.Logf("prepared while written to: %+v", p.Prepared())
	// One more write to each, so that every file has changed since Prepare
	// whether or not the writers got to run while it copied.
	for _, n := range names {
		f, err := os.OpenFile(filepath.Join(env.merged, n), os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte("last"), 12345)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, f.Name(), []unix.Timespec{mtime, mtime}, 0))
	}
	st := env.frozenAndCompare(t, p)
	assert.Equal(t, len(names), st.RecopiedFiles)
}

func TestTwoPassRefusesWorkDirInUpper(t *testing.T) {
	upper := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(upper, "spool"), 0o755))
	_, err := Prepare(context.Background(), upper, filepath.Join(upper, "spool"), SpoolOptions{})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	_, err = Prepare(context.Background(), upper, upper, SpoolOptions{})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}

// BenchmarkTwoPass1GiB compares the freeze window of Spool with that of
// TwoPass for an upper dir holding one unchanged 1 GiB file (and a few small
// ones): spool-ms is what Spool takes, prepare-ms what Prepare takes while
// the instance runs, and the loop times Frozen alone.
func BenchmarkTwoPass1GiB(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	upper, workDir := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	require.NoError(b, os.Mkdir(workDir, 0o755))
	for i := range 100 {
		p := filepath.Join(upper, fmt.Sprintf("etc/small-%03d", i))
		require.NoError(b, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(b, os.WriteFile(p, []byte(fmt.Sprintf("file %d\n", i)), 0o644))
	}
	writeBig(b, filepath.Join(upper, "home/user/big.bin"), 1<<30)
	time.Sleep(2 * TornMargin)

	sf, err := os.Create(filepath.Join(dir, "spool.tar"))
	require.NoError(b, err)
	spoolStats, err := Spool(ctx, upper, sf, SpoolOptions{})
	require.NoError(b, err)
	require.NoError(b, sf.Close())
	require.NoError(b, os.Remove(sf.Name()))

	p, err := Prepare(ctx, upper, workDir, SpoolOptions{})
	require.NoError(b, err)
	defer p.Close()
	var st FrozenStats
	for b.Loop() {
		st, err = p.Frozen(ctx)
		require.NoError(b, err)
	}
	require.Zero(b, st.RecopiedBytes)
	start := time.Now()
	require.NoError(b, p.WriteTar(ctx, io.Discard))
	b.ReportMetric(float64(spoolStats.Duration.Microseconds())/1000, "spool-ms")
	b.ReportMetric(float64(p.Prepared().Duration.Microseconds())/1000, "prepare-ms")
	b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "writetar-ms")
	b.ReportMetric(float64(st.Duration.Microseconds())/1000, "frozen-ms")
}

// writeBig writes size bytes of varied content to p.
func writeBig(t testing.TB, p string, size int64) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	f, err := os.Create(p)
	require.NoError(t, err)
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i*7 + i/251)
	}
	for i := int64(0); i < size; i += int64(len(block)) {
		block[0], block[1] = byte(i>>20), byte(i>>28) // no two MiB alike
		_, err := f.Write(block[:min(int64(len(block)), size-i)])
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
}

// tarListing lists a tar's entries with their content digests, to show how
// two tars differ.
func tarListing(t *testing.T, p string) []string {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	var out []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		d := sha256.New()
		_, err = io.Copy(d, tr)
		require.NoError(t, err)
		out = append(out, fmt.Sprintf("%s %c mode=%o %d:%d size=%d mtime=%d link=%q pax=%v sha=%x",
			h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.Size, h.ModTime.Unix(), h.Linkname, h.PAXRecords, d.Sum(nil)[:6]))
	}
}

func tarHeaders(t *testing.T, p string) map[string]*tar.Header {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		out[h.Name] = h
	}
}

// TestRootTwoPassRefusesRedirect checks that Prepare refuses, before any
// freeze, the upper dirs Spool refuses.
func TestRootTwoPassRefusesRedirect(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct{ xattr, on string }{
		{"trusted.overlay.redirect", "d"},
		{"trusted.overlay.metacopy", "d/f"},
	} {
		t.Run(tc.xattr, func(t *testing.T) {
			t.Parallel()
			upper := t.TempDir()
			writeFile(t, upper, "d/f", "x", 0o644)
			require.NoError(t, unix.Lsetxattr(filepath.Join(upper, tc.on), tc.xattr, []byte("/elsewhere"), 0))
			_, err := Prepare(context.Background(), upper, t.TempDir(), SpoolOptions{})
			assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		})
	}
}
