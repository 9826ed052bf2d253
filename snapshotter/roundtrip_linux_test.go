package snapshotter

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/stargz-snapshotter/estargz"
	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	digest "github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/tarfs"
)

// The round-trip suite, in the style of continuity's fstest: build a lower
// tree, mount an overlay on it, make the case's changes through the merged
// dir (so the kernel writes real whiteouts and opaque dirs), unmount, Spool
// the upper dir, Encode it, unpack it with containerd's archive.Apply onto a
// copy of the lower tree and compare the result with the merged tree.

// testExcludes are the excludes every case is spooled with.
var testExcludes = append(slices.Clone(DefaultExcludes), "/workspace")

type roundTripCase struct {
	name   string
	change func(t *testing.T, merged string)
	// wantTar are entries (name, and for a hard link "name -> target") the
	// spool must contain.
	wantTar []string
}

var roundTripCases = []roundTripCase{
	{
		name:    "add file",
		change:  func(t *testing.T, m string) { writeFile(t, m, "home/user/new.txt", "new\n", 0o644) },
		wantTar: []string{"home/", "home/user/", "home/user/new.txt"},
	},
	{
		name:    "modify base file",
		change:  func(t *testing.T, m string) { writeFile(t, m, "etc/hosts", "127.0.0.1 envd\n", 0o644) },
		wantTar: []string{"etc/", "etc/hosts"},
	},
	{
		name:    "delete base file",
		change:  func(t *testing.T, m string) { require.NoError(t, os.Remove(filepath.Join(m, "etc/config/a.conf"))) },
		wantTar: []string{"etc/config/", "etc/config/.wh.a.conf"},
	},
	{
		name:    "delete base directory",
		change:  func(t *testing.T, m string) { require.NoError(t, os.RemoveAll(filepath.Join(m, "var/data"))) },
		wantTar: []string{"var/", "var/.wh.data"},
	},
	{
		name: "rename base file",
		change: func(t *testing.T, m string) {
			require.NoError(t, os.Rename(filepath.Join(m, "etc/config/b.conf"), filepath.Join(m, "etc/config/c.conf")))
		},
		wantTar: []string{"etc/config/.wh.b.conf", "etc/config/c.conf"},
	},
	{
		name: "replace file by directory",
		change: func(t *testing.T, m string) {
			require.NoError(t, os.Remove(filepath.Join(m, "filetodir")))
			writeFile(t, m, "filetodir/x", "x\n", 0o644)
		},
		wantTar: []string{"filetodir/", "filetodir/x"},
	},
	{
		name: "replace directory by file",
		change: func(t *testing.T, m string) {
			require.NoError(t, os.RemoveAll(filepath.Join(m, "dirtofile")))
			writeFile(t, m, "dirtofile", "now a file\n", 0o644)
		},
		wantTar: []string{"dirtofile"},
	},
	{
		name: "opaque dir",
		change: func(t *testing.T, m string) {
			require.NoError(t, os.RemoveAll(filepath.Join(m, "opt/app")))
			writeFile(t, m, "opt/app/new.txt", "fresh\n", 0o644)
			writeFile(t, m, "opt/app/lib/new.so", "fresh lib\n", 0o755)
		},
		wantTar: []string{"opt/app/", "opt/app/.wh..wh..opq", "opt/app/new.txt", "opt/app/lib/new.so"},
	},
	{
		name: "symlinks",
		change: func(t *testing.T, m string) {
			require.NoError(t, os.Symlink("/usr/bin/tool", filepath.Join(m, "usr/bin/abs")))
			require.NoError(t, os.Symlink("tool", filepath.Join(m, "usr/bin/rel")))
			require.NoError(t, os.Symlink("/nonexistent/target", filepath.Join(m, "usr/bin/dangling")))
			require.NoError(t, os.Symlink("../share/doc", filepath.Join(m, "usr/bin/dirlink")))
		},
		wantTar: []string{"usr/bin/abs", "usr/bin/rel", "usr/bin/dangling", "usr/bin/dirlink"},
	},
	{
		name: "hardlinks",
		change: func(t *testing.T, m string) {
			writeFile(t, m, "usr/lib/liba.so", "shared inode\n", 0o644)
			require.NoError(t, os.Link(filepath.Join(m, "usr/lib/liba.so"), filepath.Join(m, "usr/lib/libb.so")))
			require.NoError(t, os.Link(filepath.Join(m, "usr/lib/liba.so"), filepath.Join(m, "usr/bin/liba-copy")))
		},
		// usr/bin sorts before usr/lib, so the first name seen is usr/bin/liba-copy.
		wantTar: []string{"usr/bin/liba-copy", "usr/lib/liba.so -> usr/bin/liba-copy", "usr/lib/libb.so -> usr/bin/liba-copy"},
	},
	{
		name:    "empty file",
		change:  func(t *testing.T, m string) { writeFile(t, m, "home/user/empty", "", 0o644) },
		wantTar: []string{"home/user/empty"},
	},
	{
		name: "110 MB file",
		change: func(t *testing.T, m string) {
			f, err := os.Create(filepath.Join(m, "home/user/big.bin"))
			require.NoError(t, err)
			block := make([]byte, 1<<20)
			for i := range block {
				block[i] = byte(i*7 + i/251)
			}
			for i := range 110 {
				block[0] = byte(i) // no two MiB alike
				_, err := f.Write(block)
				require.NoError(t, err)
			}
			require.NoError(t, f.Close())
		},
		wantTar: []string{"home/user/big.bin"},
	},
	{
		name: "permissions",
		change: func(t *testing.T, m string) {
			writeFile(t, m, "usr/bin/private", "secret\n", 0o700)
			writeFile(t, m, "usr/bin/suid", "#!/bin/sh\n", 0o755)
			require.NoError(t, os.Chmod(filepath.Join(m, "usr/bin/suid"), 0o755|os.ModeSetuid))
			require.NoError(t, os.Mkdir(filepath.Join(m, "home/sticky"), 0o755))
			require.NoError(t, os.Chmod(filepath.Join(m, "home/sticky"), 0o777|os.ModeSticky))
			require.NoError(t, os.Chmod(filepath.Join(m, "usr/bin/tool"), 0o750)) // metadata-only change of a base file
		},
		wantTar: []string{"usr/bin/private", "usr/bin/suid", "home/sticky/", "usr/bin/tool"},
	},
	{
		name: "ownership",
		change: func(t *testing.T, m string) {
			writeFile(t, m, "home/user/owned", "mine\n", 0o644)
			require.NoError(t, os.Lchown(filepath.Join(m, "home/user/owned"), 1234, 5678))
			require.NoError(t, os.Lchown(filepath.Join(m, "home/user"), 1234, 5678))
			require.NoError(t, os.Lchown(filepath.Join(m, "etc/config/b.conf"), 1234, 5678))
			require.NoError(t, os.Symlink("owned", filepath.Join(m, "home/user/owned-link")))
			require.NoError(t, os.Lchown(filepath.Join(m, "home/user/owned-link"), 1234, 5678))
		},
		wantTar: []string{"home/user/", "home/user/owned", "etc/config/b.conf", "home/user/owned-link"},
	},
	{
		name: "user xattrs",
		change: func(t *testing.T, m string) {
			writeFile(t, m, "home/user/tagged", "x\n", 0o644)
			require.NoError(t, unix.Lsetxattr(filepath.Join(m, "home/user/tagged"), "user.envd.test", []byte("hello"), 0))
			require.NoError(t, unix.Lsetxattr(filepath.Join(m, "home/user/tagged"), "user.empty", nil, 0))
			require.NoError(t, unix.Lsetxattr(filepath.Join(m, "home/user"), "user.dir", []byte("on a dir"), 0))
			require.NoError(t, unix.Lsetxattr(filepath.Join(m, "etc/hosts"), "user.base", []byte("on a base file"), 0))
		},
		wantTar: []string{"home/user/tagged", "home/user/", "etc/hosts"},
	},
	{
		name: "fifo",
		change: func(t *testing.T, m string) {
			require.NoError(t, unix.Mkfifo(filepath.Join(m, "var/pipe"), 0o620))
		},
		wantTar: []string{"var/pipe"},
	},
	{
		name: "char device",
		change: func(t *testing.T, m string) {
			require.NoError(t, unix.Mknod(filepath.Join(m, "var/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		},
		wantTar: []string{"var/null"},
	},
	{
		name: "excluded paths",
		change: func(t *testing.T, m string) {
			writeFile(t, m, "proc/x", "runtime\n", 0o644)
			writeFile(t, m, "run/secrets/token", "s3cr3t\n", 0o600)
			writeFile(t, m, "workspace/out.txt", "volume data\n", 0o644)
			require.NoError(t, os.Remove(filepath.Join(m, "workspace/base.txt")))
			require.NoError(t, os.Remove(filepath.Join(m, "run/base.pid")))
			require.NoError(t, os.RemoveAll(filepath.Join(m, "tmp")))
			writeFile(t, m, "etc/kept", "kept\n", 0o644)
		},
		wantTar: []string{"etc/kept"},
	},
}

// buildLower writes the base tree shared by all cases.
func buildLower(t *testing.T, dir string) {
	t.Helper()
	for name, content := range map[string]string{
		"etc/hosts":              "127.0.0.1 localhost\n",
		"etc/config/a.conf":      "a=1\n",
		"etc/config/b.conf":      "b=2\n",
		"usr/share/doc/readme":   "read me\n",
		"var/data/one.txt":       "one\n",
		"var/data/sub/deep.txt":  "deep\n",
		"opt/app/old1.txt":       "old\n",
		"opt/app/lib/old2.so":    "old lib\n",
		"home/user/notes.txt":    "notes\n",
		"workspace/base.txt":     "volume base\n",
		"dirtofile/inner.txt":    "inner\n",
		"filetodir":              "file\n",
		"run/base.pid":           "1\n",
		"tmp/.keep":              "",
		"usr/lib/os-release.txt": "envd\n",
	} {
		writeFile(t, dir, name, content, 0o644)
	}
	writeFile(t, dir, "usr/bin/tool", "#!/bin/sh\necho tool\n", 0o755)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "proc"), 0o555))
}

func writeFile(t *testing.T, root, name, content string, perm os.FileMode) {
	t.Helper()
	p := filepath.Join(root, name)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), perm))
	require.NoError(t, os.Chmod(p, perm)) // whatever the umask
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test mounts overlayfs and must run as root")
	}
}

// mountOverlay mounts lower+upper at merged and returns the unmount func.
func mountOverlay(t *testing.T, lower, upper, work, merged string) func() {
	t.Helper()
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	require.NoError(t, unix.Mount("overlay", merged, "overlay", 0, opts), "mount overlay")
	mounted := true
	unmount := func() {
		if mounted {
			// Under load (other packages' tests creating mount namespaces,
			// writeback of a 110 MB file) the first unmount can be EBUSY
			// for a moment: retry briefly before calling it a failure.
			var err error
			for i := 0; i < 50; i++ {
				if err = unix.Unmount(merged, 0); err != unix.EBUSY {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			require.NoError(t, err)
			mounted = false
		}
	}
	t.Cleanup(func() {
		if mounted {
			_ = unix.Unmount(merged, unix.MNT_DETACH)
		}
	})
	return unmount
}

func TestRootRoundTrip(t *testing.T) {
	requireRoot(t)
	for _, tc := range roundTripCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			base := t.TempDir()
			lower, upper, work, merged := filepath.Join(base, "lower"), filepath.Join(base, "upper"),
				filepath.Join(base, "work"), filepath.Join(base, "merged")
			for _, d := range []string{lower, upper, work, merged} {
				require.NoError(t, os.Mkdir(d, 0o755))
			}
			buildLower(t, lower)
			unmount := mountOverlay(t, lower, upper, work, merged)
			tc.change(t, merged)
			mergedTree := snapshotTree(t, merged)
			unmount()
			lowerTree := snapshotTree(t, lower)

			// What a restore must show: the merged tree, except that excluded
			// paths keep whatever the lower layers had.
			want := map[string]fileInfo{}
			for p, fi := range mergedTree {
				if !isExcluded(p) {
					want[p] = fi
				}
			}
			for p, fi := range lowerTree {
				if isExcluded(p) {
					want[p] = fi
				}
			}

			spoolPath := filepath.Join(base, "spool.tar")
			f, err := os.Create(spoolPath)
			require.NoError(t, err)
			stats, err := Spool(ctx, upper, f, SpoolOptions{Excludes: testExcludes})
			require.NoError(t, err)
			require.NoError(t, f.Close())
			fi, err := os.Stat(spoolPath)
			require.NoError(t, err)
			assert.Equal(t, fi.Size(), stats.Bytes)

			checkSpool(t, spoolPath, stats, tc.wantTar, lowerTree, mergedTree)

			// Determinism: a second spool of the same upper dir is identical.
			again := sha256.New()
			_, err = Spool(ctx, upper, again, SpoolOptions{Excludes: testExcludes})
			require.NoError(t, err)
			assert.Equal(t, fileSHA256(t, spoolPath), hex.EncodeToString(again.Sum(nil)), "spool is deterministic")

			for _, c := range []Compression{Estargz, Zstd, Gzip} {
				t.Run(string(c), func(t *testing.T) {
					outDir := filepath.Join(base, "out-"+string(c))
					require.NoError(t, os.Mkdir(outDir, 0o755))
					layer, err := Encode(ctx, spoolPath, outDir, EncodeOptions{Compression: c})
					require.NoError(t, err)
					uncompressed := checkLayer(t, layer, c, spoolPath)

					root := filepath.Join(base, "applied-"+string(c))
					out, err := exec.Command("cp", "-a", lower, root).CombinedOutput()
					require.NoError(t, err, string(out))
					_, err = archive.Apply(ctx, root, bytes.NewReader(uncompressed))
					require.NoError(t, err)

					got := snapshotTree(t, root)
					if c == Estargz {
						// estargz adds its TOC and a landmark to every layer;
						// a plain unpack creates them as files.
						for _, name := range []string{estargz.TOCTarName, estargz.NoPrefetchLandmark} {
							assert.Contains(t, got, name)
							delete(got, name)
						}
					}
					compareTrees(t, want, got)
				})
			}
		})
	}
}

func isExcluded(rel string) bool {
	for _, e := range testExcludes {
		e = strings.TrimPrefix(e, "/")
		if rel == e || strings.HasPrefix(rel, e+"/") {
			return true
		}
	}
	return false
}

// checkSpool checks the tar Spool wrote, beyond what the round trip shows.
func checkSpool(t *testing.T, spoolPath string, stats SpoolStats, wantTar []string, lowerTree, mergedTree map[string]fileInfo) {
	t.Helper()
	f, err := os.Open(spoolPath)
	require.NoError(t, err)
	defer f.Close()
	tr := tar.NewReader(f)
	var (
		seen                           = map[string]bool{}
		entries, whiteouts, opaqueDirs int
	)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		entries++
		name := h.Name
		assert.False(t, strings.HasPrefix(name, "/") || strings.HasPrefix(name, "./"), "relative name %q", name)
		assert.Equal(t, h.Typeflag == tar.TypeDir, strings.HasSuffix(name, "/"), "only dirs end in /: %q", name)
		clean := strings.TrimSuffix(name, "/")
		assert.False(t, isExcluded(clean), "excluded path %q in the layer", name)
		if parent := path.Dir(clean); parent != "." {
			assert.True(t, seen[parent+"/"], "parent of %q written before it", name)
		}
		for k := range h.PAXRecords {
			assert.NotContains(t, k, "trusted.overlay.", "%q carries an overlay xattr", name)
			assert.NotContains(t, k, "user.overlay.", "%q carries an overlay xattr", name)
		}
		if base := path.Base(clean); strings.HasPrefix(base, ".wh.") {
			assert.Equal(t, byte(tar.TypeReg), h.Typeflag)
			assert.Zero(t, h.Size)
			if base == ".wh..wh..opq" {
				opaqueDirs++
				assert.True(t, seen[path.Dir(clean)+"/"], "opaque marker %q follows its dir", name)
			} else {
				whiteouts++
				deleted := path.Join(path.Dir(clean), strings.TrimPrefix(base, ".wh."))
				assert.Contains(t, lowerTree, deleted, "whiteout %q names a lower path", name)
				if m, ok := mergedTree[deleted]; ok { // replaced by something else
					t.Errorf("whiteout %q for a path that exists as %v", name, m)
				}
			}
		}
		seen[name] = true
		if h.Typeflag == tar.TypeLink {
			seen[name+" -> "+h.Linkname] = true
		}
	}
	for _, w := range wantTar {
		assert.True(t, seen[w], "spool has %q", w)
	}
	assert.Equal(t, entries, stats.Entries)
	assert.Equal(t, whiteouts, stats.Whiteouts)
	assert.Equal(t, opaqueDirs, stats.OpaqueDirs)
}

// checkLayer checks the layer's file, digests and sizes, and returns its
// uncompressed content.
// spoolTree spools the tree at upper (no excludes) to dir/spool.tar and
// returns its path.
func spoolTree(t *testing.T, upper, dir string) string {
	t.Helper()
	spoolPath := filepath.Join(dir, "spool.tar")
	f, err := os.Create(spoolPath)
	require.NoError(t, err)
	_, err = Spool(context.Background(), upper, f, SpoolOptions{})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	return spoolPath
}

func checkLayer(t *testing.T, layer Layer, c Compression, spoolPath string) []byte {
	t.Helper()
	blob, err := os.ReadFile(layer.Path)
	require.NoError(t, err)
	assert.Equal(t, digest.FromBytes(blob), layer.Digest)
	assert.Equal(t, int64(len(blob)), layer.Size)
	assert.Equal(t, filepath.Join(filepath.Dir(layer.Path), "sha256-"+layer.Digest.Encoded()), layer.Path)
	entries, err := os.ReadDir(filepath.Dir(layer.Path))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary files left")

	var r io.ReadCloser
	switch c {
	case Zstd:
		assert.Equal(t, "application/vnd.oci.image.layer.v1.tar+zstd", layer.MediaType)
		d, err := zstd.NewReader(bytes.NewReader(blob))
		require.NoError(t, err)
		r = d.IOReadCloser()
	default:
		assert.Equal(t, "application/vnd.oci.image.layer.v1.tar+gzip", layer.MediaType)
		r, err = kgzip.NewReader(bytes.NewReader(blob))
		require.NoError(t, err)
	}
	uncompressed, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	assert.Equal(t, digest.FromBytes(uncompressed), layer.DiffID)
	assert.Equal(t, int64(len(uncompressed)), layer.UncompressedSize)

	if c == Estargz {
		// The blob is a valid eStargz whose TOC digest is the annotation.
		er, err := estargz.Open(io.NewSectionReader(bytes.NewReader(blob), 0, int64(len(blob))))
		require.NoError(t, err)
		assert.Equal(t, er.TOCDigest().String(), layer.Annotations[estargz.TOCJSONDigestAnnotation])
		_, err = er.VerifyTOC(er.TOCDigest())
		assert.NoError(t, err)
		assert.Equal(t, fmt.Sprint(len(uncompressed)), layer.Annotations[estargz.StoreUncompressedSizeAnnotation])
	} else {
		assert.Equal(t, fileSHA256(t, spoolPath), layer.DiffID.Encoded(), "DiffID is the spool's digest")
		assert.Empty(t, layer.Annotations)
	}
	return uncompressed
}

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	require.NoError(t, err)
	return hex.EncodeToString(h.Sum(nil))
}

// fileInfo is what a restore must reproduce of one path.
type fileInfo struct {
	Type         string
	Mode         uint32 // permission, setuid, setgid, sticky
	UID, GID     uint32
	Size         int64
	SHA256       string
	Link         string
	Xattrs       map[string]string // user.* only
	Major, Minor uint32
	Nlink        uint64 // regular files: hard links survive
	MtimeSec     int64  // regular files and symlinks
}

func snapshotTree(t *testing.T, root string) map[string]fileInfo {
	t.Helper()
	out := map[string]fileInfo{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		fi := fileInfo{Mode: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			fi.Type = "dir"
		case unix.S_IFREG:
			fi.Type, fi.Size, fi.Nlink, fi.MtimeSec = "file", st.Size, st.Nlink, st.Mtim.Sec
			fi.SHA256 = fileSHA256(t, p)
		case unix.S_IFLNK:
			fi.Type, fi.Mode, fi.MtimeSec = "symlink", 0, st.Mtim.Sec
			fi.Link, err = os.Readlink(p)
			if err != nil {
				return err
			}
		case unix.S_IFIFO:
			fi.Type = "fifo"
		case unix.S_IFCHR:
			fi.Type, fi.Major, fi.Minor = "char", unix.Major(st.Rdev), unix.Minor(st.Rdev)
		case unix.S_IFBLK:
			fi.Type, fi.Major, fi.Minor = "block", unix.Major(st.Rdev), unix.Minor(st.Rdev)
		default:
			fi.Type = fmt.Sprintf("mode %o", st.Mode&unix.S_IFMT)
		}
		d, err := tarfs.OpenDir(filepath.Dir(p))
		if err != nil {
			return err
		}
		xattrs, err := d.Xattrs(filepath.Base(p))
		d.Close()
		if err != nil {
			return err
		}
		for n, v := range xattrs {
			if !strings.HasPrefix(n, "user.") {
				continue
			}
			if fi.Xattrs == nil {
				fi.Xattrs = map[string]string{}
			}
			fi.Xattrs[n] = v
		}
		out[filepath.ToSlash(rel)] = fi
		return nil
	})
	require.NoError(t, err)
	return out
}

func compareTrees(t *testing.T, want, got map[string]fileInfo) {
	t.Helper()
	for p, w := range want {
		g, ok := got[p]
		if !assert.True(t, ok, "%q missing after restore", p) {
			continue
		}
		assert.Equal(t, w, g, "%q", p)
	}
	for p, g := range got {
		_, ok := want[p]
		assert.True(t, ok, "%q (%s) restored but not in the merged tree", p, g.Type)
	}
}

// TestRootSpoolRefusesRedirect checks that an upper dir depending on overlay
// features a tar layer cannot express is refused, not silently mis-captured.
func TestRootSpoolRefusesRedirect(t *testing.T) {
	requireRoot(t)
	for _, x := range []string{"trusted.overlay.redirect", "trusted.overlay.metacopy"} {
		t.Run(x, func(t *testing.T) {
			t.Parallel()
			upper := t.TempDir()
			writeFile(t, upper, "d/f", "x", 0o644)
			require.NoError(t, unix.Lsetxattr(filepath.Join(upper, "d"), x, []byte("/elsewhere"), 0))
			_, err := Spool(context.Background(), upper, discard{}, SpoolOptions{})
			assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		})
	}
}

// TestRootEstargzPrioritized checks that prioritized files come first in an
// eStargz layer, ahead of the prefetch landmark, and that missing ones are
// ignored.
func TestRootEstargzPrioritized(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	upper := filepath.Join(dir, "upper")
	buildLower(t, upper)
	spoolPath := spoolTree(t, upper, dir)

	outDir := filepath.Join(dir, "out")
	require.NoError(t, os.Mkdir(outDir, 0o755))
	layer, err := Encode(ctx, spoolPath, outDir, EncodeOptions{
		Compression:      Estargz,
		PrioritizedFiles: []string{"/usr/bin/tool", "/etc/hosts", "/not/there"},
	})
	require.NoError(t, err)
	blob, err := os.Open(layer.Path)
	require.NoError(t, err)
	defer blob.Close()
	zr, err := kgzip.NewReader(blob)
	require.NoError(t, err)
	var files []string
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if h.Typeflag == tar.TypeReg {
			files = append(files, h.Name)
		}
	}
	require.GreaterOrEqual(t, len(files), 3)
	assert.Equal(t, []string{"usr/bin/tool", "etc/hosts", estargz.PrefetchLandmark}, files[:3])
}
