package tarfs_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/tarfs"
)

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root: chown, mknod, trusted.* xattrs (CI runs as root)")
	}
}

// node is what a user sees of one entry of a tree.
type node struct {
	Mode     uint32 // type and permission bits
	UID, GID uint32
	SHA      string // regular files
	Link     string // symlink target
	Rdev     uint64 // devices
	MtimeNs  int64  // not for directories of the root
	Xattrs   string
	LinkedTo string // first name of the same inode, for hard links
}

// snapshot describes every entry below dir (the root's mtime left out: a
// restore changes it after the fact).
func snapshot(t *testing.T, dir string) map[string]node {
	t.Helper()
	out := map[string]node{}
	inodes := map[uint64]string{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		require.NoError(t, err)
		rel, err := filepath.Rel(dir, p)
		require.NoError(t, err)
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(p, &st))
		n := node{Mode: st.Mode, UID: st.Uid, GID: st.Gid, MtimeNs: st.Mtim.Nano()}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			n.SHA = fmt.Sprintf("%x", sha256.Sum256(b))
			if st.Nlink > 1 {
				if first, ok := inodes[st.Ino]; ok {
					n.LinkedTo = first
				} else {
					inodes[st.Ino] = rel
				}
			}
		case unix.S_IFLNK:
			n.Link, err = os.Readlink(p)
			require.NoError(t, err)
		case unix.S_IFCHR, unix.S_IFBLK:
			n.Rdev = st.Rdev
		}
		if rel == "." {
			n.MtimeNs = 0
		}
		n.Xattrs = xattrString(t, p)
		out[rel] = n
		return nil
	}))
	return out
}

func xattrString(t *testing.T, p string) string {
	t.Helper()
	sz, err := unix.Llistxattr(p, nil)
	require.NoError(t, err)
	if sz == 0 {
		return ""
	}
	buf := make([]byte, sz)
	sz, err = unix.Llistxattr(p, buf)
	require.NoError(t, err)
	names := strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00")
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		v := make([]byte, 1024)
		vn, err := unix.Lgetxattr(p, n, v)
		require.NoError(t, err)
		fmt.Fprintf(&b, "%s=%q;", n, v[:vn])
	}
	return b.String()
}

// roundTrip writes src to a tar and extracts it into a new directory.
func roundTrip(t *testing.T, src string, wo tarfs.Options, eo tarfs.ExtractOptions) string {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_, err := tarfs.Write(context.Background(), src, tw, wo)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	dst := t.TempDir()
	_, err = tarfs.Extract(context.Background(), dst, &buf, eo)
	require.NoError(t, err)
	return dst
}

func acl(uid uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range []struct {
		tag  uint16
		perm uint16
		id   uint32
	}{{1, 6, ^uint32(0)}, {2, 4, uid}, {4, 4, ^uint32(0)}, {0x10, 4, ^uint32(0)}, {0x20, 4, ^uint32(0)}} {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// TestRootRoundTrip: a tree written by Write and restored by Extract is
// the same tree, kind by kind.
func TestRootRoundTrip(t *testing.T) {
	requireRoot(t)
	at := time.Date(2021, 3, 4, 5, 6, 7, 123456789, time.UTC)
	tests := []struct {
		name string
		make func(t *testing.T, p func(string) string)
	}{
		{"modes and owners", func(t *testing.T, p func(string) string) {
			require.NoError(t, os.WriteFile(p("f"), []byte("content"), 0o640))
			require.NoError(t, os.Chown(p("f"), 1000, 2000))
			require.NoError(t, os.Mkdir(p("d"), 0o750))
			require.NoError(t, os.Chown(p("d"), 3000000, 7))
			require.NoError(t, os.WriteFile(p("d/empty"), nil, 0o600))
		}},
		{"setuid setgid sticky", func(t *testing.T, p func(string) string) {
			require.NoError(t, os.WriteFile(p("suid"), []byte("x"), 0o755))
			require.NoError(t, unix.Chmod(p("suid"), 0o4755))
			require.NoError(t, os.Mkdir(p("tmp"), 0o777))
			require.NoError(t, unix.Chmod(p("tmp"), 0o1777))
			require.NoError(t, os.Mkdir(p("shared"), 0o775))
			require.NoError(t, unix.Chmod(p("shared"), 0o2775))
		}},
		{"xattrs capability and acl", func(t *testing.T, p func(string) string) {
			require.NoError(t, os.WriteFile(p("ping"), []byte("elf"), 0o755))
			require.NoError(t, unix.Setxattr(p("ping"), "user.origin", []byte("laptop\x00bin"), 0))
			require.NoError(t, unix.Setxattr(p("ping"), "trusted.t", []byte("t"), 0))
			capNetRaw := binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, 0x02000001), 1<<13)
			capNetRaw = append(capNetRaw, make([]byte, 12)...)
			require.NoError(t, unix.Setxattr(p("ping"), "security.capability", capNetRaw, 0))
			require.NoError(t, os.Mkdir(p("d"), 0o755))
			require.NoError(t, unix.Setxattr(p("d"), "system.posix_acl_access", acl(1234), 0))
			require.NoError(t, unix.Setxattr(p("d"), "system.posix_acl_default", acl(1234), 0))
		}},
		{"hard links", func(t *testing.T, p func(string) string) {
			require.NoError(t, os.MkdirAll(p("a/b"), 0o755))
			require.NoError(t, os.WriteFile(p("a/first"), []byte("shared"), 0o644))
			require.NoError(t, os.Link(p("a/first"), p("a/b/second")))
			require.NoError(t, os.Link(p("a/first"), p("third")))
		}},
		{"symlinks", func(t *testing.T, p func(string) string) {
			require.NoError(t, os.Mkdir(p("bin"), 0o755))
			require.NoError(t, os.Symlink("busybox", p("bin/sh")))
			require.NoError(t, os.Symlink("/etc/passwd", p("abs")))
			require.NoError(t, os.Symlink("../../nowhere", p("bin/dangling")))
			require.NoError(t, os.Symlink("bin", p("bindir")))
			require.NoError(t, os.Lchown(p("abs"), 42, 43))
		}},
		{"fifo", func(t *testing.T, p func(string) string) {
			require.NoError(t, unix.Mkfifo(p("pipe"), 0o620))
			require.NoError(t, os.Lchown(p("pipe"), 7, 8))
		}},
		{"devices", func(t *testing.T, p func(string) string) {
			require.NoError(t, unix.Mknod(p("null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
			require.NoError(t, unix.Mknod(p("sda"), unix.S_IFBLK|0o660, int(unix.Mkdev(8, 0))))
			require.NoError(t, unix.Chmod(p("null"), 0o666))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := t.TempDir()
			tt.make(t, func(n string) string { return filepath.Join(src, n) })
			// Every entry an mtime with nanoseconds, children first.
			var paths []string
			require.NoError(t, filepath.WalkDir(src, func(p string, _ fs.DirEntry, err error) error {
				paths = append(paths, p)
				return err
			}))
			for i := len(paths) - 1; i > 0; i-- {
				ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(at.UnixNano())}
				require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, paths[i], ts, unix.AT_SYMLINK_NOFOLLOW))
			}
			dst := roundTrip(t, src, tarfs.Options{Root: true, Times: tarfs.Nanoseconds}, tarfs.ExtractOptions{Devices: true})
			assert.Equal(t, snapshot(t, src), snapshot(t, dst))
		})
	}
}

// TestRootOverlayXattrsNeverWritten: overlay's own xattrs stay out of every
// tar, whatever the options; other trusted.* ones are kept.
func TestRootOverlayXattrsNeverWritten(t *testing.T) {
	requireRoot(t)
	src := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(src, "d"), 0o755))
	require.NoError(t, unix.Setxattr(filepath.Join(src, "d"), "trusted.overlay.origin", []byte("x"), 0))
	require.NoError(t, unix.Setxattr(filepath.Join(src, "d"), "trusted.kept", []byte("k"), 0))
	for _, opts := range []tarfs.Options{{}, {Overlay: true}, {Root: true, Times: tarfs.Nanoseconds}} {
		hdrs := walkHeaders(t, src, opts)
		assert.Equal(t, map[string]string{tarfs.PAXXattr + "trusted.kept": "k"}, hdrs["d/"].PAXRecords)
	}
}

func walkHeaders(t *testing.T, dir string, opts tarfs.Options) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	_, err := tarfs.Walk(context.Background(), dir, opts, func(e *tarfs.Entry) error {
		out[e.Header.Name] = e.Header
		return nil
	})
	require.NoError(t, err)
	return out
}

// walkNames lists the names of a walk in order.
func walkNames(t *testing.T, dir string, opts tarfs.Options) ([]string, tarfs.Stats, error) {
	t.Helper()
	var names []string
	st, err := tarfs.Walk(context.Background(), dir, opts, func(e *tarfs.Entry) error {
		names = append(names, e.Header.Name)
		return nil
	})
	return names, st, err
}

// TestRootWalkOverlay is the save path's hook: whiteouts and opaque
// directories of an upper dir become OCI markers.
func TestRootWalkOverlay(t *testing.T) {
	requireRoot(t)
	upper := t.TempDir()
	p := func(n string) string { return filepath.Join(upper, n) }
	require.NoError(t, os.MkdirAll(p("etc/opaque"), 0o755))
	require.NoError(t, os.WriteFile(p("etc/opaque/new"), []byte("n"), 0o644))
	require.NoError(t, unix.Setxattr(p("etc/opaque"), "trusted.overlay.opaque", []byte("y"), 0))
	require.NoError(t, unix.Mknod(p("etc/gone"), unix.S_IFCHR, 0))
	require.NoError(t, unix.Mknod(p("etc/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	require.NoError(t, os.WriteFile(p("etc/a"), []byte("a"), 0o644))

	tests := []struct {
		name  string
		opts  tarfs.Options
		want  []string
		stats tarfs.Stats
	}{
		{"overlay", tarfs.Options{Overlay: true},
			[]string{"etc/", "etc/.wh.gone", "etc/a", "etc/null", "etc/opaque/", "etc/opaque/.wh..wh..opq", "etc/opaque/new"},
			tarfs.Stats{Entries: 7, Whiteouts: 1, OpaqueDirs: 1}},
		{"plain directory", tarfs.Options{},
			[]string{"etc/", "etc/a", "etc/gone", "etc/null", "etc/opaque/", "etc/opaque/new"},
			tarfs.Stats{Entries: 6}},
		{"no devices", tarfs.Options{NoDevices: true},
			[]string{"etc/", "etc/a", "etc/opaque/", "etc/opaque/new"},
			tarfs.Stats{Entries: 4}},
		{"skip", tarfs.Options{Overlay: true, Skip: func(rel string) bool { return rel == "etc/opaque" || rel == "etc/gone" }},
			[]string{"etc/", "etc/a", "etc/null"},
			tarfs.Stats{Entries: 3}},
		{"root", tarfs.Options{Root: true, NoDevices: true, Skip: func(rel string) bool { return rel == "etc/opaque" }},
			[]string{"./", "etc/", "etc/a"},
			tarfs.Stats{Entries: 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			names, st, err := walkNames(t, upper, tt.opts)
			require.NoError(t, err)
			assert.Equal(t, tt.want, names)
			assert.Equal(t, tt.stats, st)
		})
	}
	hdrs := walkHeaders(t, upper, tarfs.Options{Overlay: true})
	for _, n := range []string{"etc/.wh.gone", "etc/opaque/.wh..wh..opq"} {
		assert.Equal(t, byte(tar.TypeReg), hdrs[n].Typeflag, n)
		assert.Equal(t, int64(0), hdrs[n].Mode, n)
		assert.Equal(t, int64(0), hdrs[n].ModTime.Unix(), n)
		assert.Empty(t, hdrs[n].PAXRecords, n)
	}
	assert.Empty(t, hdrs["etc/opaque/"].PAXRecords, "overlay xattrs are not written")

	// An upper dir a layer cannot express is refused.
	require.NoError(t, unix.Setxattr(p("etc/opaque"), "trusted.overlay.redirect", []byte("/x"), 0))
	_, _, err := walkNames(t, upper, tarfs.Options{Overlay: true})
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
}

// TestReadLayer is the migrations' hook: a layer's markers decoded.
func TestReadLayer(t *testing.T) {
	tests := []struct {
		name    string
		entries []*tar.Header
		want    []string // "kind path"
		err     error
	}{
		{"files", []*tar.Header{{Name: "./", Typeflag: tar.TypeDir}, {Name: "usr/", Typeflag: tar.TypeDir}, {Name: "/usr/bin/dot", Typeflag: tar.TypeReg}},
			[]string{"added .", "added usr", "added usr/bin/dot"}, nil},
		{"whiteout", []*tar.Header{{Name: "etc/.wh.hosts", Typeflag: tar.TypeReg}, {Name: ".wh.opt", Typeflag: tar.TypeReg}},
			[]string{"whiteout etc/hosts", "whiteout opt"}, nil},
		{"opaque", []*tar.Header{{Name: "var/cache/.wh..wh..opq", Typeflag: tar.TypeReg}, {Name: "./.wh..wh..opq", Typeflag: tar.TypeReg}},
			[]string{"opaque var/cache", "opaque ."}, nil},
		{"escape", []*tar.Header{{Name: "a/../../etc/passwd", Typeflag: tar.TypeReg}}, nil, errdefs.ErrInvalidArgument},
	}
	kinds := map[tarfs.Kind]string{tarfs.Added: "added", tarfs.Whiteout: "whiteout", tarfs.Opaque: "opaque"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			err := tarfs.ReadLayer(bytes.NewReader(archiveOf(tt.entries...)), func(e tarfs.LayerEntry) error {
				got = append(got, kinds[e.Kind]+" "+e.Path)
				return nil
			})
			if tt.err != nil {
				assert.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestClean(t *testing.T) {
	tests := []struct {
		name, want string
		bad        bool
	}{
		{"usr/bin/dot", "usr/bin/dot", false},
		{"./usr/bin/", "usr/bin", false},
		{"/etc/passwd", "etc/passwd", false},
		{"a//b/./c", "a/b/c", false},
		{"", ".", false},
		{"./", ".", false},
		{"/", ".", false},
		{"..", "", true},
		{"../etc", "", true},
		{"a/../../etc", "", true},
		{"a/../b", "", true},
		{"a/..", "", true},
		{"a\x00b", "", true},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.name), func(t *testing.T) {
			got, err := tarfs.Clean(tt.name)
			if tt.bad {
				assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// archiveOf builds a tar from headers, owned by the test's user; a regular
// file without a size gets its name as its body.
func archiveOf(hdrs ...*tar.Header) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range hdrs {
		var body []byte
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			body = []byte(h.Name)
			h.Size = int64(len(body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		h.Uid, h.Gid = os.Getuid(), os.Getgid()
		if err := tw.WriteHeader(h); err != nil {
			panic(err)
		}
		_, _ = tw.Write(body)
	}
	_ = tw.Close()
	return b.Bytes()
}

// TestExtractRefusesEscapes: no entry of an archive writes outside the
// directory, by name, hard link or a symlink an earlier entry made.
func TestExtractRefusesEscapes(t *testing.T) {
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "target"), []byte("secret"), 0o600))
	tests := []struct {
		name    string
		entries []*tar.Header
	}{
		{"dotdot", []*tar.Header{{Name: "../escaped", Typeflag: tar.TypeReg}}},
		{"nested dotdot", []*tar.Header{{Name: "a/", Typeflag: tar.TypeDir}, {Name: "a/../../escaped", Typeflag: tar.TypeReg}}},
		{"absolute", []*tar.Header{{Name: filepath.Join(outside, "escaped"), Typeflag: tar.TypeReg}}},
		{"symlink absolute", []*tar.Header{{Name: "evil", Typeflag: tar.TypeSymlink, Linkname: outside}, {Name: "evil/escaped", Typeflag: tar.TypeReg}}},
		{"symlink relative", []*tar.Header{{Name: "evil", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../../../.." + outside}, {Name: "evil/escaped", Typeflag: tar.TypeReg}}},
		{"symlink chain", []*tar.Header{{Name: "b", Typeflag: tar.TypeSymlink, Linkname: "../.."}, {Name: "a", Typeflag: tar.TypeSymlink, Linkname: "b"}, {Name: "a/escaped", Typeflag: tar.TypeReg}}},
		{"hard link out", []*tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: "../target"}}},
		{"hard link absolute", []*tar.Header{{Name: "h", Typeflag: tar.TypeLink, Linkname: filepath.Join(outside, "target")}}},
		{"hard link through symlink", []*tar.Header{{Name: "evil", Typeflag: tar.TypeSymlink, Linkname: outside}, {Name: "h", Typeflag: tar.TypeLink, Linkname: "evil/target"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := t.TempDir()
			_, err := tarfs.Extract(context.Background(), dst, bytes.NewReader(archiveOf(tt.entries...)), tarfs.ExtractOptions{What: "the volume"})
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			assert.Contains(t, err.Error(), "the volume")
			entries, err := os.ReadDir(outside)
			require.NoError(t, err)
			assert.Len(t, entries, 1, "nothing written outside")
			_, err = os.Lstat(filepath.Join(dst, "h"))
			assert.ErrorIs(t, err, fs.ErrNotExist, "no link to a file outside")
		})
	}
	// A symlink that stays inside is followed, as tar does.
	dst := t.TempDir()
	_, err := tarfs.Extract(context.Background(), dst, bytes.NewReader(archiveOf(
		&tar.Header{Name: "real/", Typeflag: tar.TypeDir, Mode: 0o755},
		&tar.Header{Name: "alias", Typeflag: tar.TypeSymlink, Linkname: "real"},
		&tar.Header{Name: "alias/f", Typeflag: tar.TypeReg},
	)), tarfs.ExtractOptions{})
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(dst, "real/f"))
	require.NoError(t, err)
	assert.Equal(t, "alias/f", string(b))
}

// TestExtractReplaces: the later of two entries for one path wins, of
// whatever type; skipped names and device nodes are not written.
func TestExtractReplaces(t *testing.T) {
	dst := t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "x/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "x/inner", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "x", Typeflag: tar.TypeSymlink, Linkname: "elsewhere"},
		{Name: "skipped/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666},
	} {
		h.Uid, h.Gid = os.Getuid(), os.Getgid()
		require.NoError(t, tw.WriteHeader(h))
	}
	require.NoError(t, tw.Close())
	n, err := tarfs.Extract(context.Background(), dst, &buf, tarfs.ExtractOptions{Skip: func(name string) bool { return name == "skipped" }})
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	link, err := os.Readlink(filepath.Join(dst, "x"))
	require.NoError(t, err)
	assert.Equal(t, "elsewhere", link)
	for _, gone := range []string{"skipped", "dev"} {
		_, err = os.Lstat(filepath.Join(dst, gone))
		assert.ErrorIs(t, err, fs.ErrNotExist, gone)
	}
}

// TestRootOwnershipMapping: the ownership hooks of both directions, as an
// id-shifted save and a mapped restore use them.
func TestRootOwnershipMapping(t *testing.T) {
	requireRoot(t)
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644))
	require.NoError(t, os.Chown(filepath.Join(src, "f"), 101000, 101000))
	require.NoError(t, os.Symlink("f", filepath.Join(src, "l")))
	require.NoError(t, os.Lchown(filepath.Join(src, "l"), 100000, 100005))

	shift := func(h *tar.Header, path string) error {
		if h.Uid < 100000 || h.Gid < 100000 {
			return fmt.Errorf("%s: id outside the range: %w", path, errdefs.ErrFailedPrecondition)
		}
		h.Uid -= 100000
		h.Gid -= 100000
		return nil
	}
	hdrs := walkHeaders(t, src, tarfs.Options{MapIDs: shift})
	assert.Equal(t, [2]int{1000, 1000}, [2]int{hdrs["f"].Uid, hdrs["f"].Gid})
	assert.Equal(t, [2]int{0, 5}, [2]int{hdrs["l"].Uid, hdrs["l"].Gid})

	// The root (owned by 0) is outside the range: the hook's error ends the walk.
	_, _, err := walkNames(t, src, tarfs.Options{Root: true, MapIDs: shift})
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)

	dst := roundTrip(t, src, tarfs.Options{MapIDs: shift}, tarfs.ExtractOptions{
		MapOwner: func(uid, gid int) (int, int, error) { return uid + 5000, gid + 6000, nil },
	})
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(dst, "f"), &st))
	assert.Equal(t, [2]uint32{6000, 7000}, [2]uint32{st.Uid, st.Gid})
	require.NoError(t, unix.Lstat(filepath.Join(dst, "l"), &st))
	assert.Equal(t, [2]uint32{5000, 6005}, [2]uint32{st.Uid, st.Gid})
}

// TestWriteTimes: mtimes as each precision records them.
func TestWriteTimes(t *testing.T) {
	src := t.TempDir()
	at := time.Unix(1600000000, 700000000)
	require.NoError(t, os.WriteFile(filepath.Join(src, "f"), nil, 0o644))
	require.NoError(t, os.Chtimes(filepath.Join(src, "f"), at, at))
	for _, tt := range []struct {
		name  string
		times tarfs.Times
		want  time.Time
	}{
		{"seconds", tarfs.Seconds, time.Unix(1600000000, 0)},
		{"nanoseconds", tarfs.Nanoseconds, at},
		{"rounded", tarfs.RoundSeconds, time.Unix(1600000001, 0)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			tw := tar.NewWriter(&buf)
			_, err := tarfs.Write(context.Background(), src, tw, tarfs.Options{Times: tt.times})
			require.NoError(t, err)
			require.NoError(t, tw.Close())
			h, err := tar.NewReader(&buf).Next()
			require.NoError(t, err)
			assert.True(t, tt.want.Equal(h.ModTime), "got %v", h.ModTime)
		})
	}
	_, err := tarfs.Write(context.Background(), filepath.Join(src, "missing"), tar.NewWriter(io.Discard), tarfs.Options{})
	assert.ErrorIs(t, err, fs.ErrNotExist)
}
