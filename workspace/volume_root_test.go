package workspace

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/mountinfo"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/internal/s3test"
)

// Root tests mount file systems: they need root and fail without it. They
// do not run in parallel, so that the loop device counts they compare are
// their own.

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts loop devices and must run as root")
	}
}

// loopCount counts the attached loop devices (`losetup -a` lines) whose
// backing file lies in this test's temporary directories: other packages'
// tests attach and detach loop devices of their own at the same time.
func loopCount(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("losetup", "-a").Output()
	require.NoError(t, err)
	mine := "(" + filepath.Join(os.TempDir(), t.Name())
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, mine) {
			n++
		}
	}
	return n
}

// noLoopLeak fails the test if it ends with more of its loop devices than
// it began with.
func noLoopLeak(t *testing.T) {
	before := loopCount(t)
	t.Cleanup(func() {
		assert.Equal(t, before, loopCount(t), "loop devices leaked")
	})
}

func newManager(t *testing.T) *Manager {
	t.Helper()
	m, err := NewManager(filepath.Join(t.TempDir(), "volumes"))
	require.NoError(t, err)
	t.Cleanup(func() { // unmount whatever a failed test left behind
		_ = m.Detach(context.Background())
	})
	return m
}

func TestRootVolumeLifecycle(t *testing.T) {
	requireRoot(t)
	noLoopLeak(t)
	ctx := context.Background()
	m := newManager(t)
	const owner = "tenant1/proj1"
	spec := Spec{Name: "work", Path: "/workspace", UID: 1000, GID: 1001, SizeBytes: MinSize,
		PathAdd: []string{"/workspace/.local/bin"}}

	dir, err := m.Ensure(ctx, owner, spec)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(m.Root(), "tenant1", "proj1", "work", "mnt"), dir)

	// A mounted ext4 of the requested size, root owned by uid:gid.
	mi, ok, err := mountedAt(dir)
	require.NoError(t, err)
	require.True(t, ok, "volume not mounted")
	assert.Equal(t, "ext4", mi.FSType)
	st := lstat(t, dir)
	assert.Equal(t, uint32(1000), st.Uid)
	assert.Equal(t, uint32(1001), st.Gid)
	bin := lstat(t, filepath.Join(dir, ".local", "bin"))
	assert.Equal(t, uint32(unix.S_IFDIR), bin.Mode&unix.S_IFMT)
	assert.Equal(t, uint32(1000), bin.Uid)
	img, err := os.Stat(filepath.Join(m.Root(), "tenant1", "proj1", "work", "disk.img"))
	require.NoError(t, err)
	assert.Equal(t, MinSize, img.Size())
	assert.Less(t, img.Sys().(*syscall.Stat_t).Blocks*512, MinSize, "image is sparse")

	// Idempotent: same dir, one mount.
	dir2, err := m.Ensure(ctx, owner, spec)
	require.NoError(t, err)
	assert.Equal(t, dir, dir2)
	assert.Equal(t, 1, mountCount(t, dir))

	// Writing past the size fails with ENOSPC.
	t.Run("ENOSPC", func(t *testing.T) {
		f, err := os.Create(filepath.Join(dir, "fill"))
		require.NoError(t, err)
		chunk := make([]byte, 1<<20)
		var werr error
		for i := 0; i < int(2*MinSize/int64(len(chunk))) && werr == nil; i++ {
			_, werr = f.Write(chunk)
		}
		if werr == nil {
			werr = f.Sync()
		}
		require.Error(t, werr, "wrote twice the volume size")
		assert.True(t, errors.Is(werr, syscall.ENOSPC), "got %v", werr)
		require.NoError(t, f.Close())
		require.NoError(t, os.Remove(filepath.Join(dir, "fill")))
	})

	// Usage.
	data := make([]byte, 4<<20)
	_, _ = rand.Read(data)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keep.bin"), data, 0o644))
	unix.Sync()
	u, err := m.Usage(ctx, owner, spec)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, u.UsedBytes, int64(4<<20))
	assert.Less(t, u.UsedBytes, MinSize)
	assert.Equal(t, MinSize, u.SizeBytes)
	assert.Greater(t, u.AvailBytes, int64(0))
	_, err = m.Usage(ctx, owner, Spec{Name: "nope", Path: "/nope"})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	// The mount is gone (reboot, restart): Ensure remounts, content kept.
	require.NoError(t, unix.Unmount(dir, 0))
	_, ok, err = mountedAt(dir)
	require.NoError(t, err)
	require.False(t, ok)
	_, err = m.Ensure(ctx, owner, spec)
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join(dir, "keep.bin"))
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data, got), "content kept across remount")

	// A changed owner in the spec is applied to the root.
	spec2 := spec
	spec2.UID, spec2.GID = 2000, 2000
	_, err = m.Ensure(ctx, owner, spec2)
	require.NoError(t, err)
	assert.Equal(t, uint32(2000), lstat(t, dir).Uid)

	// A second volume; List.
	_, err = m.Ensure(ctx, owner, Spec{Name: "tools", Path: "/home/dev/.tools", SizeBytes: MinSize})
	require.NoError(t, err)
	names, err := m.List(ctx, owner)
	require.NoError(t, err)
	assert.Equal(t, []string{"tools", "work"}, names)
	names, err = m.List(ctx, "tenant1/other")
	require.NoError(t, err)
	assert.Empty(t, names)

	// Remove refuses while busy (an open file), then unmounts and deletes.
	f, err := os.Open(filepath.Join(dir, "keep.bin"))
	require.NoError(t, err)
	err = m.Remove(ctx, owner, "work")
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	_, ok, _ = mountedAt(dir)
	assert.True(t, ok, "a refused Remove keeps the volume mounted")
	require.NoError(t, f.Close())
	require.NoError(t, m.Remove(ctx, owner, "work"))
	_, ok, _ = mountedAt(dir)
	assert.False(t, ok)
	_, err = os.Stat(filepath.Join(m.Root(), "tenant1", "proj1", "work"))
	assert.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, m.Remove(ctx, owner, "work"), "removing a missing volume is fine")
	require.NoError(t, m.Remove(ctx, owner, "tools"))
	names, err = m.List(ctx, owner)
	require.NoError(t, err)
	assert.Empty(t, names)
	_, err = os.Stat(filepath.Join(m.Root(), "tenant1"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "empty owner dirs pruned")
}

func TestRootOwnerAndNameChecks(t *testing.T) {
	requireRoot(t)
	noLoopLeak(t)
	ctx := context.Background()
	m := newManager(t)
	spec := Spec{Name: "b", Path: "/b", SizeBytes: MinSize}
	for _, owner := range []string{"", "../x", "a//b", "/a", "a/..", "a b"} {
		_, err := m.Ensure(ctx, owner, spec)
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "owner %q", owner)
	}
	_, err := m.Ensure(ctx, "t/p", Spec{Name: "b", Path: "/etc/b"})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)

	// Owner "a" with volume "b" and owner "a/b" would share a directory.
	_, err = m.Ensure(ctx, "a", spec)
	require.NoError(t, err)
	_, err = m.Ensure(ctx, "a/b", Spec{Name: "c", Path: "/c", SizeBytes: MinSize})
	assert.ErrorIs(t, err, errdefs.ErrConflict)
	require.NoError(t, m.Remove(ctx, "a", "b"))
}

func TestRootRemoveRefusedWhileMountedInAnotherNamespace(t *testing.T) {
	requireRoot(t)
	noLoopLeak(t)
	ctx := context.Background()
	m := newManager(t)
	dir, err := m.Ensure(ctx, "t/p", Spec{Name: "w", Path: "/w", SizeBytes: MinSize})
	require.NoError(t, err)

	// A process in a private copy of our mount namespace holds the mount,
	// as a container with the volume bind-mounted does.
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sleep", "60")
	require.NoError(t, cmd.Start())
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(stop)
	self, _ := os.Readlink("/proc/self/ns/mnt")
	require.Eventually(t, func() bool {
		// unshare execs sleep once the namespace is set up.
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", cmd.Process.Pid))
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", cmd.Process.Pid))
		return ns != "" && ns != self && strings.TrimSpace(string(comm)) == "sleep"
	}, 5*time.Second, 10*time.Millisecond)

	err = m.Remove(ctx, "t/p", "w")
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	assert.Contains(t, err.Error(), fmt.Sprintf("pid %d", cmd.Process.Pid))
	_, ok, _ := mountedAt(dir)
	assert.True(t, ok)

	stop()
	require.NoError(t, m.Remove(ctx, "t/p", "w"))
}

func TestRootArchiveRestoreS3(t *testing.T) {
	requireRoot(t)
	cfg := s3test.Start(t)
	store, err := objstore.NewS3(context.Background(), cfg)
	require.NoError(t, err)
	testArchiveRestore(t, store)
}

func TestRootArchiveRestoreDir(t *testing.T) {
	requireRoot(t)
	store, err := objstore.NewDir(t.TempDir())
	require.NoError(t, err)
	testArchiveRestore(t, store)
}

func testArchiveRestore(t *testing.T, store objstore.Store) {
	noLoopLeak(t)
	ctx := context.Background()
	const owner = "tenant1/proj1"
	spec := Spec{Name: "tools", Path: "/home/dev/.tools", UID: 1000, GID: 1000, SizeBytes: 64 << 20}

	node1 := newManager(t)
	src, err := node1.Ensure(ctx, owner, spec)
	require.NoError(t, err)
	files := makeTree(t, src)

	info, err := node1.Archive(ctx, owner, spec, store, "volumes/tenant1/proj1/tools/1.tar.zst")
	require.NoError(t, err)
	assert.Equal(t, "volumes/tenant1/proj1/tools/1.tar.zst", info.Key)
	assert.Equal(t, files, info.Files)
	list, err := store.List(ctx, "volumes/tenant1/proj1/tools/")
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, info.Bytes, list[0].Size)
	assert.Less(t, info.Bytes, int64(3<<20), "compressed (the tree holds 1 MiB of zeros and 2 MiB of random data plus text)")

	// "Another node": a second Manager with its own root.
	node2 := newManager(t)
	dst, err := node2.Ensure(ctx, owner, spec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dst, "stale"), []byte("old"), 0o644))
	require.NoError(t, node2.Restore(ctx, owner, spec, store, info.Key))
	assert.Equal(t, snapshotTree(t, src), snapshotTree(t, dst))
	_, err = os.Lstat(filepath.Join(dst, "stale"))
	assert.ErrorIs(t, err, fs.ErrNotExist, "restore replaces the content")
	assert.Equal(t, 1, mountCount(t, dst))

	// Restore creates a missing volume.
	node3 := newManager(t)
	require.NoError(t, node3.Restore(ctx, owner, spec, store, info.Key))
	dst3 := filepath.Join(node3.Root(), "tenant1", "proj1", "tools", "mnt")
	assert.Equal(t, snapshotTree(t, src), snapshotTree(t, dst3))

	// A missing archive: not found, and the volume is still there.
	err = node2.Restore(ctx, owner, spec, store, "volumes/nothing")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	assert.Equal(t, snapshotTree(t, src), snapshotTree(t, dst))

	// Archive of a missing volume.
	_, err = node2.Archive(ctx, owner, Spec{Name: "nope", Path: "/nope"}, store, "x")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	for _, m := range []*Manager{node1, node2, node3} {
		require.NoError(t, m.Remove(ctx, owner, spec.Name))
	}
}

func TestRootRestoreRefusesEscapes(t *testing.T) {
	requireRoot(t)
	noLoopLeak(t)
	ctx := context.Background()
	store, err := objstore.NewDir(t.TempDir())
	require.NoError(t, err)
	m := newManager(t)
	spec := Spec{Name: "w", Path: "/w", SizeBytes: MinSize}
	dir, err := m.Ensure(ctx, "t/p", spec)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "precious"), []byte("keep me"), 0o644))
	outside := t.TempDir()

	cases := map[string][]tarEntry{
		"dotdot":       {{name: "../escaped", body: "x"}},
		"absolute":     {{name: "/escaped", body: "x"}},
		"symlink-abs":  {{name: "evil", link: outside, typ: tar.TypeSymlink}, {name: "evil/escaped", body: "x"}},
		"symlink-rel":  {{name: "evil", link: "../../../../../../../../" + outside, typ: tar.TypeSymlink}, {name: "evil/escaped", body: "x"}},
		"hardlink-out": {{name: "h", link: "../../etc/passwd", typ: tar.TypeLink}},
		"root-not-dir": {{name: ".", body: "x"}},
		"truncated":    {{name: "ok", body: "x"}, {name: "big", body: strings.Repeat("y", 1<<20)}, {corrupt: true}},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			key := "bad/" + name
			require.NoError(t, store.Put(ctx, key, bytes.NewReader(makeArchive(t, entries)), -1))
			err := m.Restore(ctx, "t/p", spec, store, key)
			require.Error(t, err)
			if name == "dotdot" || name == "absolute" || name == "hardlink-out" {
				assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
				assert.Contains(t, err.Error(), "escapes the volume")
			}
			_, err = os.Lstat(filepath.Join(outside, "escaped"))
			assert.ErrorIs(t, err, fs.ErrNotExist, "nothing written outside")
			got, err := os.ReadFile(filepath.Join(dir, "precious"))
			require.NoError(t, err, "previous content back in service")
			assert.Equal(t, "keep me", string(got))
		})
	}
	require.NoError(t, m.Remove(ctx, "t/p", "w"))
}

// A device node in an archive (one made by an older envd, or by hand) is
// not restored: the rest of the archive is, and no device appears.
func TestRootRestoreDropsDevices(t *testing.T) {
	requireRoot(t)
	noLoopLeak(t)
	ctx := context.Background()
	store, err := objstore.NewDir(t.TempDir())
	require.NoError(t, err)
	m := newManager(t)
	spec := Spec{Name: "w", Path: "/w", SizeBytes: MinSize}
	dir, err := m.Ensure(ctx, "t/p", spec)
	require.NoError(t, err)
	require.NoError(t, store.Put(ctx, "devices", bytes.NewReader(makeArchive(t, []tarEntry{
		{name: "before", body: "a"},
		{name: "disk", typ: tar.TypeBlock},
		{name: "mem", typ: tar.TypeChar},
		{name: "pipe", typ: tar.TypeFifo},
		{name: "after", body: "b"},
	})), -1))
	require.NoError(t, m.Restore(ctx, "t/p", spec, store, "devices"))
	for _, name := range []string{"disk", "mem"} {
		_, err := os.Lstat(filepath.Join(dir, name))
		assert.ErrorIs(t, err, fs.ErrNotExist, name)
	}
	fi, err := os.Lstat(filepath.Join(dir, "pipe"))
	require.NoError(t, err)
	assert.Equal(t, fs.ModeNamedPipe, fi.Mode().Type())
	for name, want := range map[string]string{"before": "a", "after": "b"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.Equal(t, want, string(got))
	}
	require.NoError(t, m.Remove(ctx, "t/p", "w"))
}

type tarEntry struct {
	name, body, link string
	typ              byte
	corrupt          bool
}

func makeArchive(t *testing.T, entries []tarEntry) []byte {
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	require.NoError(t, err)
	tw := tar.NewWriter(zw)
	truncate := false
	for _, e := range entries {
		if e.corrupt {
			truncate = true
			break
		}
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: e.name, Linkname: e.link, Typeflag: typ, Mode: 0o644, Size: int64(len(e.body)), Format: tar.FormatPAX}))
		_, err := tw.Write([]byte(e.body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	if truncate { // a cut-off upload: the zstd frame is incomplete
		return buf.Bytes()[:buf.Len()/2]
	}
	return buf.Bytes()
}

// makeTree fills dir with every kind of entry an archive must keep and
// returns the number of entries.
func makeTree(t *testing.T, dir string) int {
	t.Helper()
	p := func(n string) string { return filepath.Join(dir, n) }
	random := make([]byte, 2<<20)
	_, _ = rand.Read(random)
	require.NoError(t, os.MkdirAll(p("src/pkg/deep"), 0o755))
	require.NoError(t, os.Mkdir(p("empty"), 0o700))
	require.NoError(t, os.Mkdir(p("bin"), 0o755))
	require.NoError(t, os.WriteFile(p("src/main.go"), []byte("package main\n"), 0o644))
	require.NoError(t, os.WriteFile(p("src/pkg/deep/data.bin"), random, 0o600))
	require.NoError(t, os.WriteFile(p("zeros"), make([]byte, 1<<20), 0o644))
	require.NoError(t, os.WriteFile(p("bin/tool"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	require.NoError(t, os.WriteFile(p("bin/suid"), []byte("x"), 0o644))
	require.NoError(t, os.Chmod(p("bin/suid"), 0o4755|fs.ModeSetuid))
	require.NoError(t, os.Chmod(p("empty"), 0o1777|fs.ModeSticky))
	require.NoError(t, os.WriteFile(p("empty-file"), nil, 0o640))
	require.NoError(t, os.Symlink("tool", p("bin/tool-link")))
	require.NoError(t, os.Symlink("/usr/bin/env", p("bin/abs-link")))
	require.NoError(t, os.Symlink("../nowhere", p("dangling")))
	require.NoError(t, os.Link(p("bin/tool"), p("hardlink-to-tool")))
	require.NoError(t, os.Link(p("bin/tool"), p("src/another-hardlink")))
	require.NoError(t, unix.Mkfifo(p("fifo"), 0o620))
	require.NoError(t, unix.Setxattr(p("src/main.go"), "user.origin", []byte("laptop\x00bin"), 0))
	require.NoError(t, unix.Setxattr(p("src"), "user.dir", []byte("d"), 0))
	require.NoError(t, unix.Setxattr(p("bin/tool"), "trusted.x", []byte("t"), 0))
	require.NoError(t, os.Lchown(p("src/main.go"), 1000, 1000))
	require.NoError(t, os.Lchown(p("src/pkg"), 1234, 5678))
	require.NoError(t, os.Lchown(p("bin/tool-link"), 42, 43))
	require.NoError(t, os.Lchown(p("fifo"), 7, 8))
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, os.Chtimes(p("src/main.go"), old, old))
	require.NoError(t, os.Chtimes(p("src/pkg"), old, old))
	n := 0
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		if path == dir {
			return nil
		}
		if d.Name() == lostFound {
			return fs.SkipDir
		}
		n++
		return nil
	}))
	return n
}

type entry struct {
	Mode     uint32
	UID, GID uint32
	Size     int64
	SHA      string
	Link     string
	Xattrs   string
	MTime    int64  // not for symlinks
	LinkedTo string // first name of the same inode, for hardlinks
}

// snapshotTree describes every entry under dir (lost+found excepted).
func snapshotTree(t *testing.T, dir string) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	inodes := map[uint64]string{}
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, _ := filepath.Rel(dir, path)
		if rel == lostFound {
			return fs.SkipDir
		}
		st := lstat(t, path)
		e := entry{Mode: st.Mode, UID: st.Uid, GID: st.Gid}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			data, err := os.ReadFile(path)
			require.NoError(t, err)
			e.Size = int64(len(data))
			e.SHA = fmt.Sprintf("%x", sha256.Sum256(data))
			if st.Nlink > 1 {
				if first, ok := inodes[st.Ino]; ok {
					e.LinkedTo = first
				} else {
					inodes[st.Ino] = rel
				}
			}
			e.MTime = st.Mtim.Nano()
		case unix.S_IFLNK:
			e.Link, err = os.Readlink(path)
			require.NoError(t, err)
		case unix.S_IFDIR:
			if rel != "." {
				e.MTime = st.Mtim.Nano()
			}
		default:
			e.MTime = st.Mtim.Nano()
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			e.Xattrs = xattrString(t, path)
		}
		out[rel] = e
		return nil
	}))
	return out
}

func xattrString(t *testing.T, path string) string {
	sz, err := unix.Llistxattr(path, nil)
	require.NoError(t, err)
	if sz == 0 {
		return ""
	}
	buf := make([]byte, sz)
	sz, err = unix.Llistxattr(path, buf)
	require.NoError(t, err)
	names := strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00")
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		v := make([]byte, 256)
		vn, err := unix.Lgetxattr(path, n, v)
		require.NoError(t, err)
		fmt.Fprintf(&b, "%s=%q;", n, v[:vn])
	}
	return b.String()
}

func lstat(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Lstat(p, &st))
	return &st
}

func mountCount(t *testing.T, dir string) int {
	infos, err := mountinfo.Read("/proc/self/mountinfo")
	require.NoError(t, err)
	n := 0
	for _, mi := range infos {
		if mi.MountPoint == dir {
			n++
		}
	}
	return n
}

// Detach unmounts every volume of the manager and keeps the images, so a
// later Ensure mounts them again with their content.
func TestRootDetach(t *testing.T) {
	requireRoot(t)
	m, err := NewManager(t.TempDir())
	require.NoError(t, err)
	ctx := context.Background()
	s := Spec{Name: "work", Path: "/workspace", SizeBytes: MinSize}
	dir, err := m.Ensure(ctx, "t/p", s)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "kept"), []byte("yes"), 0o644))
	require.NoError(t, m.Detach(ctx))
	_, mounted, err := mountedAt(dir)
	require.NoError(t, err)
	assert.False(t, mounted)
	dir, err = m.Ensure(ctx, "t/p", s)
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "kept"))
	require.NoError(t, err)
	assert.Equal(t, "yes", string(b))
	require.NoError(t, m.Remove(ctx, "t/p", "work"))
}
