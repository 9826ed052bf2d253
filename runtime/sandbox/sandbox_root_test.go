package sandbox

import (
	archive "archive/tar"
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/gvisortest"
)

const imageName = "docker.io/envd/sandbox-busybox:latest"

// Tests named TestRoot* need root (containerd, runsc, overlayfs). They fail
// rather than skip without it or without runsc: CI runs as root after
// scripts/setup.sh.
// busyboxArchive is a docker-archive tar (what `docker save` writes and
// containerd imports) of a one-layer image: the static /bin/busybox with a
// symlink per applet.
func busyboxArchive(t *testing.T) []byte {
	t.Helper()
	bb, err := os.ReadFile("/bin/busybox")
	require.NoError(t, err, "busybox-static must be installed at /bin/busybox")
	var layer bytes.Buffer
	tw := tar(&layer)
	tw.dir("bin", "etc", "proc", "sys", "dev", "tmp", "root")
	tw.file("bin/busybox", 0o755, bb)
	for _, applet := range []string{"sh", "echo", "cat", "uname", "sleep"} {
		tw.symlink("bin/"+applet, "busybox")
	}
	tw.file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n"))
	require.NoError(t, tw.close())

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
	cf.Config = v1.Config{Env: []string{"PATH=/bin"}, Cmd: []string{"/bin/sh"}, WorkingDir: "/"}
	img, err = mutate.ConfigFile(img, cf)
	require.NoError(t, err)
	tag, err := name.NewTag(imageName)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, tarball.Write(tag, img, &out))
	return out.Bytes()
}

// newContainer makes a container running args on a fresh overlayfs snapshot
// of the image, whose tasks containerd's runc shim runs with runsc as the OCI
// runtime binary.
func TestRootSandboxKernelIsNotTheNodes(t *testing.T) {
	runsc := gvisortest.RequireRunsc(t)
	n := gvisortest.StartNode(t, runsc, "sandbox-test", busyboxArchive(t))
	ctx := context.Background()

	ctr := n.NewContainer(t, "kernel", "sh", "-c", "uname -r; cat /proc/version")
	var out, errOut bytes.Buffer
	task, err := ctr.NewTask(ctx, cio.NewCreator(cio.WithStreams(nil, &out, &errOut)))
	require.NoError(t, err)
	exitCh, err := task.Wait(ctx)
	require.NoError(t, err)
	require.NoError(t, task.Start(ctx))
	select {
	case st := <-exitCh:
		require.Equal(t, uint32(0), st.ExitCode(), "output: %s", out.String())
	case <-time.After(2 * time.Minute):
		t.Fatal("container did not exit")
	}
	// Delete waits for the output to be copied.
	_, err = task.Delete(ctx)
	require.NoError(t, err)

	var uts unix.Utsname
	require.NoError(t, unix.Uname(&uts))
	hostRelease := unix.ByteSliceToString(uts.Release[:])
	hostVersion, err := os.ReadFile("/proc/version")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2, "output: %q, stderr: %q", out.String(), errOut.String())
	assert.NotEqual(t, hostRelease, lines[0], "uname -r inside the sandbox")
	assert.NotEqual(t, strings.TrimSpace(string(hostVersion)), lines[1], "/proc/version inside the sandbox")
	assert.Contains(t, lines[1], "gvisor")
}

// counter follows a container's output, one decimal number a line.
type counter struct {
	lines chan int
}

func newCounter(t *testing.T) (*counter, *io.PipeWriter) {
	r, w := io.Pipe()
	c := &counter{lines: make(chan int, 1024)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			if v, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
				c.lines <- v
			}
		}
	}()
	t.Cleanup(func() { _ = w.Close() })
	return c, w
}

// next waits for the next number printed.
func (c *counter) next(t *testing.T) int {
	t.Helper()
	select {
	case v, ok := <-c.lines:
		require.True(t, ok, "output closed")
		return v
	case <-time.After(time.Minute):
		t.Fatal("no output for a minute")
		return 0
	}
}

// last drains what was printed until the output closes.
func (c *counter) last(t *testing.T, seen int) int {
	t.Helper()
	for {
		select {
		case v, ok := <-c.lines:
			if !ok {
				return seen
			}
			seen = v
		case <-time.After(time.Minute):
			t.Fatal("output not closed a minute after the task exited")
		}
	}
}

// withExit stops the task after the checkpoint (runc's shim passes
// --leave-running otherwise).
func withExit(r *client.CheckpointTaskInfo) error {
	r.Options.(*options.CheckpointOptions).Exit = true
	return nil
}

// A shell counting in a runsc sandbox is checkpointed on one containerd,
// its image files copied, and restored on a second containerd: it goes on
// counting from where it stopped instead of starting again at 1.
func TestRootSandboxCheckpointRestoresOnAnotherNode(t *testing.T) {
	runsc := gvisortest.RequireRunsc(t)
	ctx := context.Background()
	const loop = `i=0; while true; do i=$((i+1)); echo $i; sleep 0.1; done`

	a := gvisortest.StartNode(t, runsc, "sandbox-test", busyboxArchive(t))
	ctr := a.NewContainer(t, "count", "sh", "-c", loop)
	before, w := newCounter(t)
	task, err := ctr.NewTask(ctx, cio.NewCreator(cio.WithStreams(nil, w, io.Discard)))
	require.NoError(t, err)
	exitCh, err := task.Wait(ctx)
	require.NoError(t, err)
	require.NoError(t, task.Start(ctx))
	seen := 0
	for seen < 5 {
		seen = before.next(t)
	}

	imageDir := t.TempDir()
	start := time.Now()
	_, err = task.Checkpoint(ctx, client.WithCheckpointImagePath(imageDir), withExit)
	require.NoError(t, err)
	t.Logf("checkpoint: %v", time.Since(start))
	select {
	case <-exitCh:
	case <-time.After(time.Minute):
		t.Fatal("task still running a minute after a checkpoint with exit")
	}
	_, err = task.Delete(ctx)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	stopped := before.last(t, seen)

	copied := t.TempDir()
	entries, err := os.ReadDir(imageDir)
	require.NoError(t, err)
	require.NotEmpty(t, entries, "checkpoint wrote no image files")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(imageDir, e.Name()))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(copied, e.Name()), b, 0o600))
		t.Logf("image file %s: %d bytes", e.Name(), len(b))
	}

	b := gvisortest.StartNode(t, runsc, "sandbox-test", busyboxArchive(t))
	restored := b.NewContainer(t, "count-restored", "sh", "-c", loop)
	after, w2 := newCounter(t)
	start = time.Now()
	task2, err := restored.NewTask(ctx, cio.NewCreator(cio.WithStreams(nil, w2, io.Discard)),
		client.WithRestoreImagePath(copied))
	require.NoError(t, err)
	require.NoError(t, task2.Start(ctx))
	first := after.next(t)
	t.Logf("restore to first line: %v", time.Since(start))
	assert.Equal(t, stopped+1, first, "the restored shell goes on from %d", stopped)
}

// tarWriter writes a layer, keeping the first error for close.
type tarWriter struct {
	tw  *archive.Writer
	err error
}

func tar(w io.Writer) *tarWriter { return &tarWriter{tw: archive.NewWriter(w)} }

func (w *tarWriter) header(h *archive.Header, data []byte) {
	if w.err != nil {
		return
	}
	h.ModTime = time.Unix(0, 0)
	if w.err = w.tw.WriteHeader(h); w.err == nil && len(data) > 0 {
		_, w.err = w.tw.Write(data)
	}
}

func (w *tarWriter) dir(names ...string) {
	for _, n := range names {
		w.header(&archive.Header{Typeflag: archive.TypeDir, Name: n + "/", Mode: 0o755}, nil)
	}
}

func (w *tarWriter) file(name string, mode int64, data []byte) {
	w.header(&archive.Header{Typeflag: archive.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data)
}

func (w *tarWriter) symlink(name, target string) {
	w.header(&archive.Header{Typeflag: archive.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}, nil)
}

func (w *tarWriter) close() error {
	if w.err != nil {
		return w.err
	}
	return w.tw.Close()
}
