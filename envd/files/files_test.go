package files

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// self is the identity of the test process: the tests need no root.
func self() Identity {
	return Identity{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}
}

// tree makes <tmp>/outside/secret and the root <tmp>/root, and opens it.
func tree(t *testing.T) (*Root, string) {
	t.Helper()
	base := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(base, "outside"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(base, "outside", "secret"), []byte("host secret"), 0o644))
	dir := filepath.Join(base, "root")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "etc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc", "secret"), []byte("instance file"), 0o644))
	r, err := Open(dir, self())
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r, dir
}

func read(t *testing.T, r *Root, p string) (string, error) {
	t.Helper()
	f, _, err := r.OpenFile(context.Background(), p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	return string(b), nil
}

func TestCleanRefusesBadPaths(t *testing.T) {
	for _, p := range []string{"", "etc/x", "/etc/../x", "/..", "/a/\x00b"} {
		_, err := Clean(p)
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, p)
	}
	rel, err := Clean("//etc/./x/")
	require.NoError(t, err)
	assert.Equal(t, "etc/x", rel)
}

func TestSymlinksStayInsideTheRoot(t *testing.T) {
	r, dir := tree(t)
	links := map[string]string{
		"dotdot":   "../../outside/secret",
		"deep":     "../../../../../../../../outside/secret",
		"absolute": "/../outside/secret",
		"absetc":   "/etc/secret",
		"dirlink":  "../..",
	}
	for name, target := range links {
		require.NoError(t, os.Symlink(target, filepath.Join(dir, name)))
	}
	tests := []struct {
		name, path, want string
		kind             error
	}{
		{"relative escape", "/dotdot", "", errdefs.ErrNotFound},
		{"deep escape", "/deep", "", errdefs.ErrNotFound},
		{"absolute escape", "/absolute", "", errdefs.ErrNotFound},
		{"absolute inside", "/absetc", "instance file", nil},
		{"through a dir link", "/dirlink/outside/secret", "", errdefs.ErrNotFound},
		{"dir link to the root", "/dirlink/etc/secret", "instance file", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := read(t, r, tc.path)
			if tc.kind != nil {
				require.ErrorIs(t, err, tc.kind)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	// A write through an escaping link lands inside the root.
	require.NoError(t, os.Symlink("/../outside", filepath.Join(dir, "out")))
	_, err := r.WriteFile(context.Background(), "/out/secret", strings.NewReader("x"), WriteOptions{})
	require.ErrorIs(t, err, errdefs.ErrNotFound)
	assert.Contains(t, err.Error(), `parent directory "/out"`)
	b, err := os.ReadFile(filepath.Join(dir, "..", "outside", "secret"))
	require.NoError(t, err)
	assert.Equal(t, "host secret", string(b))
}

func TestSymlinkSwappedMidOperation(t *testing.T) {
	r, dir := tree(t)
	d := filepath.Join(dir, "d")
	require.NoError(t, os.MkdirAll(d, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(d, "secret"), []byte("instance file"), 0o644))
	alt := filepath.Join(dir, "d.alt")
	require.NoError(t, os.Symlink("../../outside", alt))
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			// Swap the directory and the escaping symlink back and forth.
			_ = os.Rename(d, d+".tmp")
			_ = os.Rename(alt, d)
			_ = os.Rename(d, alt)
			_ = os.Rename(d+".tmp", d)
		}
	}()
	for range 2000 {
		got, err := read(t, r, "/d/secret")
		if err == nil {
			assert.Equal(t, "instance file", got)
		}
		fi, err := r.List(context.Background(), "/d", ListOptions{})
		if err == nil {
			for _, e := range fi.Entries {
				assert.NotEqual(t, "host secret", e.Name)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
}

func TestNodeRootRefusesMagicLinksDevicesAndPseudoFS(t *testing.T) {
	// The node's own "/" as a root: it has /proc and /dev.
	r, err := Open("/", self())
	require.NoError(t, err)
	defer r.Close()
	for _, tc := range []struct{ name, path, msg string }{
		{"magic link", "/proc/self/root/etc/hostname", "magic link"},
		{"device node", "/dev/null", "device node"},
		{"procfs", "/proc/self/status", "proc filesystem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := read(t, r, tc.path)
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	_, err = r.List(context.Background(), "/proc", ListOptions{})
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	// An archive leaves out device nodes and the pseudo filesystems below
	// it (devpts at /dev/pts).
	var b bytes.Buffer
	require.NoError(t, r.WriteArchive(context.Background(), "/dev", &b, FormatTar))
	tr := tar.NewReader(&b)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		assert.NotContains(t, []byte{tar.TypeChar, tar.TypeBlock}, h.Typeflag, h.Name)
		assert.False(t, strings.HasPrefix(h.Name, "pts/"), h.Name)
	}
}

func TestWriteReadListModes(t *testing.T) {
	r, dir := tree(t)
	ctx := context.Background()
	content := bytes.Repeat([]byte{0, 1, 2, 0xff, '\n'}, 100000)
	fi, err := r.WriteFile(ctx, "/work/a/b/bin.dat", bytes.NewReader(content), WriteOptions{Mode: 0o750, SetMode: true, Parents: true})
	require.NoError(t, err)
	assert.Equal(t, "0750", fi.Mode)
	assert.Equal(t, int64(len(content)), fi.Size)
	got, err := read(t, r, "/work/a/b/bin.dat")
	require.NoError(t, err)
	assert.Equal(t, string(content), got)
	// Overwrite keeps the mode.
	_, err = r.WriteFile(ctx, "/work/a/b/bin.dat", strings.NewReader("new"), WriteOptions{})
	require.NoError(t, err)
	st, err := os.Stat(filepath.Join(dir, "work/a/b/bin.dat"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o750), st.Mode().Perm())
	// No temp file is left beside it.
	names, err := os.ReadDir(filepath.Join(dir, "work/a/b"))
	require.NoError(t, err)
	assert.Len(t, names, 1)

	require.NoError(t, os.Symlink("bin.dat", filepath.Join(dir, "work/a/b/link")))
	l, err := r.List(ctx, "/work/a/b", ListOptions{})
	require.NoError(t, err)
	require.Len(t, l.Entries, 2)
	assert.Equal(t, types.FileInfo{Name: "bin.dat", Path: "/work/a/b/bin.dat", Type: "file", Size: 3, Mode: "0750",
		ModTime: l.Entries[0].ModTime, UID: os.Getuid(), GID: os.Getgid()}, l.Entries[0])
	assert.Equal(t, "symlink", l.Entries[1].Type)
	assert.Equal(t, "bin.dat", l.Entries[1].LinkTarget)

	tests := []struct {
		name string
		do   func() error
		kind error
		msg  string
	}{
		{"missing parent", func() error {
			_, err := r.WriteFile(ctx, "/nope/x", strings.NewReader(""), WriteOptions{})
			return err
		}, errdefs.ErrNotFound, `parent directory "/nope"`},
		{"file over a directory", func() error {
			_, err := r.WriteFile(ctx, "/work", strings.NewReader(""), WriteOptions{})
			return err
		}, errdefs.ErrFailedPrecondition, "is a directory"},
		{"read a directory", func() error { _, err := read(t, r, "/work"); return err }, errdefs.ErrFailedPrecondition, "is a directory"},
		{"list a file", func() error { _, err := r.List(ctx, "/work/a/b/bin.dat", ListOptions{}); return err }, errdefs.ErrFailedPrecondition, "not a directory"},
		{"too large", func() error {
			_, err := r.WriteFile(ctx, "/big", bytes.NewReader(make([]byte, 11)), WriteOptions{MaxBytes: 10})
			return err
		}, errdefs.ErrTooLarge, "limit of 10 bytes"},
		{"remove a non-empty dir", func() error { return r.Remove(ctx, "/work", false) }, errdefs.ErrFailedPrecondition, "recursive=1"},
		{"remove the root", func() error { return r.Remove(ctx, "/", true) }, errdefs.ErrInvalidArgument, "root"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do()
			require.ErrorIs(t, err, tc.kind)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	_, err = os.Stat(filepath.Join(dir, "big"))
	assert.True(t, os.IsNotExist(err), "a refused write leaves nothing")
}

func TestMkdirMoveCopyRemove(t *testing.T) {
	r, dir := tree(t)
	ctx := context.Background()
	fi, err := r.Mkdir(ctx, "/p/q", 0o700, true)
	require.NoError(t, err)
	assert.Equal(t, "0700", fi.Mode)
	_, err = r.Mkdir(ctx, "/p/q", 0o700, false)
	require.ErrorIs(t, err, errdefs.ErrAlreadyExists)
	_, err = r.WriteFile(ctx, "/p/q/f", strings.NewReader("hello"), WriteOptions{})
	require.NoError(t, err)
	require.NoError(t, os.Symlink("f", filepath.Join(dir, "p/q/l")))

	c, err := r.Copy(ctx, "/p", "/p2", false)
	require.NoError(t, err)
	assert.Equal(t, "dir", c.Type)
	got, err := read(t, r, "/p2/q/l")
	require.NoError(t, err)
	assert.Equal(t, "hello", got)
	_, err = r.Copy(ctx, "/p", "/p2", false)
	require.ErrorIs(t, err, errdefs.ErrAlreadyExists)
	_, err = r.Copy(ctx, "/p", "/p/q/p", false)
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)

	_, err = r.Move(ctx, "/p2/q/f", "/p2/g", false)
	require.NoError(t, err)
	_, err = r.Move(ctx, "/p/q/f", "/p2/g", false)
	require.ErrorIs(t, err, errdefs.ErrAlreadyExists)
	_, err = r.Move(ctx, "/p/q/f", "/p2/g", true)
	require.NoError(t, err)
	_, err = r.Move(ctx, "/missing", "/p2/h", true)
	require.ErrorIs(t, err, errdefs.ErrNotFound)

	require.NoError(t, r.Remove(ctx, "/p2", true))
	_, err = os.Lstat(filepath.Join(dir, "p2"))
	assert.True(t, os.IsNotExist(err))
	// A recursive removal does not follow a symlink out.
	require.NoError(t, os.Symlink("../outside", filepath.Join(dir, "p/out")))
	require.NoError(t, r.Remove(ctx, "/p", true))
	_, err = os.Stat(filepath.Join(dir, "..", "outside", "secret"))
	assert.NoError(t, err)
}

func tarOf(t *testing.T, entries ...*tar.Header) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(h.Linkname))
			body := h.Linkname
			h.Linkname = ""
			require.NoError(t, tw.WriteHeader(h))
			_, err := tw.Write([]byte(body))
			require.NoError(t, err)
			continue
		}
		require.NoError(t, tw.WriteHeader(h))
	}
	require.NoError(t, tw.Close())
	return b.Bytes()
}

func TestArchiveRoundTripAndHostileArchives(t *testing.T) {
	r, dir := tree(t)
	ctx := context.Background()
	good := tarOf(t,
		&tar.Header{Typeflag: tar.TypeDir, Name: "src/", Mode: 0o755},
		&tar.Header{Typeflag: tar.TypeReg, Name: "src/main.go", Mode: 0o640, Linkname: "package main", Uid: 0},
		&tar.Header{Typeflag: tar.TypeSymlink, Name: "src/link", Linkname: "main.go"},
	)
	n, err := r.ExtractArchive(ctx, "/proj", bytes.NewReader(good), ExtractOptions{Parents: true})
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	got, err := read(t, r, "/proj/src/link")
	require.NoError(t, err)
	assert.Equal(t, "package main", got)

	for _, format := range []string{FormatTar, FormatTarZstd} {
		var out bytes.Buffer
		require.NoError(t, r.WriteArchive(ctx, "/proj", &out, format))
		_, err = r.ExtractArchive(ctx, "/copy-"+strings.ReplaceAll(format, ".", "-"), &out, ExtractOptions{Parents: true})
		require.NoError(t, err, format)
		st, err := os.Stat(filepath.Join(dir, "copy-"+strings.ReplaceAll(format, ".", "-"), "src/main.go"))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o640), st.Mode().Perm())
	}

	hostile := []struct {
		name string
		tar  []byte
		msg  string
	}{
		{"dotdot name", tarOf(t, &tar.Header{Typeflag: tar.TypeReg, Name: "../../outside/evil", Linkname: "x"}), "escapes"},
		{"absolute name", tarOf(t, &tar.Header{Typeflag: tar.TypeReg, Name: "/etc/evil", Linkname: "x"}), "escapes"},
		{"device", tarOf(t, &tar.Header{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3}), "device node"},
		{"hard link out", tarOf(t, &tar.Header{Typeflag: tar.TypeLink, Name: "h", Linkname: "../outside/secret"}), "links to"},
		{"write through a symlink", tarOf(t,
			&tar.Header{Typeflag: tar.TypeSymlink, Name: "esc", Linkname: "/"},
			&tar.Header{Typeflag: tar.TypeReg, Name: "esc/evil", Linkname: "x"}), "symlink"},
	}
	for _, tc := range hostile {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.ExtractArchive(ctx, "/proj", bytes.NewReader(tc.tar), ExtractOptions{})
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
	for _, p := range []string{"outside/evil", "root/etc/evil", "evil"} {
		_, err := os.Lstat(filepath.Join(dir, "..", p))
		assert.True(t, os.IsNotExist(err), p)
	}
	_, err = r.ExtractArchive(ctx, "/proj", bytes.NewReader(good), ExtractOptions{MaxBytes: 100})
	require.ErrorIs(t, err, errdefs.ErrTooLarge)
}

func TestWatchEventsInOrder(t *testing.T) {
	r, dir := tree(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan types.FileEvent, 100)
	done := make(chan error, 1)
	in, err := NewInotify(0, 0)
	require.NoError(t, err)
	defer in.Close()
	go func() {
		done <- r.Watch(ctx, in, WatchOptions{Path: "/etc", Recursive: true, Key: "t"}, func(ev types.FileEvent) error { events <- ev; return nil })
	}()
	time.Sleep(200 * time.Millisecond) // the watch is set up
	etc := filepath.Join(dir, "etc")
	require.NoError(t, os.WriteFile(filepath.Join(etc, "a"), []byte("1"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(etc, "sub"), 0o755))
	time.Sleep(100 * time.Millisecond) // the new directory is watched
	require.NoError(t, os.WriteFile(filepath.Join(etc, "sub", "b"), []byte("2"), 0o644))
	require.NoError(t, os.Rename(filepath.Join(etc, "a"), filepath.Join(etc, "sub", "c")))
	require.NoError(t, os.Remove(filepath.Join(etc, "sub", "c")))
	want := []types.FileEvent{
		{Type: "create", Path: "/etc/a"},
		{Type: "modify", Path: "/etc/a"},
		{Type: "create", Path: "/etc/sub", Dir: true},
		{Type: "create", Path: "/etc/sub/b"},
		{Type: "modify", Path: "/etc/sub/b"},
		{Type: "move", Path: "/etc/sub/c", From: "/etc/a"},
		{Type: "delete", Path: "/etc/sub/c"},
	}
	var got []types.FileEvent
	timeout := time.After(5 * time.Second)
	for len(got) < len(want) {
		select {
		case ev := <-events:
			ev.Time = time.Time{}
			got = append(got, ev)
		case <-timeout:
			t.Fatalf("events so far: %+v", got)
		}
	}
	assert.Equal(t, want, got)
	cancel()
	require.NoError(t, <-done)
}

func TestWriteThroughSymlinks(t *testing.T) {
	r, dir := tree(t)
	ctx := context.Background()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "real"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "real", "conf"), []byte("old"), 0o640))
	require.NoError(t, os.Symlink("real/conf", filepath.Join(dir, "cfg")))
	require.NoError(t, os.Symlink("/cfg", filepath.Join(dir, "cfg2")))
	require.NoError(t, os.Symlink("/../../outside/secret", filepath.Join(dir, "esc")))
	fi, err := r.WriteFile(ctx, "/cfg2", strings.NewReader("new"), WriteOptions{})
	require.NoError(t, err)
	assert.Equal(t, "/real/conf", fi.Path)
	assert.Equal(t, "0640", fi.Mode, "the target's mode is kept")
	b, err := os.ReadFile(filepath.Join(dir, "real", "conf"))
	require.NoError(t, err)
	assert.Equal(t, "new", string(b))
	st, err := os.Lstat(filepath.Join(dir, "cfg"))
	require.NoError(t, err)
	assert.Equal(t, os.ModeSymlink, st.Mode().Type(), "the links stay links")
	// A link that tries to leave leads to a path inside the root.
	_, err = r.WriteFile(ctx, "/esc", strings.NewReader("x"), WriteOptions{})
	require.ErrorIs(t, err, errdefs.ErrNotFound)
	assert.Contains(t, err.Error(), `parent directory "/outside"`)
	b, err = os.ReadFile(filepath.Join(dir, "..", "outside", "secret"))
	require.NoError(t, err)
	assert.Equal(t, "host secret", string(b))
	require.NoError(t, os.Symlink("loop", filepath.Join(dir, "loop")))
	_, err = r.WriteFile(ctx, "/loop", strings.NewReader("x"), WriteOptions{})
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}
