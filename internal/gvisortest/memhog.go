package gvisortest

import (
	archive "archive/tar"
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
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
	"github.com/stretchr/testify/require"
)

// The memhog program and the helpers to run it under runsc, for root
// tests of memory images (registry/memimage/lazyfs). registry/memimage's
// own engine tests hold an earlier copy.

// memhogImage is the name MemhogArchive's image is imported under.
const memhogImage = "docker.io/envd/memhog-test:latest"

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

// MemhogArchive is a docker-archive tar of a one-layer image holding
// /bin/memhog.
func MemhogArchive(t *testing.T) []byte {
	memhog := buildMemhog(t)
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
	tag, err := name.NewTag(memhogImage)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, tarball.Write(tag, img, &out))
	return out.Bytes()
}

// Run makes a container of args on a fresh snapshot, runsc as its OCI
// runtime through runc's shim, and a task writing to a lines follower; with
// restoreFrom set the task restores that image directory.
func (n *Node) Run(t *testing.T, id, restoreFrom string, args ...string) (client.Task, *Lines) {
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

// Lines follows a task's output: numbers on one channel, other lines on
// another.
type Lines struct {
	nums  chan int
	words chan string
	w     *io.PipeWriter
}

func newLines(t *testing.T) (*Lines, *io.PipeWriter) {
	r, w := io.Pipe()
	l := &Lines{nums: make(chan int, 4096), words: make(chan string, 64), w: w}
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

// Next waits for the next number.
func (l *Lines) Next(t *testing.T) int {
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

// Word waits for the next line with a prefix, skipping numbers.
func (l *Lines) Word(t *testing.T, prefix string) string {
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

// Drain returns the last number printed, once the task is deleted (its
// output is then all copied).
func (l *Lines) Drain(t *testing.T, seen int) int {
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

// Checkpoint writes the task's image into a new directory; with exit the
// task stops (runc's shim passes --leave-running otherwise).
func Checkpoint(t *testing.T, task client.Task, exit bool) (string, time.Duration) {
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
