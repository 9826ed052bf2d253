package registry

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/syncbuf"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/tarfs"
)

// startRegistry runs an embedded registry on a free port for the test.
func startRegistry(t *testing.T) *Server {
	t.Helper()
	s, err := Serve(context.Background(), t.TempDir(), "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		assert.NoError(t, s.Close(ctx))
	})
	return s
}

// clientOf is a Client of srv with the credentials a node has: the node's,
// and the GC's for deletes.
func clientOf(t *testing.T, srv *Server, opts ...ClientOption) *Client {
	t.Helper()
	a := srv.Access()
	c, err := NewClient(srv.Addr(), append([]ClientOption{WithCredential(a.Node), WithDeleteCredential(a.GC)}, opts...)...)
	require.NoError(t, err)
	return c
}

// remoteImage opens img through go-containerregistry directly, bypassing Client.
func remoteImage(t *testing.T, srv *Server, img Image) v1.Image {
	t.Helper()
	ref, err := name.NewDigest(srv.Addr()+"/"+img.Ref(), name.Insecure)
	require.NoError(t, err)
	node := srv.Access().Node
	ri, err := remote.Image(ref, remote.WithAuth(&authn.Basic{Username: node.User, Password: node.Password}))
	require.NoError(t, err)
	return ri
}

type tarEntry struct {
	Type     byte
	Mode     int64
	Uid, Gid int
	Linkname string
	Content  string
	Devmajor int64
	Devminor int64
	Xattrs   map[string]string
}

// readLayer reads a layer's tar into an ordered list of names and a map of entries.
func readLayer(t *testing.T, l v1.Layer) ([]string, map[string]tarEntry) {
	t.Helper()
	rc, err := l.Uncompressed()
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	var names []string
	entries := map[string]tarEntry{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		body, err := io.ReadAll(tr)
		require.NoError(t, err)
		e := tarEntry{
			Type: hdr.Typeflag, Mode: hdr.Mode, Uid: hdr.Uid, Gid: hdr.Gid, Linkname: hdr.Linkname,
			Content: string(body), Devmajor: hdr.Devmajor, Devminor: hdr.Devminor,
		}
		for k, v := range hdr.PAXRecords {
			if strings.HasPrefix(k, tarfs.PAXXattr) {
				if e.Xattrs == nil {
					e.Xattrs = map[string]string{}
				}
				e.Xattrs[strings.TrimPrefix(k, tarfs.PAXXattr)] = v
			}
		}
		names = append(names, hdr.Name)
		entries[hdr.Name] = e
	}
	return names, entries
}

// TestImportRootfsDirectoryAsRoot needs root to chown to uid 1000 and to
// create a device node.
func TestImportRootfsDirectoryAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: chown and mknod (CI runs as root)")
	}
	t.Parallel()
	srv := startRegistry(t)
	c := clientOf(t, srv)

	root := t.TempDir()
	must := func(err error) { t.Helper(); require.NoError(t, err) }
	must(os.MkdirAll(filepath.Join(root, "bin"), 0o755))
	must(os.WriteFile(filepath.Join(root, "bin", "tool"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.Chmod(filepath.Join(root, "bin", "tool"), 0o755)) // umask-proof
	must(os.Chown(filepath.Join(root, "bin", "tool"), 1000, 1000))
	must(os.Symlink("tool", filepath.Join(root, "bin", "sh-link")))
	must(os.MkdirAll(filepath.Join(root, "data"), 0o755))
	must(os.WriteFile(filepath.Join(root, "data", "file.txt"), []byte("shared content"), 0o644))
	must(os.Chmod(filepath.Join(root, "data", "file.txt"), 0o644))
	must(os.Link(filepath.Join(root, "data", "file.txt"), filepath.Join(root, "data", "hard.txt")))
	must(unix.Setxattr(filepath.Join(root, "data", "file.txt"), "user.envd", []byte("kept"), 0))
	must(os.Mkdir(filepath.Join(root, "empty"), 0o700))
	must(os.Chmod(filepath.Join(root, "empty"), 0o700))
	must(os.Mkdir(filepath.Join(root, "dev"), 0o755))
	must(unix.Mknod(filepath.Join(root, "dev", "null"), syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(os.Chmod(filepath.Join(root, "dev", "null"), 0o666))

	img, err := c.ImportRootfs(context.Background(), root, "envd/images/tree", "v1")
	require.NoError(t, err)
	require.Len(t, img.Layers, 1)
	assert.Equal(t, string(types.OCILayer), img.Layers[0].MediaType)

	got, err := c.Get(context.Background(), "envd/images/tree:v1")
	require.NoError(t, err)
	assert.Equal(t, img, got)

	ri := remoteImage(t, srv, img)
	cfg, err := ri.ConfigFile()
	require.NoError(t, err)
	assert.Equal(t, "linux", cfg.OS)
	assert.Equal(t, runtime.GOARCH, cfg.Architecture)
	assert.Equal(t, []string{DefaultPath}, cfg.Config.Env)
	assert.Equal(t, []string{"/bin/sh"}, cfg.Config.Cmd)
	assert.Len(t, cfg.History, 1)

	layers, err := ri.Layers()
	require.NoError(t, err)
	require.Len(t, layers, 1)
	names, entries := readLayer(t, layers[0])
	assert.Equal(t, []string{
		"bin/", "bin/sh-link", "bin/tool",
		"data/", "data/file.txt", "data/hard.txt",
		"dev/", "dev/null",
		"empty/",
	}, names, "relative names, directories before their contents, no root entry")

	tests := []struct {
		name string
		want tarEntry
	}{
		{"bin/", tarEntry{Type: tar.TypeDir, Mode: 0o755}},
		{"bin/sh-link", tarEntry{Type: tar.TypeSymlink, Mode: 0o777, Linkname: "tool"}},
		{"bin/tool", tarEntry{Type: tar.TypeReg, Mode: 0o755, Uid: 1000, Gid: 1000, Content: "#!/bin/sh\necho hi\n"}},
		{"data/", tarEntry{Type: tar.TypeDir, Mode: 0o755}},
		{"data/file.txt", tarEntry{Type: tar.TypeReg, Mode: 0o644, Content: "shared content", Xattrs: map[string]string{"user.envd": "kept"}}},
		{"data/hard.txt", tarEntry{Type: tar.TypeLink, Mode: 0o644, Linkname: "data/file.txt", Xattrs: map[string]string{"user.envd": "kept"}}},
		{"dev/", tarEntry{Type: tar.TypeDir, Mode: 0o755}},
		{"dev/null", tarEntry{Type: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3}},
		{"empty/", tarEntry{Type: tar.TypeDir, Mode: 0o700}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, entries[tt.name])
		})
	}
}

// writeTar writes entries (in order) to a tar file, gzip-compressed if asked.
func writeTar(t *testing.T, path string, gz bool, hdrs []*tar.Header, bodies map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	var w io.Writer = &buf
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		w = zw
	}
	tw := tar.NewWriter(w)
	for _, h := range hdrs {
		h.Size = int64(len(bodies[h.Name]))
		require.NoError(t, tw.WriteHeader(h))
		_, err := tw.Write([]byte(bodies[h.Name]))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	if zw != nil {
		require.NoError(t, zw.Close())
	}
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
}

func TestImportRootfsTar(t *testing.T) {
	t.Parallel()
	srv := startRegistry(t)
	c := clientOf(t, srv)

	rootfs := func() []*tar.Header {
		return []*tar.Header{
			{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "./etc/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "./etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644, Uid: 1000, Gid: 1000},
			{Name: "/bin/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "/bin/sh", Typeflag: tar.TypeSymlink, Mode: 0o777, Linkname: "/bin/busybox"},
			{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755},
			{Name: "./bin/ash", Typeflag: tar.TypeLink, Mode: 0o755, Linkname: "./bin/busybox"},
		}
	}
	bodies := map[string]string{"./etc/os-release": "ID=test\n", "bin/busybox": "ELF"}

	tests := []struct {
		name    string
		gzip    bool
		hdrs    []*tar.Header
		wantErr error
	}{
		{name: "plain tar", hdrs: rootfs()},
		{name: "gzip tar", gzip: true, hdrs: rootfs()},
		{name: "entry climbs out", hdrs: []*tar.Header{{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}}, wantErr: errdefs.ErrInvalidArgument},
		{name: "hardlink climbs out", hdrs: []*tar.Header{{Name: "x", Typeflag: tar.TypeLink, Linkname: "../../etc/shadow"}}, wantErr: errdefs.ErrInvalidArgument},
		{name: "empty tar", hdrs: nil, wantErr: errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "rootfs.tar")
			writeTar(t, src, tt.gzip, tt.hdrs, bodies)
			img, err := c.ImportRootfs(context.Background(), src, "envd/images/fromtar", "")
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			layers, err := remoteImage(t, srv, img).Layers()
			require.NoError(t, err)
			require.Len(t, layers, 1)
			names, entries := readLayer(t, layers[0])
			assert.Equal(t, []string{"etc/", "etc/os-release", "bin/", "bin/sh", "bin/busybox", "bin/ash"}, names)
			assert.Equal(t, tarEntry{Type: tar.TypeReg, Mode: 0o644, Uid: 1000, Gid: 1000, Content: "ID=test\n"}, entries["etc/os-release"])
			assert.Equal(t, tarEntry{Type: tar.TypeSymlink, Mode: 0o777, Linkname: "/bin/busybox"}, entries["bin/sh"])
			assert.Equal(t, tarEntry{Type: tar.TypeLink, Mode: 0o755, Linkname: "bin/busybox"}, entries["bin/ash"])
		})
	}
}

// makeLayerFile writes a gzip tar layer holding files and describes it like
// the snapshotter package does.
func makeLayerFile(t *testing.T, files map[string]string, annotations map[string]string) LayerFile {
	t.Helper()
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for n, body := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}))
		_, err := tw.Write([]byte(body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	var comp bytes.Buffer
	zw := gzip.NewWriter(&comp)
	_, err := zw.Write(raw.Bytes())
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	p := filepath.Join(t.TempDir(), "layer.tar.gz")
	require.NoError(t, os.WriteFile(p, comp.Bytes(), 0o644))
	return LayerFile{
		Path:        p,
		MediaType:   string(types.OCILayer),
		Digest:      fmt.Sprintf("sha256:%x", sha256.Sum256(comp.Bytes())),
		DiffID:      fmt.Sprintf("sha256:%x", sha256.Sum256(raw.Bytes())),
		Size:        int64(comp.Len()),
		Annotations: annotations,
	}
}

// recorder is an http.RoundTripper that records what the client asked for.
type recorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, path string
	query        map[string][]string
	status       int
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	rec := recorded{method: req.Method, path: req.URL.Path, query: req.URL.Query()}
	if err == nil {
		rec.status = resp.StatusCode
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, rec)
	r.mu.Unlock()
	return resp, err
}

// blobTraffic returns, since request index from, the digests uploaded
// (committed with PUT ?digest=) and mounted (POST ?mount= answered 201),
// with the mount's source repository.
func (r *recorder) blobTraffic(from int) (uploaded map[string]bool, mounted map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	uploaded, mounted = map[string]bool{}, map[string]string{}
	for _, q := range r.reqs[from:] {
		if !strings.Contains(q.path, "/blobs/uploads/") {
			continue
		}
		switch {
		case q.method == http.MethodPut && len(q.query["digest"]) > 0:
			uploaded[q.query["digest"][0]] = true
		case q.method == http.MethodPost && len(q.query["mount"]) > 0 && q.status == http.StatusCreated:
			mounted[q.query["mount"][0]] = strings.Join(q.query["from"], ",")
		}
	}
	return uploaded, mounted
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reqs)
}

func TestAppend(t *testing.T) {
	t.Parallel()
	srv := startRegistry(t)
	rec := &recorder{next: http.DefaultTransport}
	c := clientOf(t, srv, WithTransport(rec))
	ctx := context.Background()

	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "base.txt"), []byte("base"), 0o644))
	base, err := c.ImportRootfs(ctx, src, "envd/images/base", "latest")
	require.NoError(t, err)

	stargz := map[string]string{
		"containerd.io/snapshot/stargz/toc.digest": "sha256:" + strings.Repeat("ab", 32),
		"io.containers.estargz.uncompressed-size":  "1024",
	}
	l1 := makeLayerFile(t, map[string]string{"one.txt": strings.Repeat("first layer ", 100)}, stargz)
	l2 := makeLayerFile(t, map[string]string{"two.txt": "second"}, nil)

	// v1 goes to p1 (mounting from the base repo), v2 to p2 (mounting from p1).
	start := rec.len()
	v1img, err := c.Append(ctx, base, l1, "envd/projects/p1", "v1", map[string]string{"dev.envd.version": "1"})
	require.NoError(t, err)
	up1, mnt1 := rec.blobTraffic(start)

	start = rec.len()
	v2img, err := c.Append(ctx, v1img, l2, "envd/projects/p2", "", map[string]string{"dev.envd.version": "2"})
	require.NoError(t, err)
	up2, mnt2 := rec.blobTraffic(start)

	tests := []struct {
		name     string
		img      Image
		parent   Image
		layer    LayerFile
		uploaded map[string]bool
		mounted  map[string]string
		version  string
	}{
		{"onto base", v1img, base, l1, up1, mnt1, "1"},
		{"onto version", v2img, v1img, l2, up2, mnt2, "2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Len(t, tt.img.Layers, len(tt.parent.Layers)+1)
			assert.Equal(t, tt.parent.Layers, tt.img.Layers[:len(tt.parent.Layers)], "parent layers, annotations included, unchanged")
			top := tt.img.Layers[len(tt.img.Layers)-1]
			assert.Equal(t, LayerInfo{
				Digest: tt.layer.Digest, DiffID: tt.layer.DiffID, MediaType: tt.layer.MediaType,
				Size: tt.layer.Size, Annotations: tt.layer.Annotations,
			}, top)

			for _, pl := range tt.parent.Layers {
				assert.False(t, tt.uploaded[pl.Digest], "parent layer %s re-uploaded", pl.Digest)
				assert.Equal(t, tt.parent.Repo, tt.mounted[pl.Digest], "parent layer %s not mounted from %s", pl.Digest, tt.parent.Repo)
			}
			assert.True(t, tt.uploaded[tt.layer.Digest], "new layer uploaded")

			got, err := c.Get(ctx, tt.img.Ref())
			require.NoError(t, err)
			assert.Equal(t, tt.img, got)

			ri := remoteImage(t, srv, tt.img)
			cfg, err := ri.ConfigFile()
			require.NoError(t, err)
			var diffIDs []string
			for _, d := range cfg.RootFS.DiffIDs {
				diffIDs = append(diffIDs, d.String())
			}
			var want []string
			for _, l := range tt.img.Layers {
				want = append(want, l.DiffID)
			}
			assert.Equal(t, want, diffIDs)
			assert.Equal(t, tt.layer.DiffID, want[len(want)-1])
			assert.Len(t, cfg.History, len(tt.img.Layers))
			assert.Equal(t, runtime.GOARCH, cfg.Architecture)
			m, err := ri.Manifest()
			require.NoError(t, err)
			assert.Equal(t, tt.version, m.Annotations["dev.envd.version"])
		})
	}
	assert.Equal(t, stargz, v2img.Layers[1].Annotations, "a parent's layer annotations survive the next append")

	t.Run("tag", func(t *testing.T) {
		got, err := c.Get(ctx, "envd/projects/p1:v1")
		require.NoError(t, err)
		assert.Equal(t, v1img.Digest, got.Digest)
	})

	t.Run("ranged blob GET answers 206", func(t *testing.T) {
		want, err := os.ReadFile(l1.Path)
		require.NoError(t, err)
		req, err := http.NewRequest(http.MethodGet,
			fmt.Sprintf("http://%s/v2/envd/projects/p2/blobs/%s", srv.Addr(), l1.Digest), nil)
		require.NoError(t, err)
		req.Header.Set("Range", "bytes=10-19")
		req.SetBasicAuth(srv.Access().Node.User, srv.Access().Node.Password)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, http.StatusPartialContent, resp.StatusCode)
		assert.Equal(t, want[10:20], body)
	})
}

func TestErrors(t *testing.T) {
	t.Parallel()
	srv := startRegistry(t)
	c := clientOf(t, srv)
	ctx := context.Background()
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644))
	img, err := c.ImportRootfs(ctx, src, "envd/images/e", "t1")
	require.NoError(t, err)
	missing := "sha256:" + strings.Repeat("0", 64)
	layer := makeLayerFile(t, map[string]string{"a": "b"}, nil)

	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"missing manifest by digest", func() error { _, err := c.Get(ctx, "envd/images/e@"+missing); return err }, errdefs.ErrNotFound},
		{"missing tag", func() error { _, err := c.Get(ctx, "envd/images/e:nope"); return err }, errdefs.ErrNotFound},
		{"missing repository", func() error { _, err := c.Get(ctx, "envd/images/none:t1"); return err }, errdefs.ErrNotFound},
		{"verify missing", func() error { return c.Verify(ctx, Image{Repo: img.Repo, Digest: missing}) }, errdefs.ErrNotFound},
		{"append onto missing parent", func() error {
			_, err := c.Append(ctx, Image{Repo: img.Repo, Digest: missing}, layer, "envd/projects/x", "", nil)
			return err
		}, errdefs.ErrNotFound},
		{"upper-case repo", func() error { _, err := c.Get(ctx, "Envd/Images:t1"); return err }, errdefs.ErrInvalidArgument},
		{"repo with empty component", func() error { _, err := c.ImportRootfs(ctx, src, "envd//x", ""); return err }, errdefs.ErrInvalidArgument},
		{"repo with leading dash", func() error { _, err := c.Append(ctx, img, layer, "-p1", "", nil); return err }, errdefs.ErrInvalidArgument},
		{"repo with host", func() error { _, err := c.Get(ctx, srv.Addr()+"/envd/images/e:t1"); return err }, errdefs.ErrInvalidArgument},
		{"ref without tag or digest", func() error { _, err := c.Get(ctx, "envd/images/e"); return err }, errdefs.ErrInvalidArgument},
		{"bad digest", func() error { _, err := c.Get(ctx, "envd/images/e@sha256:abc"); return err }, errdefs.ErrInvalidArgument},
		{"bad tag", func() error { _, err := c.ImportRootfs(ctx, src, "envd/images/e", ".bad"); return err }, errdefs.ErrInvalidArgument},
		{"layer with wrong size", func() error {
			bad := layer
			bad.Size++
			_, err := c.Append(ctx, img, bad, "envd/projects/x", "", nil)
			return err
		}, errdefs.ErrInvalidArgument},
		{"missing source", func() error {
			_, err := c.ImportRootfs(ctx, filepath.Join(src, "nope"), "envd/images/e", "")
			return err
		}, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want, "error: %v", err)
		})
	}
}

func TestDeleteManifest(t *testing.T) {
	t.Parallel()
	srv := startRegistry(t)
	c := clientOf(t, srv)
	ctx := context.Background()
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644))
	img, err := c.ImportRootfs(ctx, src, "envd/images/d", "t1")
	require.NoError(t, err)

	require.NoError(t, c.DeleteManifest(ctx, img))

	_, err = c.Get(ctx, img.Ref())
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = c.Get(ctx, "envd/images/d:t1")
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "the tag goes with the manifest")
	assert.ErrorIs(t, c.Verify(ctx, img), errdefs.ErrNotFound)
	assert.ErrorIs(t, c.DeleteManifest(ctx, img), errdefs.ErrNotFound)
}

func TestClosedServerIsUnavailable(t *testing.T) {
	t.Parallel()
	srv, err := Serve(context.Background(), t.TempDir(), "127.0.0.1:0")
	require.NoError(t, err)
	c := clientOf(t, srv)
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644))
	img, err := c.ImportRootfs(context.Background(), src, "envd/images/u", "t1")
	require.NoError(t, err)
	require.NoError(t, srv.Close(context.Background()))
	require.NoError(t, srv.Close(context.Background()), "close twice")

	tests := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"get", func(ctx context.Context) error { _, err := c.Get(ctx, img.Ref()); return err }},
		{"verify", func(ctx context.Context) error { return c.Verify(ctx, img) }},
		{"delete", func(ctx context.Context) error { return c.DeleteManifest(ctx, img) }},
		{"import", func(ctx context.Context) error { _, err := c.ImportRootfs(ctx, src, "envd/images/u", ""); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(context.Background())
			assert.ErrorIs(t, err, errdefs.ErrUnavailable, "error: %v", err)
		})
	}
}

func TestServeBadAddress(t *testing.T) {
	t.Parallel()
	_, err := Serve(context.Background(), t.TempDir(), "256.0.0.1:99999")
	assert.Error(t, err)
}

// TestServerLogger checks that the registry logs through the Server's own
// logger (found by distribution through the context) and not logrus'
// standard logger.
func TestServerLogger(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		level     logrus.Level
		wantLines []string
	}{
		{"debug shows requests", logrus.DebugLevel, []string{"http.request.uri=/v2/ ", "component=registry"}},
		{"default hides requests and 404s", logrus.WarnLevel, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var buf syncbuf.Buffer
			srv, err := Serve(context.Background(), t.TempDir(), "127.0.0.1:0", WithLogWriter(&buf), withLogLevel(tt.level))
			require.NoError(t, err)
			for _, u := range []string{"/v2/", "/v2/a/b/manifests/latest"} {
				req, err := http.NewRequest(http.MethodGet, "http://"+srv.Addr()+u, nil)
				require.NoError(t, err)
				req.SetBasicAuth(srv.Access().Node.User, srv.Access().Node.Password)
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				resp.Body.Close()
			}
			require.NoError(t, srv.Close(context.Background()))
			for _, want := range tt.wantLines {
				assert.Contains(t, buf.String(), want)
			}
			if tt.wantLines == nil {
				assert.Empty(t, buf.String())
			}
		})
	}
}

// Request headers past 64 KiB are refused (431) before any handler: a
// client cannot make the registry hold a megabyte per connection.
func TestServerRefusesHugeHeaders(t *testing.T) {
	t.Parallel()
	srv, err := Serve(context.Background(), t.TempDir(), "127.0.0.1:0", WithLogWriter(io.Discard))
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	req, err := http.NewRequest(http.MethodGet, "http://"+srv.Addr()+"/v2/", nil)
	require.NoError(t, err)
	req.SetBasicAuth(srv.Access().Node.User, srv.Access().Node.Password)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "an ordinary request")

	req.Header.Set("X-Filler", strings.Repeat("a", 100<<10))
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
}
