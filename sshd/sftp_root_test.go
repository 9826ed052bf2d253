package sshd

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/pkg/sftp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SFTP on the root of a process chrooted into a directory, running as
// nobody (65534): paths stay inside the root whatever the symlinks and
// "..", permissions are nobody's, new files are nobody's. Needs root (to
// chroot and change the child's ids); fails without it.
func TestRootSFTPConfinedAsUser(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "this test needs root")
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	for _, d := range []string{"bin", "etc", "tmp", "home/nobody"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	require.NoError(t, os.Chmod(filepath.Join(dir, "tmp"), 0o1777))
	require.NoError(t, os.Chown(filepath.Join(dir, "home/nobody"), 65534, 65534))
	bb, err := os.ReadFile("/bin/busybox")
	require.NoError(t, err, "busybox-static (scripts/setup.sh)")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bin/busybox"), bb, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/home/nobody:/bin/sh\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "secret"), []byte("root only\n"), 0o600))
	outside := filepath.Join(t.TempDir(), "host-secret")
	require.NoError(t, os.WriteFile(outside, []byte("host\n"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "tmp/escape")))
	require.NoError(t, os.Symlink("/", filepath.Join(dir, "tmp/rootlink")))

	child := exec.Command("/bin/busybox", "sleep", "600")
	child.SysProcAttr = &syscall.SysProcAttr{Chroot: dir, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

	rfs, err := openRootFS(child.Process.Pid)
	require.NoError(t, err)
	defer rfs.close()
	c2s, s2c := newPipe(), newPipe()
	srv := sftp.NewRequestServer(struct {
		io.Reader
		io.WriteCloser
	}{c2s.r, s2c.w}, sftp.Handlers{FileGet: rfs, FilePut: rfs, FileCmd: rfs, FileList: rfs}, sftp.WithStartDirectory(rfs.home()))
	go func() { _ = srv.Serve() }()
	// Closing the pipes ends both ends, also when the test fails early.
	defer func() { _ = c2s.w.Close(); _ = s2c.w.Close(); _ = srv.Close() }()
	c, err := sftp.NewClientPipe(s2c.r, c2s.w)
	require.NoError(t, err)

	wd, err := c.Getwd()
	require.NoError(t, err)
	assert.Equal(t, "/home/nobody", wd, "starts in the user's home")

	f, err := c.Create("/tmp/new")
	require.NoError(t, err)
	_, err = f.Write([]byte("data"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(filepath.Join(dir, "tmp/new"), &st))
	assert.Equal(t, uint32(65534), st.Uid, "a new file is the user's")
	assert.Equal(t, uint32(65534), st.Gid)

	tests := []struct {
		name, path string
		want       error
	}{
		{"a root-only file", "/secret", fs.ErrPermission},
		{"an absolute symlink out", "/tmp/escape", fs.ErrNotExist},
		{"a symlink to / then the host path", "/tmp/rootlink" + outside, fs.ErrNotExist},
		{"dot-dots", "/../../../../.." + outside, fs.ErrNotExist},
		{"relative dot-dots", "../../../.." + outside, fs.ErrNotExist},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Open(tc.path)
			require.Error(t, err)
			assert.True(t, errors.Is(err, tc.want), "%v", err)
		})
	}
	_, err = c.Create("/in-root")
	assert.True(t, errors.Is(err, fs.ErrPermission), "the root dir is root's: %v", err)
	assert.NoFileExists(t, filepath.Join(dir, "in-root"))

	// Renames, directories, symlinks and listings stay inside.
	require.NoError(t, c.Mkdir("/tmp/d"))
	require.NoError(t, c.PosixRename("/tmp/new", "/tmp/d/moved"))
	require.NoError(t, c.Symlink("/etc/passwd", "/tmp/d/pw"))
	r, err := c.Open("/tmp/d/pw")
	require.NoError(t, err)
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Contains(t, string(b), "nobody:x:65534", "an absolute symlink resolves inside the root")
	entries, err := c.ReadDir("/tmp/d")
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	assert.ElementsMatch(t, []string{"moved", "pw"}, names)
	lst, err := c.Lstat("/tmp/escape")
	require.NoError(t, err)
	assert.Equal(t, fs.ModeSymlink, lst.Mode()&fs.ModeType, "lstat does not follow")
	target, err := c.ReadLink("/tmp/escape")
	require.NoError(t, err)
	assert.Equal(t, outside, target)
	require.NoError(t, c.Chmod("/tmp/d/moved", 0o600))
	require.NoError(t, syscall.Stat(filepath.Join(dir, "tmp/d/moved"), &st))
	assert.Equal(t, uint32(0o600), st.Mode&0o7777)
	require.NoError(t, c.Link("/tmp/d/moved", "/tmp/d/hard"))
	hard, err := os.ReadFile(filepath.Join(dir, "tmp/d/hard"))
	require.NoError(t, err)
	assert.Equal(t, "data", string(hard))
	require.NoError(t, c.Remove("/tmp/d/moved"))
	assert.NoFileExists(t, filepath.Join(dir, "tmp/d/moved"))
	b, err = os.ReadFile(outside)
	require.NoError(t, err)
	assert.Equal(t, "host\n", string(b), "the host's file is untouched")
}

type pipe struct {
	r *io.PipeReader
	w *io.PipeWriter
}

func newPipe() pipe {
	r, w := io.Pipe()
	return pipe{r, w}
}
