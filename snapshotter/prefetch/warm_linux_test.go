package prefetch

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// startIn starts `sleep` in a process whose root is dir (a chroot), as a
// container's init is, and returns its pid.
func startIn(t *testing.T, dir string) int {
	t.Helper()
	cmd := exec.Command("/bin/busybox", "sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: dir}
	cmd.Dir = "/"
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Until the chroot has happened, /proc/PID/root is the host's.
	require.Eventually(t, func() bool {
		l, err := os.Readlink(filepath.Join("/proc", itoa(cmd.Process.Pid), "root"))
		return err == nil && l == dir
	}, 5*time.Second, 10*time.Millisecond)
	return cmd.Process.Pid
}

func itoa(n int) string { return strconv.Itoa(n) }

// Warm reads the init's executable, its libraries and the commands it
// runs, then the listed files inside the process's root only: a symlink
// pointing out of it resolves inside it.
func TestRootWarm(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	for _, d := range []string{"bin", "usr/bin", "data", "etc"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	bb, err := os.ReadFile("/bin/busybox")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bin/busybox"), bb, 0o755))
	require.NoError(t, os.Symlink("busybox", filepath.Join(dir, "bin/sleep")))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data/a"), make([]byte, 3000), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data/b"), make([]byte, 5000), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "data/big"), make([]byte, 1<<20), 0o644))
	require.NoError(t, os.Symlink("../../../../../../etc/hostname", filepath.Join(dir, "data/escape")))
	require.NoError(t, unix.Mkfifo(filepath.Join(dir, "data/fifo"), 0o644))
	pid := startIn(t, dir)

	lazy, err := Lazy(pid)
	require.NoError(t, err)
	assert.False(t, lazy, "a root on a local filesystem has nothing to fetch")

	res, err := Warm(context.Background(), pid, WarmOptions{
		Commands: []string{"sleep", "no-such-command"},
		Files:    []string{"/data/a", "/data/missing", "/data/escape", "/data/fifo", "/data/big", "/data/b"},
		MaxBytes: 100000,
		Workers:  1, // in order, so the budget cuts /data/big and not /data/b
	})
	require.NoError(t, err)
	assert.Equal(t, 1, res.Needed, "busybox is static and sleep is busybox: one file")
	assert.Equal(t, int64(len(bb)), res.NeededBytes)
	assert.Equal(t, 2, res.Files, "a and b")
	assert.Equal(t, int64(8000), res.FileBytes)
	assert.Equal(t, 4, res.Skipped, "missing, the escape (no /etc/hostname inside), the FIFO, big over the budget")

	// A read-ahead beside the init's warm reads the files only.
	res, err = Warm(context.Background(), pid, WarmOptions{
		Commands: []string{"sleep"}, Files: []string{"/data/a", "/data/b"}, FilesOnly: true,
	})
	require.NoError(t, err)
	assert.Equal(t, WarmResult{Files: 2, FileBytes: 8000}, res)

	_, err = Warm(context.Background(), 1<<30, WarmOptions{})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

// A dynamically linked init: its interpreter and libraries are read too.
func TestRootWarmDynamic(t *testing.T) {
	requireRoot(t)
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	time.Sleep(100 * time.Millisecond) // let the loader map the libraries
	res, err := Warm(context.Background(), cmd.Process.Pid, WarmOptions{})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, res.Needed, 3, "sleep, ld.so, libc")
}

// WarmLayers reads each file from the top layer that has it, as an overlay
// of the layers shows it: a whiteout (0/0 character device) or a directory
// in an upper layer hides the lower layer's file.
func TestRootWarmLayers(t *testing.T) {
	requireRoot(t)
	upper, lower := t.TempDir(), t.TempDir()
	write := func(dir, name string, size int) {
		p := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, make([]byte, size), 0o644))
	}
	write(lower, "usr/lib/only-lower.so", 1000)
	write(lower, "usr/lib/both.so", 2000)
	write(upper, "usr/lib/both.so", 3000)
	write(lower, "etc/deleted", 4000)
	require.NoError(t, os.MkdirAll(filepath.Join(upper, "etc"), 0o755))
	require.NoError(t, unix.Mknod(filepath.Join(upper, "etc/deleted"), unix.S_IFCHR|0o644, 0))
	write(lower, "data/now-a-dir", 5000)
	require.NoError(t, os.MkdirAll(filepath.Join(upper, "data/now-a-dir"), 0o755))

	res, err := WarmLayers(context.Background(), []string{upper, lower}, WarmOptions{
		Files: []string{"/usr/lib/only-lower.so", "/usr/lib/both.so", "/etc/deleted", "/data/now-a-dir", "/missing"},
	})
	require.NoError(t, err)
	assert.Equal(t, WarmResult{Files: 2, FileBytes: 1000 + 3000, Skipped: 3}, res)

	// A file over MaxFileBytes is skipped, the others read.
	res, err = WarmLayers(context.Background(), []string{upper, lower}, WarmOptions{
		Files: []string{"/usr/lib/both.so", "/usr/lib/only-lower.so"}, MaxFileBytes: 2500,
	})
	require.NoError(t, err)
	assert.Equal(t, WarmResult{Files: 1, FileBytes: 1000, Skipped: 1}, res)

	_, err = WarmLayers(context.Background(), []string{filepath.Join(upper, "missing")}, WarmOptions{Files: []string{"/x"}})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}
