package sshd_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/files"
	"github.com/envd-dev/envd/internal/limiter"
)

// rootDir makes a small root filesystem with busybox, /etc/passwd (root
// and nobody, whose home is /home/nobody) and a sticky /tmp.
func rootDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755))
	for _, d := range []string{"bin", "etc", "tmp", "proc", "dev", "home/nobody"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	require.NoError(t, os.Chmod(filepath.Join(dir, "tmp"), 0o1777))
	require.NoError(t, os.Chown(filepath.Join(dir, "home/nobody"), 65534, 65534))
	bb, err := os.ReadFile("/bin/busybox")
	require.NoError(t, err, "busybox-static (scripts/setup.sh)")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "bin/busybox"), bb, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nnobody:x:65534:65534::/home/nobody:/bin/sh\n"), 0o644))
	return dir
}

// sftpClient logs in to instance ia of the fixture with its key and
// opens an SFTP session.
func (f *fixture) sftpClient(t *testing.T) *sftp.Client {
	t.Helper()
	c, err := ssh.Dial("tcp", f.addr, f.clientConfig(f.instA, ssh.PublicKeys(f.keyA)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	sc, err := sftp.NewClient(c)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sc.Close() })
	return sc
}

// SFTP on the root of a process chrooted into a directory, running as
// nobody (65534), over a real SSH connection: paths stay inside the root
// whatever the symlinks and "..", permissions are nobody's, new files are
// nobody's. Needs root (to chroot and change the child's ids).
func TestRootSFTPConfinedAsUser(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "this test needs root")
	dir := rootDir(t)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "secret"), []byte("root only\n"), 0o600))
	outside := filepath.Join(t.TempDir(), "host-secret")
	require.NoError(t, os.WriteFile(outside, []byte("host\n"), 0o644))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "tmp/escape")))
	require.NoError(t, os.Symlink("/", filepath.Join(dir, "tmp/rootlink")))

	child := exec.Command("/bin/busybox", "sleep", "600")
	child.SysProcAttr = &syscall.SysProcAttr{Chroot: dir, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })

	f := newFixture(t)
	f.core.filesPID, f.core.filesID = child.Process.Pid, files.Identity{UID: 65534, GID: 65534}
	c := f.sftpClient(t)

	wd, err := c.Getwd()
	require.NoError(t, err)
	assert.Equal(t, "/home/nobody", wd, "starts in the user's home")

	fw, err := c.Create("/tmp/new")
	require.NoError(t, err)
	_, err = fw.Write([]byte("data"))
	require.NoError(t, err)
	require.NoError(t, fw.Close())
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

// SFTP has no more rights than the file API, even as the instance's root:
// the kernel's files (procfs: an init's oom_score_adj, kallsyms), device
// nodes and FIFOs are refused. The child is an instance's init as far as
// the test can make one: pid 1 of its own pid namespace, chrooted, with
// its own /proc mounted. Needs root.
func TestRootSFTPRefusesKernelFilesAsInstanceRoot(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "this test needs root")
	dir := rootDir(t)
	require.NoError(t, syscall.Mknod(filepath.Join(dir, "dev/null"), syscall.S_IFCHR|0o666, int(unixMkdev(1, 3))))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "tmp/fifo"), 0o666))

	child := exec.Command("/bin/busybox", "sh", "-c", "/bin/busybox mount -t proc proc /proc && echo ready && exec /bin/busybox sleep 600")
	child.SysProcAttr = &syscall.SysProcAttr{Chroot: dir, Cloneflags: syscall.CLONE_NEWPID, Unshareflags: syscall.CLONE_NEWNS}
	out, err := child.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "the child mounts its /proc")
	require.Equal(t, "ready\n", line)
	oomFile := "/proc/" + strconv.Itoa(child.Process.Pid) + "/oom_score_adj"
	before, err := os.ReadFile(oomFile)
	require.NoError(t, err)

	f := newFixture(t)
	f.core.filesPID, f.core.filesID = child.Process.Pid, files.Identity{UID: 0, GID: 0}
	c := f.sftpClient(t)

	// The instance's root sees its own /proc: /proc/1 is its init. -1000
	// (OOM-proof) needs CAP_SYS_RESOURCE, which a node may lack; raising
	// it needs nothing: both are refused. The file is opened as a client
	// that writes in place opens it (sshfs, put -a); procfs refuses
	// O_TRUNC, so a plain put fails anyway.
	for _, v := range []string{"-1000", "1000"} {
		w, err := c.OpenFile("/proc/1/oom_score_adj", os.O_WRONLY|os.O_CREATE)
		if err == nil {
			_, err = w.Write([]byte(v + "\n"))
			if cerr := w.Close(); err == nil {
				err = cerr
			}
		}
		assert.Error(t, err, "writing %s to the init's oom_score_adj is refused", v)
		assert.True(t, errors.Is(err, fs.ErrPermission), "%v", err)
		after, err := os.ReadFile(oomFile)
		require.NoError(t, err)
		assert.Equal(t, string(before), string(after), "the init's oom_score_adj is unchanged")
	}

	for _, p := range []string{"/proc/kallsyms", "/proc/1/environ", "/dev/null", "/tmp/fifo"} {
		t.Run(p, func(t *testing.T) {
			r, err := c.Open(p)
			if err == nil {
				_, err = io.ReadAll(io.LimitReader(r, 4096))
				r.Close()
			}
			require.Error(t, err, "reading %s is refused", p)
			assert.True(t, errors.Is(err, fs.ErrPermission), "%v", err)
		})
	}
	_, err = c.ReadDir("/proc")
	assert.Error(t, err, "procfs is not listed")
}

func unixMkdev(major, minor uint32) uint64 {
	return uint64(major)<<8 | uint64(minor)
}

// osThreads is the process's OS thread count.
func osThreads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// sleeper starts a chrooted process in a fresh root, as the given ids,
// and returns the root.
func sleeper(t *testing.T, uid, gid uint32) (string, int) {
	t.Helper()
	dir := rootDir(t)
	child := exec.Command("/bin/busybox", "sleep", "600")
	child.SysProcAttr = &syscall.SysProcAttr{Chroot: dir, Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	return dir, child.Process.Pid
}

// SFTP sessions whose clients stall (a file open, then nothing read) hold
// no OS thread: many of them leave the thread count where it was, and the
// server still serves a new session. (Before, every session held a
// locked thread for its whole life.) Needs root (chroot).
func TestRootSFTPStalledSessionsHoldNoThread(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "this test needs root")
	dir, pid := sleeper(t, 65534, 65534)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tmp/big"), make([]byte, 1<<20), 0o644))
	f := newFixture(t)
	f.core.filesPID, f.core.filesID = pid, files.Identity{UID: 65534, GID: 65534}
	warm := f.sftpClient(t)
	_, err := warm.ReadDir("/")
	require.NoError(t, err)
	before := osThreads(t)

	const n = 48
	for range n {
		c := f.sftpClient(t)
		r, err := c.Open("/tmp/big")
		require.NoError(t, err)
		buf := make([]byte, 100)
		_, err = r.Read(buf) // the session is serving a file, and then its client stops
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, osThreads(t), before+8, "%d stalled SFTP sessions", n)
	c := f.sftpClient(t)
	_, err = c.Stat("/tmp/big")
	require.NoError(t, err, "a new session is served")
}

// A tenant's SFTP sessions are bounded: past the limit the subsystem
// request is refused with the reason on stderr; a session's end frees its
// slot. Needs root (chroot).
func TestRootSFTPSessionLimit(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "this test needs root")
	_, pid := sleeper(t, 65534, 65534)
	f := newFixture(t)
	f.core.filesPID, f.core.filesID = pid, files.Identity{UID: 65534, GID: 65534}
	f.core.limits = limiter.New(map[string]limiter.Limit{types.AdmitSFTP: {Max: 1}})

	conn, err := ssh.Dial("tcp", f.addr, f.clientConfig(f.instA, ssh.PublicKeys(f.keyA)))
	require.NoError(t, err)
	defer conn.Close()
	first, err := sftp.NewClient(conn)
	require.NoError(t, err)
	_, err = first.Getwd()
	require.NoError(t, err)

	s, err := conn.NewSession()
	require.NoError(t, err)
	stderr, err := s.StderrPipe()
	require.NoError(t, err)
	err = s.RequestSubsystem("sftp")
	require.Error(t, err, "a second session is refused")
	msg, _ := io.ReadAll(stderr) // until the server closes the channel
	assert.Contains(t, string(msg), `tenant "a" already holds its limit of 1 concurrent sftp on this node`)
	s.Close()

	require.NoError(t, first.Close())
	require.Eventually(t, func() bool { return f.core.limits.InUse("a", types.AdmitSFTP) == 0 }, 5*time.Second, 10*time.Millisecond)
	second, err := sftp.NewClient(conn)
	require.NoError(t, err, "the slot is free again")
	defer second.Close()
	_, err = second.Getwd()
	require.NoError(t, err)
}

// A directory of many entries is listed whole, read in the chunks READDIR
// asks for. Needs root (chroot).
func TestRootSFTPListsLargeDirectories(t *testing.T) {
	require.Equal(t, 0, os.Geteuid(), "this test needs root")
	dir, pid := sleeper(t, 65534, 65534)
	const n = 3000
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "many"), 0o755))
	for i := range n {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "many", fmt.Sprintf("f%04d", i)), nil, 0o644))
	}
	f := newFixture(t)
	f.core.filesPID, f.core.filesID = pid, files.Identity{UID: 65534, GID: 65534}
	c := f.sftpClient(t)
	entries, err := c.ReadDir("/many")
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, e := range entries {
		assert.False(t, seen[e.Name()], e.Name())
		seen[e.Name()] = true
	}
	assert.Len(t, seen, n)
}
