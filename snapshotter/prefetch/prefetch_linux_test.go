package prefetch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test uses fanotify and overlayfs and must run as root")
	}
}

// mountOverlay makes lower (with files), upper, work and merged under a temp
// dir, mounts the overlay and returns merged.
func mountOverlay(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	lower, upper, work, merged := filepath.Join(dir, "lower"), filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "merged")
	for _, d := range []string{lower, upper, work, merged} {
		require.NoError(t, os.Mkdir(d, 0o755))
	}
	for name, content := range files {
		p := filepath.Join(lower, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	require.NoError(t, unix.Mount("overlay", merged, "overlay", 0, opts), "mount overlay")
	t.Cleanup(func() { _ = unix.Unmount(merged, unix.MNT_DETACH) })
	return merged
}

// shIn runs script with sh in dir, as a process of its own (the recorder
// leaves out its own pid's events).
func shIn(t *testing.T, dir, script string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
}

var rootfs = map[string]string{
	"etc/hosts":           "127.0.0.1 localhost\n",
	"usr/bin/tool":        "#!/bin/sh\necho tool\n",
	"usr/share/doc/a.txt": "doc\n",
	"tmp/scratch":         "tmp\n",
	"never/read":          "x\n",
}

func TestRootRecordOverlay(t *testing.T) {
	requireRoot(t)
	merged := mountOverlay(t, rootfs)
	rec, err := Start(merged, 100)
	require.NoError(t, err)
	defer rec.Close()
	// A child process reads three files through the merged dir, one by one.
	for _, name := range []string{"usr/share/doc/a.txt", "etc/hosts", "usr/bin/tool"} {
		out, err := exec.Command("cat", filepath.Join(merged, name)).CombinedOutput()
		require.NoError(t, err, string(out))
		assert.Equal(t, rootfs[name], string(out))
	}
	paths, err := rec.Collect(context.Background(), 0)
	require.NoError(t, err)
	var files []string
	for _, p := range paths {
		if p[len(p)-1] != '/' {
			files = append(files, p)
		}
	}
	assert.Equal(t, []string{"/usr/share/doc/a.txt", "/etc/hosts", "/usr/bin/tool"}, files)
	assert.NotContains(t, paths, "/never/read")
	assert.Zero(t, rec.Overflows())
}

// More distinct files touched than the kernel queues (16,384 events) while
// nothing reads the queue: the overflow is counted, so a caller can tell
// that some files' writes may not have been seen.
func TestRootRecordQueueOverflow(t *testing.T) {
	requireRoot(t)
	merged := mountOverlay(t, rootfs)
	rec, err := Start(merged, 0)
	require.NoError(t, err)
	defer rec.Close()
	shIn(t, merged, `mkdir many && cd many && i=0; while [ $i -lt 17000 ]; do : > f$i; i=$((i+1)); done`)
	_, err = rec.Collect(context.Background(), 0)
	require.NoError(t, err)
	assert.Positive(t, rec.Overflows(), "17,000 files made with the queue unread")
}

func TestRootRecordMax(t *testing.T) {
	requireRoot(t)
	merged := mountOverlay(t, rootfs)
	rec, err := Start(merged, 2)
	require.NoError(t, err)
	defer rec.Close()
	for _, name := range []string{"etc/hosts", "usr/bin/tool", "usr/share/doc/a.txt"} {
		require.NoError(t, exec.Command("cat", filepath.Join(merged, name)).Run())
	}
	// With max paths recorded, Collect does not wait out its hour.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	paths, err := rec.Collect(ctx, time.Hour)
	require.NoError(t, err, "Collect returns once it has max paths")
	assert.Equal(t, []string{"/etc/hosts", "/usr/bin/tool"}, paths)
}

func TestRootRecordCancel(t *testing.T) {
	requireRoot(t)
	merged := mountOverlay(t, rootfs)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := Record(ctx, merged, time.Minute, 0)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestRootRecordBadRoot(t *testing.T) {
	requireRoot(t)
	_, err := Record(context.Background(), filepath.Join(t.TempDir(), "missing"), time.Second, 0)
	require.Error(t, err)
	assert.True(t, errors.Is(err, errdefs.ErrNotFound), err)

	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	_, err = Record(context.Background(), file, time.Second, 0)
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}

// TestRootRecordPrioritize reads files under excluded dirs too: Record keeps
// them, Prioritize drops them and the directories.
func TestRootRecordPrioritize(t *testing.T) {
	requireRoot(t)
	merged := mountOverlay(t, rootfs)
	rec, err := Start(merged, 0)
	require.NoError(t, err)
	defer rec.Close()
	require.NoError(t, exec.Command("cat", filepath.Join(merged, "tmp/scratch"), filepath.Join(merged, "etc/hosts")).Run())
	require.NoError(t, exec.Command("ls", filepath.Join(merged, "usr/share")).Run())
	paths, err := rec.Collect(context.Background(), 0)
	require.NoError(t, err)
	assert.Contains(t, paths, "/tmp/scratch")
	assert.Contains(t, paths, "/usr/share/")
	assert.Equal(t, []string{"/etc/hosts"}, Prioritize(paths))
}

func TestPrioritize(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   []string
		want []string
	}{
		{"keeps order", []string{"/usr/bin/dot", "/etc/hosts"}, []string{"/usr/bin/dot", "/etc/hosts"}},
		{"drops directories", []string{"/", "/usr/", "/usr/lib/libc.so.6"}, []string{"/usr/lib/libc.so.6"}},
		{"drops runtime mounts", []string{"/proc/self/maps", "/sys/fs/cgroup/x", "/dev/null", "/run/secrets/k", "/tmp/x", "/tmpfile", "/proc"}, []string{"/tmpfile"}},
		{"dedups and cleans", []string{"usr/bin/dot", "/usr/bin/dot", "/usr/./bin/dot"}, []string{"/usr/bin/dot"}},
		{"empty", nil, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Prioritize(tc.in))
		})
	}
}

// Files opened only for writing (appended to, created) are not first
// reads; a file opened for reading and writing and read is. Collect can be
// called again and the list grows.
func TestRootRecordSkipsWriteOnly(t *testing.T) {
	requireRoot(t)
	merged := mountOverlay(t, rootfs)
	rec, err := Start(merged, 100)
	require.NoError(t, err)
	defer rec.Close()
	shIn(t, merged, "cat etc/hosts > /dev/null && echo more >> usr/share/doc/a.txt && echo new > created")
	first, err := rec.Collect(context.Background(), 0)
	require.NoError(t, err)
	assert.Contains(t, first, "/etc/hosts")
	assert.NotContains(t, first, "/usr/share/doc/a.txt", "appended to, never read")
	assert.NotContains(t, first, "/created", "created by the instance")

	shIn(t, merged, "exec 3<>usr/bin/tool; cat <&3 > /dev/null; cat usr/share/doc/a.txt > /dev/null")
	second, err := rec.Collect(context.Background(), 0)
	require.NoError(t, err)
	assert.Contains(t, second, "/usr/bin/tool", "opened read-write and read")
	assert.NotContains(t, second, "/usr/share/doc/a.txt", "read back after the instance wrote it")
	assert.Contains(t, second, "/etc/hosts", "the list keeps what it had")
	assert.NotContains(t, second, "/created")
}

// What an instance writes and then reads back is its own output, not what
// a new instance of its image reads first, under whatever name it is read:
// apt downloads package lists and packages to a temporary name, renames
// them and reads them back; dpkg unpacks to NAME.dpkg-new, renames, and
// its triggers read the files. Such an install read 112 MB of the 117 MB
// layer it saved, all of which went before the layer's prefetch landmark.
// A file read from the image and changed afterwards stays a first read.
func TestRootRecordSkipsOwnOutput(t *testing.T) {
	requireRoot(t)
	merged := mountOverlay(t, rootfs)
	rec, err := Start(merged, 100)
	require.NoError(t, err)
	defer rec.Close()
	shIn(t, merged, "mkdir -p var/lists/partial && echo list > var/lists/partial/main && mv var/lists/partial/main var/lists/main")
	shIn(t, merged, "echo lib > usr/lib.so.dpkg-new && mv usr/lib.so.dpkg-new usr/lib.so")
	shIn(t, merged, "cat var/lists/main usr/lib.so > /dev/null")                    // read back by other processes
	shIn(t, merged, "echo cache > var/cache.bin && read l < var/cache.bin")         // by the same process (one event)
	shIn(t, merged, "cat etc/hosts > /dev/null && echo '10.0.0.1 db' >> etc/hosts") // read, then changed
	shIn(t, merged, "cat etc/hosts usr/bin/tool > /dev/null")
	paths, err := rec.Collect(context.Background(), 0)
	require.NoError(t, err)
	files := Prioritize(paths)
	assert.Equal(t, []string{"/etc/hosts", "/usr/bin/tool"}, files)
}

// TestRootRecordMark: Mark, called while Collect waits in another
// goroutine, returns what was read up to then, and Collect goes on with
// the reads after it; after Close it returns nil.
func TestRootRecordMark(t *testing.T) {
	requireRoot(t)
	merged := mountOverlay(t, rootfs)
	rec, err := Start(merged, 100)
	require.NoError(t, err)
	collected := make(chan []string, 1)
	go func() {
		files, _ := rec.Collect(context.Background(), time.Second)
		collected <- files
	}()
	shIn(t, merged, "cat etc/hosts > /dev/null")
	marked := rec.Mark()
	assert.Contains(t, marked, "/etc/hosts")
	assert.NotContains(t, marked, "/usr/bin/tool")
	shIn(t, merged, "cat usr/bin/tool > /dev/null")
	files := <-collected
	assert.Equal(t, marked, files[:len(marked)], "the marked list is the head of the later one")
	assert.Contains(t, files[len(marked):], "/usr/bin/tool")
	require.NoError(t, rec.Close())
	assert.Nil(t, rec.Mark())
	require.NoError(t, rec.Close(), "a second Close is a no-op")
}
