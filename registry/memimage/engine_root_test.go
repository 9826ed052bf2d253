package memimage

import (
	archive "archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runcoptions "github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/internal/gvisortest"
)

// The root tests here check the package against the engine it is for:
// gVisor's runsc under a private containerd, driven through runc's shim as
// runtime/sandbox's tests do (docs/gvisor.md). They fail rather than skip
// without root or runsc: CI runs as root after scripts/setup.sh.

const (
	imageName     = "docker.io/envd/memimage-test:latest"
	ctrdNamespace = "memimage-test"
)

// memhogSource holds MiB mebibytes of random bytes and a counter, both in
// its memory only. It prints the counter every 100 ms; on SIGUSR1 it
// rewrites a contiguous tenth of its bytes and prints "changed"; on SIGUSR2
// it prints "sum " and the SHA-256 of all its bytes.
const memhogSource = `package main

import (
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

func main() {
	mib, _ := strconv.Atoi(os.Args[1])
	mem := make([]byte, mib<<20)
	rand.Read(mem)
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	tick := time.NewTicker(100 * time.Millisecond)
	for i := 1; ; {
		select {
		case s := <-sig:
			if s == syscall.SIGUSR1 {
				rand.Read(mem[len(mem)/3 : len(mem)/3+len(mem)/10])
				fmt.Println("changed")
			} else {
				fmt.Printf("sum %x\n", sha256.Sum256(mem))
			}
		case <-tick.C:
			fmt.Println(i)
			i++
		}
	}
}
`

// buildMemhog compiles memhogSource into a static binary.
func buildMemhog(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(memhogSource), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module memhog\n\ngo 1.22\n"), 0o644))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", "memhog", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build memhog: %s", out)
	b, err := os.ReadFile(filepath.Join(dir, "memhog"))
	require.NoError(t, err)
	return b
}

// imageArchive is a docker-archive tar of a one-layer image holding
// /bin/memhog.
func imageArchive(t *testing.T, memhog []byte) []byte {
	t.Helper()
	var layer bytes.Buffer
	tw := archive.NewWriter(&layer)
	for _, d := range []string{"bin", "etc", "proc", "sys", "dev", "tmp"} {
		require.NoError(t, tw.WriteHeader(&archive.Header{Typeflag: archive.TypeDir, Name: d + "/", Mode: 0o755}))
	}
	require.NoError(t, tw.WriteHeader(&archive.Header{Typeflag: archive.TypeReg, Name: "bin/memhog", Mode: 0o755, Size: int64(len(memhog))}))
	_, err := tw.Write(memhog)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layer.Bytes())), nil
	})
	require.NoError(t, err)
	img, err := mutate.AppendLayers(empty.Image, l)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	cf.Config = v1.Config{Env: []string{"PATH=/bin"}, WorkingDir: "/"}
	img, err = mutate.ConfigFile(img, cf)
	require.NoError(t, err)
	tag, err := name.NewTag(imageName)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, tarball.Write(tag, img, &out))
	return out.Bytes()
}

// run makes a container of args on a fresh snapshot, runsc as its OCI
// runtime through runc's shim, and a task writing to a lines follower; with
// restoreFrom set the task restores that image directory.
func run(t *testing.T, n *gvisortest.Node, id, restoreFrom string, args ...string) (client.Task, *lines) {
	t.Helper()
	ctx := context.Background()
	ctr := n.NewContainer(t, id, args...)
	out, w := newLines(t)
	var topts []client.NewTaskOpts
	if restoreFrom != "" {
		topts = append(topts, client.WithRestoreImagePath(restoreFrom))
	}
	task, err := ctr.NewTask(ctx, cio.NewCreator(cio.WithStreams(nil, w, io.Discard)), topts...)
	require.NoError(t, err)
	require.NoError(t, task.Start(ctx))
	return task, out
}

// lines follows a task's output: numbers on one channel, other lines on
// another.
type lines struct {
	nums  chan int
	words chan string
	w     *io.PipeWriter
}

func newLines(t *testing.T) (*lines, *io.PipeWriter) {
	r, w := io.Pipe()
	l := &lines{nums: make(chan int, 4096), words: make(chan string, 64), w: w}
	go func() {
		defer close(l.nums)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			s := strings.TrimSpace(sc.Text())
			if v, err := strconv.Atoi(s); err == nil {
				l.nums <- v
			} else {
				l.words <- s
			}
		}
	}()
	t.Cleanup(func() { _ = w.Close() })
	return l, w
}

// next waits for the next number.
func (l *lines) next(t *testing.T) int {
	t.Helper()
	select {
	case v, ok := <-l.nums:
		require.True(t, ok, "output closed")
		return v
	case <-time.After(2 * time.Minute):
		t.Fatal("no number printed for two minutes")
		return 0
	}
}

// word waits for the next line with a prefix, skipping numbers.
func (l *lines) word(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case s := <-l.words:
			if strings.HasPrefix(s, prefix) {
				return s
			}
		case <-timeout:
			t.Fatalf("no %q line for two minutes", prefix)
		}
	}
}

// drain returns the last number printed, once the task is deleted (its
// output is then all copied).
func (l *lines) drain(t *testing.T, seen int) int {
	t.Helper()
	require.NoError(t, l.w.Close())
	for {
		select {
		case v, ok := <-l.nums:
			if !ok {
				return seen
			}
			seen = v
		case <-time.After(time.Minute):
			t.Fatal("output not closed a minute after the task exited")
		}
	}
}

// checkpoint writes the task's image into a new directory; with exit the
// task stops (runc's shim passes --leave-running otherwise).
func checkpoint(t *testing.T, task client.Task, exit bool) (string, time.Duration) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "image")
	start := time.Now()
	_, err := task.Checkpoint(context.Background(), client.WithCheckpointImagePath(dir),
		func(r *client.CheckpointTaskInfo) error {
			r.Options.(*runcoptions.CheckpointOptions).Exit = exit
			return nil
		})
	require.NoError(t, err)
	return dir, time.Since(start)
}

func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var n int64
	for _, e := range entries {
		fi, err := e.Info()
		require.NoError(t, err)
		t.Logf("  %s: %d bytes", e.Name(), fi.Size())
		n += fi.Size()
	}
	return n
}

// A program holding a counter and 64 MiB in memory is checkpointed under
// gVisor, the image pushed and its directory removed, pulled back from the
// registry and restored on a second private containerd: the counter goes
// on, and the memory is the same.
func TestRootCheckpointThroughRegistryRestoresOnAnotherNode(t *testing.T) {
	runsc := gvisortest.RequireRunsc(t)
	ctx := context.Background()
	archive := imageArchive(t, buildMemhog(t))
	s, _ := startStore(t)

	a := gvisortest.StartNode(t, runsc, ctrdNamespace, archive)
	task, out := run(t, a, "hog", "", "/bin/memhog", "64")
	exitCh, err := task.Wait(ctx)
	require.NoError(t, err)
	seen := 0
	for seen < 5 {
		seen = out.next(t)
	}
	require.NoError(t, task.Kill(ctx, syscall.SIGUSR2))
	sumBefore := out.word(t, "sum ")

	dir, took := checkpoint(t, task, true)
	t.Logf("checkpoint: %v, %d bytes", took, dirBytes(t, dir))
	select {
	case <-exitCh:
	case <-time.After(time.Minute):
		t.Fatal("task still running a minute after a checkpoint with exit")
	}
	_, err = task.Delete(ctx)
	require.NoError(t, err)
	stopped := out.drain(t, seen)

	start := time.Now()
	res, err := s.Push(ctx, PushRequest{Dir: dir, Repo: repo,
		Annotations: map[string]string{"dev.envd.memory.engine": "runsc"}})
	require.NoError(t, err)
	t.Logf("push: %v, %d bytes uploaded, usage %+v", time.Since(start), res.Uploaded, res.Artifact.Usage())
	require.NoError(t, os.RemoveAll(dir))

	got, err := s.Get(ctx, repo, res.Artifact.Digest)
	require.NoError(t, err)
	pulled := filepath.Join(t.TempDir(), "pulled")
	start = time.Now()
	require.NoError(t, s.Pull(ctx, got, pulled))
	t.Logf("pull: %v", time.Since(start))

	b := gvisortest.StartNode(t, runsc, ctrdNamespace, archive)
	start = time.Now()
	task2, out2 := run(t, b, "hog-restored", pulled, "/bin/memhog", "64")
	first := out2.next(t)
	t.Logf("restore to first line: %v", time.Since(start))
	assert.Equal(t, stopped+1, first, "the restored program goes on from %d", stopped)
	require.NoError(t, task2.Kill(ctx, syscall.SIGUSR2))
	assert.Equal(t, sumBefore, out2.word(t, "sum "), "the restored memory is the checkpointed memory")
}

// A program holding 128 MiB is checkpointed (left running), a contiguous
// tenth of its memory rewritten, and checkpointed again: the second push
// uploads at most a quarter of the first's bytes (issue 25's target). The
// test also prints what other chunk sizes would have stored, the
// measurement behind DefaultChunkSize.
func TestRootSecondCheckpointStoresOnlyWhatChanged(t *testing.T) {
	runsc := gvisortest.RequireRunsc(t)
	ctx := context.Background()
	archive := imageArchive(t, buildMemhog(t))
	s, _ := startStore(t)
	n := gvisortest.StartNode(t, runsc, ctrdNamespace, archive)

	task, out := run(t, n, "hog", "", "/bin/memhog", "128")
	for seen := 0; seen < 3; {
		seen = out.next(t)
	}
	dir1, took := checkpoint(t, task, false)
	t.Logf("first checkpoint: %v, %d bytes", took, dirBytes(t, dir1))
	first, err := s.Push(ctx, PushRequest{Dir: dir1, Repo: repo})
	require.NoError(t, err)

	// Still running: it goes on counting and answers the signal.
	out.next(t)
	require.NoError(t, task.Kill(ctx, syscall.SIGUSR1))
	out.word(t, "changed")
	dir2, took := checkpoint(t, task, false)
	t.Logf("second checkpoint: %v, %d bytes", took, dirBytes(t, dir2))
	second, err := s.Push(ctx, PushRequest{Dir: dir2, Repo: repo})
	require.NoError(t, err)

	ratio := float64(second.Uploaded) / float64(first.Uploaded)
	t.Logf("first push %d bytes (%d blobs), second %d bytes (%d blobs): %.1f%%",
		first.Uploaded, first.UploadedBlobs, second.Uploaded, second.UploadedBlobs, 100*ratio)
	assert.LessOrEqual(t, ratio, 0.25, "issue 25: a second checkpoint after a 10%% change stores at most 25%%")
	assert.Equal(t, second.Uploaded, NewBytes(second.Artifact, first.Artifact.Blobs))

	for _, cs := range []int64{64 << 10, 256 << 10, 1 << 20, 4 << 20} {
		a, b := chunkSums(t, dir1, cs), chunkSums(t, dir2, cs)
		var total, fresh int64
		for d, sz := range b {
			total += sz
			if _, ok := a[d]; !ok {
				fresh += sz
			}
		}
		t.Logf("chunk size %7d: second image %d bytes in distinct non-zero chunks, %d new (%.1f%%), %d chunks",
			cs, total, fresh, 100*float64(fresh)/float64(total), len(b))
	}
}

// chunkSums maps the sha256 of every non-zero cs-sized chunk of dir's files
// to its size.
func chunkSums(t *testing.T, dir string, cs int64) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		for off := int64(0); off < int64(len(b)); off += cs {
			c := b[off:min(off+cs, int64(len(b)))]
			if isZero(c) {
				continue
			}
			out[fmt.Sprintf("%x", sha256.Sum256(c))] = int64(len(c))
		}
	}
	return out
}
