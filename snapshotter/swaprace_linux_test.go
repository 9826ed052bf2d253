package snapshotter

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The hostile-tenant suite of the first pass: while the instance runs, its
// processes rename entries of the upper dir under the walker's feet. Nothing
// outside the upper dir may be read or written to the layer, no open may
// block, and the frozen pass must still be the faithful layer.

// swapNames are the entries the swapper exchanges: one directory and three
// symlinks out of the upper dir. Whichever of them holds the directory, its
// children may appear under that name.
var swapNames = []string{"home/swap", "home/swap-root", "home/swap-out", "home/swap-proc"}

// swapChildren are the directory's entries, relative to it (overlay marks
// the directory opaque once renamed).
var swapChildren = []string{"inner.txt", "sub/", "sub/deep.txt", "pipe", ".wh..wh..opq"}

// flipNames are a regular file and a fifo the swapper exchanges.
var flipNames = []string{"home/flip", "home/flip-fifo"}

// allowedInLayer reports whether a tar entry may come from the upper dir the
// swap test builds.
func allowedInLayer(name string) bool {
	switch name {
	case "home/", "home/after-thaw", "home/flip", "home/flip-fifo":
		return true
	}
	for _, n := range swapNames {
		if name == n || name == n+"/" {
			return true
		}
		for _, c := range swapChildren {
			if name == n+"/"+c {
				return true
			}
		}
	}
	return false
}

// swapper exchanges entries of merged (as the tenant's processes would)
// until stopped; paused, it leaves the tree as it is.
type swapper struct {
	merged string
	pause  sync.Mutex
	stop   atomic.Bool
	swaps  atomic.Int64
	done   chan struct{}
}

func startSwapper(t *testing.T, merged string) *swapper {
	s := &swapper{merged: merged, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for k := 0; !s.stop.Load(); k++ {
			s.pause.Lock()
			a := filepath.Join(merged, swapNames[0])
			b := filepath.Join(merged, swapNames[1+k%3])
			if k%2 == 1 {
				a, b = filepath.Join(merged, flipNames[0]), filepath.Join(merged, flipNames[1])
			}
			err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
			s.pause.Unlock()
			if !assert.NoError(t, err, "exchange %s and %s", a, b) {
				return
			}
			s.swaps.Add(1)
		}
	}()
	t.Cleanup(s.halt)
	return s
}

func (s *swapper) halt() {
	s.stop.Store(true)
	<-s.done
}

// outsideDir is a directory out of the upper dir, with a secret file: its
// access times (relatime, both set long before their mtimes) show whether
// anything listed the directory or read the file.
type outsideDir struct {
	dir, secret string
}

var pastAtime = unix.NsecToTimespec(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())

func newOutsideDir(t *testing.T) outsideDir {
	t.Helper()
	o := outsideDir{dir: filepath.Join(t.TempDir(), "outside")}
	o.secret = filepath.Join(o.dir, "secret.txt")
	require.NoError(t, os.Mkdir(o.dir, 0o755))
	require.NoError(t, os.WriteFile(o.secret, []byte("host secret, never in a layer\n"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(o.dir, "subdir"), 0o755))
	require.NoError(t, unix.Mkfifo(filepath.Join(o.dir, "fifo"), 0o600))
	o.resetAtimes(t)
	// The check must be able to fail: reading a control file and listing a
	// control dir set up the same way must move their access times here.
	control := filepath.Join(t.TempDir(), "control")
	require.NoError(t, os.Mkdir(control, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(control, "f"), []byte("x"), 0o600))
	for _, p := range []string{control, filepath.Join(control, "f")} {
		require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{pastAtime, {Nsec: unix.UTIME_OMIT}}, 0))
	}
	_, err := os.ReadFile(filepath.Join(control, "f"))
	require.NoError(t, err)
	_, err = os.ReadDir(control)
	require.NoError(t, err)
	for _, p := range []string{control, filepath.Join(control, "f")} {
		require.NotEqual(t, pastAtime, atime(t, p), "reading %s did not move its atime: this filesystem cannot show reads", p)
	}
	return o
}

func (o outsideDir) resetAtimes(t *testing.T) {
	for _, p := range []string{o.dir, o.secret, filepath.Join(o.dir, "subdir")} {
		require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{pastAtime, {Nsec: unix.UTIME_OMIT}}, 0))
	}
}

func (o outsideDir) assertUntouched(t *testing.T) {
	t.Helper()
	for _, p := range []string{o.dir, o.secret, filepath.Join(o.dir, "subdir")} {
		assert.Equal(t, pastAtime, atime(t, p), "%s was read by a walker", p)
	}
}

func atime(t *testing.T, p string) unix.Timespec {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(p, &st))
	return st.Atim
}

// buildSwapTree makes the entries the swapper exchanges, through merged.
func buildSwapTree(t *testing.T, merged, outside string) {
	t.Helper()
	writeFile(t, merged, "home/swap/inner.txt", "inside the upper dir\n", 0o644)
	writeFile(t, merged, "home/swap/sub/deep.txt", "deeper\n", 0o644)
	require.NoError(t, unix.Mkfifo(filepath.Join(merged, "home/swap/pipe"), 0o644))
	for name, target := range map[string]string{"home/swap-root": "/", "home/swap-out": outside, "home/swap-proc": "/proc/self/root"} {
		require.NoError(t, os.Symlink(target, filepath.Join(merged, name)))
	}
	writeFile(t, merged, "home/flip", "a regular file that becomes a fifo\n", 0o644)
	require.NoError(t, unix.Mkfifo(filepath.Join(merged, "home/flip-fifo"), 0o644))
}

// tarNames lists the entries of a tar, as far as it can be read.
func tarNames(r io.Reader) []string {
	var out []string
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err != nil {
			return out
		}
		out = append(out, h.Name)
	}
}

// withDeadline runs fn and crashes the test binary if it does not return in
// time: a walker that opened a fifo for reading would wait forever, and the
// crash's stacks show where.
func withDeadline(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	timer := time.AfterFunc(d, func() { panic(fmt.Sprintf("%s did not return in %s: blocked on a fifo?", what, d)) })
	defer timer.Stop()
	fn()
}

// TestRootSwapRace races saves against a tenant that exchanges a directory
// of the upper dir with symlinks to "/", to a directory outside and to
// /proc/self/root, and a regular file with a fifo.
func TestRootSwapRace(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	env := newTwoPassEnv(t)
	out := newOutsideDir(t)
	buildSwapTree(t, env.merged, out.dir)
	sw := startSwapper(t, env.merged)

	const rounds = 30
	var spoolErrs int
	for round := range rounds {
		// The one-pass Spool is for stopped instances, but must not escape
		// either: it may fail on a tree changing under it, never read out.
		var buf bytes.Buffer
		withDeadline(t, time.Minute, "Spool", func() {
			if _, err := Spool(ctx, env.upper, &buf, SpoolOptions{Excludes: testExcludes}); err != nil {
				spoolErrs++
			}
		})
		for _, n := range tarNames(&buf) {
			assert.True(t, allowedInLayer(n), "round %d: Spool wrote %q, not from the upper dir", round, n)
		}

		var p *TwoPass
		withDeadline(t, time.Minute, "Prepare", func() {
			var err error
			p, err = Prepare(ctx, env.upper, env.workDir, SpoolOptions{Excludes: testExcludes})
			require.NoError(t, err)
		})
		// The freeze: the tenant stops wherever it is.
		sw.pause.Lock()
		var st FrozenStats
		withDeadline(t, time.Minute, "Frozen", func() { st = env.frozenAndCompare(t, p) })
		sw.pause.Unlock()
		require.NoError(t, p.Close())
		f, err := os.Open(env.twoPassTar)
		require.NoError(t, err)
		names := tarNames(f)
		f.Close()
		assert.Equal(t, st.Entries, len(names))
		for _, n := range names {
			assert.True(t, allowedInLayer(n), "round %d: the layer has %q, not from the upper dir", round, n)
		}
	}
	sw.halt()
	t.Logf("%d exchanges during %d rounds; %d one-pass spools failed on the changing tree", sw.swaps.Load(), rounds, spoolErrs)
	require.Greater(t, sw.swaps.Load(), int64(rounds), "the swapper must have raced the walkers")
	out.assertUntouched(t)

	// The last round's layer, unpacked on the lower tree, is the tree the
	// tenant left (the swapper is stopped, so it is the final one).
	// frozenAndCompare rewrites home/after-thaw once the layer is frozen: a
	// copy left by the rounds would be in the layer with the mtime it had
	// when frozen and in the tree with the rewrite's (a second later in one
	// CI run), so it goes before the pass and again after it.
	afterThaw := filepath.Join(env.merged, "home/after-thaw")
	require.NoError(t, os.Remove(afterThaw))
	p, err := Prepare(ctx, env.upper, env.workDir, SpoolOptions{Excludes: testExcludes})
	require.NoError(t, err)
	defer p.Close()
	env.frozenAndCompare(t, p)
	require.NoError(t, os.Remove(afterThaw)) // written after the layer was made
	assertLayerIsTree(t, env, env.twoPassTar)
	out.assertUntouched(t)
}

// assertLayerIsTree unpacks the layer tar on a copy of the lower tree and
// compares it with the merged tree, as the round-trip suite does.
func assertLayerIsTree(t *testing.T, env *twoPassEnv, tarPath string) {
	t.Helper()
	lower := filepath.Join(filepath.Dir(env.upper), "lower")
	mergedTree := snapshotTree(t, env.merged)
	lowerTree := snapshotTree(t, lower)
	want := map[string]fileInfo{}
	for p, fi := range mergedTree {
		if !isExcluded(p) {
			want[p] = fi
		}
	}
	for p, fi := range lowerTree {
		if isExcluded(p) {
			want[p] = fi
		}
	}
	root := filepath.Join(t.TempDir(), "applied")
	cmdOut, err := exec.Command("cp", "-a", lower, root).CombinedOutput()
	require.NoError(t, err, string(cmdOut))
	f, err := os.Open(tarPath)
	require.NoError(t, err)
	defer f.Close()
	_, err = archive.Apply(context.Background(), root, f)
	require.NoError(t, err)
	compareTrees(t, want, snapshotTree(t, root))
}

// TestRootGrowingFile appends to a file while it is spooled: the header's
// size is the one lstat saw and the content is exactly that many bytes, the
// file's first ones, so the tar stays readable; the frozen pass is faithful.
func TestRootGrowingFile(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	env := newTwoPassEnv(t)
	writeBig(t, filepath.Join(env.merged, "home/log.bin"), 32<<20)
	var (
		stop atomic.Bool
		wg   sync.WaitGroup
	)
	wg.Go(func() {
		f, err := os.OpenFile(filepath.Join(env.merged, "home/log.bin"), os.O_WRONLY|os.O_APPEND, 0)
		if !assert.NoError(t, err) {
			return
		}
		defer f.Close()
		line := bytes.Repeat([]byte("appended while spooled\n"), 2048)
		for !stop.Load() {
			_, err := f.Write(line)
			if !assert.NoError(t, err) {
				return
			}
			time.Sleep(time.Millisecond) // grows by tens of MB/s, not by the disk's speed
		}
	})
	defer func() { stop.Store(true); wg.Wait() }()

	checkPrefix := func(t *testing.T, tarPath string) {
		f, err := os.Open(tarPath)
		require.NoError(t, err)
		defer f.Close()
		tr := tar.NewReader(f)
		found := false
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, "the tar must stay readable past the growing file")
			if h.Name != "home/log.bin" {
				continue
			}
			found = true
			content, err := io.ReadAll(tr)
			require.NoError(t, err)
			require.Equal(t, h.Size, int64(len(content)))
			g, err := os.Open(filepath.Join(env.upper, "home/log.bin"))
			require.NoError(t, err)
			head := make([]byte, h.Size)
			_, err = io.ReadFull(g, head)
			g.Close()
			require.NoError(t, err)
			assert.True(t, bytes.Equal(head, content), "the layer holds the file's first %d bytes", h.Size)
		}
		require.True(t, found, "home/log.bin in the layer")
	}

	spoolTar := filepath.Join(t.TempDir(), "spool.tar")
	sf, err := os.Create(spoolTar)
	require.NoError(t, err)
	st, err := Spool(ctx, env.upper, sf, SpoolOptions{Excludes: testExcludes})
	require.NoError(t, err)
	require.NoError(t, sf.Close())
	fi, err := os.Stat(spoolTar)
	require.NoError(t, err)
	assert.Equal(t, fi.Size(), st.Bytes)
	checkPrefix(t, spoolTar)

	p, err := Prepare(ctx, env.upper, env.workDir, SpoolOptions{Excludes: testExcludes})
	require.NoError(t, err)
	defer p.Close()
	assert.Positive(t, p.Prepared().Torn, "a file growing while copied is not trusted")
	stop.Store(true) // the freeze
	wg.Wait()
	env.frozenAndCompare(t, p)
	checkPrefix(t, env.twoPassTar)
}

// TestRootFifoNeverOpened puts fifos where regular files were, between the
// passes and before Spool: nothing blocks, and the layer has them as fifos.
func TestRootFifoNeverOpened(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	env := newTwoPassEnv(t)
	writeFile(t, env.merged, "home/data.txt", "soon a fifo\n", 0o644)
	writeFile(t, env.merged, "etc/hosts", "127.0.0.1 envd\n", 0o644)
	time.Sleep(2 * TornMargin)
	p, err := Prepare(ctx, env.upper, env.workDir, SpoolOptions{Excludes: testExcludes})
	require.NoError(t, err)
	defer p.Close()
	for _, n := range []string{"home/data.txt", "etc/hosts"} {
		require.NoError(t, os.Remove(filepath.Join(env.merged, n)))
		require.NoError(t, unix.Mkfifo(filepath.Join(env.merged, n), 0o644))
	}
	withDeadline(t, time.Minute, "Frozen and Spool", func() { env.frozenAndCompare(t, p) })
	require.NoError(t, os.Remove(filepath.Join(env.merged, "home/after-thaw"))) // written after the layer was made
	h := tarHeaders(t, env.twoPassTar)
	for _, n := range []string{"home/data.txt", "etc/hosts"} {
		if assert.Contains(t, h, n) {
			assert.Equal(t, byte(tar.TypeFifo), h[n].Typeflag, n)
		}
	}
	assertLayerIsTree(t, env, env.twoPassTar)
}

// TestSwapRaceAllowList checks the allow-list of the swap test itself, so
// that it cannot pass by allowing everything.
func TestSwapRaceAllowList(t *testing.T) {
	for _, n := range []string{"home/swap/etc/", "home/swap-root/etc/passwd", "home/swap/secret.txt", "home/swap-proc/proc/",
		"etc/", "home/swap/sub/other"} {
		assert.False(t, allowedInLayer(n), n)
	}
	for _, n := range swapNames {
		assert.True(t, allowedInLayer(path.Join(n, "inner.txt")))
		assert.True(t, allowedInLayer(n+"/"))
	}
	assert.True(t, strings.HasPrefix(swapNames[0], "home/"))
}
