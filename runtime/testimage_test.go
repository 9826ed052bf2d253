package runtime

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"
)

// testRegistry is an embedded CNCF distribution registry on 127.0.0.1:0 with
// filesystem storage, serving plain HTTP.
type testRegistry struct {
	host string // 127.0.0.1:PORT
	srv  *http.Server

	mu       sync.Mutex
	requests map[string]int // "METHOD path" -> count
}

// count is how many requests "METHOD path" the registry has had.
func (r *testRegistry) count(method, path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests[method+" "+path]
}

func startTestRegistry(t testing.TB) *testRegistry {
	t.Helper()
	logrus.SetOutput(io.Discard) // the registry's access log
	cfg := &configuration.Configuration{
		Storage: configuration.Storage{
			"filesystem": configuration.Parameters{"rootdirectory": t.TempDir()},
			"delete":     configuration.Parameters{"enabled": true},
		},
	}
	cfg.HTTP.Secret = "test"
	ctx, cancel := context.WithCancel(context.Background())
	app := handlers.NewApp(ctx, cfg)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	reg := &testRegistry{host: ln.Addr().String(), requests: map[string]int{}}
	reg.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		reg.mu.Lock()
		reg.requests[req.Method+" "+req.URL.Path]++
		reg.mu.Unlock()
		app.ServeHTTP(w, req)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = reg.srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = reg.srv.Close()
		cancel()
	})
	return reg
}

var (
	busyboxLayerOnce sync.Once
	busyboxLayerTar  []byte
	busyboxLayerErr  error
)

// busyboxRootfsTar is a tar of a minimal rootfs: the static /bin/busybox with a
// symlink in /bin for every applet, /etc/passwd, /etc/group, /tmp and /root.
// Built in memory, so ownership is root whoever runs the test.
func busyboxRootfsTar(t testing.TB) []byte {
	t.Helper()
	busyboxLayerOnce.Do(func() {
		busyboxLayerTar, busyboxLayerErr = buildBusyboxTar()
	})
	require.NoError(t, busyboxLayerErr, "busybox-static must be installed at /bin/busybox")
	return busyboxLayerTar
}

func buildBusyboxTar() ([]byte, error) {
	bin, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, err
	}
	list, err := exec.Command("/bin/busybox", "--list").Output()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Now()
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: now})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: now}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, d := range []struct {
		name string
		mode int64
	}{{"bin", 0o755}, {"etc", 0o755}, {"root", 0o700}, {"tmp", 0o1777}, {"dev", 0o755},
		{"proc", 0o555}, {"sys", 0o555}, {"run", 0o755}, {"var", 0o755}, {"usr", 0o755}, {"usr/bin", 0o755}} {
		if err := dir(d.name, d.mode); err != nil {
			return nil, err
		}
	}
	if err := file("bin/busybox", 0o755, bin); err != nil {
		return nil, err
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet == "busybox" {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", Mode: 0o777, ModTime: now}); err != nil {
			return nil, err
		}
	}
	if err := file("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n")); err != nil {
		return nil, err
	}
	if err := file("etc/group", 0o644, []byte("root:x:0:\nnogroup:x:65534:\n")); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// pushBusyboxImage pushes the busybox rootfs as a one-layer image to reg and
// returns its digest reference (host:port/repo@sha256:...).
func pushBusyboxImage(t testing.TB, reg *testRegistry, repo string) string {
	t.Helper()
	return pushRootfsImage(t, reg, repo, busyboxRootfsTar(t))
}

// pushRootfsImage pushes the rootfs tar data as a one-layer image to reg
// and returns its digest reference.
func pushRootfsImage(t testing.TB, reg *testRegistry, repo string, data []byte) string {
	t.Helper()
	return pushRootfsImageWorkdir(t, reg, repo, data, "/")
}

// pushRootfsImageWorkdir is pushRootfsImage with the image's WorkingDir.
func pushRootfsImageWorkdir(t testing.TB, reg *testRegistry, repo string, data []byte, workdir string) string {
	t.Helper()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	require.NoError(t, err)
	img, err := mutate.AppendLayers(empty.Image, layer)
	require.NoError(t, err)
	cf, err := img.ConfigFile()
	require.NoError(t, err)
	cf = cf.DeepCopy()
	// Without os and architecture containerd's platform matching drops the
	// image (FACTS.md).
	cf.OS = "linux"
	cf.Architecture = goruntime.GOARCH
	cf.Config = v1.Config{
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Cmd:        []string{"/bin/sh"},
		WorkingDir: workdir,
	}
	img, err = mutate.ConfigFile(img, cf)
	require.NoError(t, err)
	tag, err := name.NewTag(reg.host+"/"+repo+":latest", name.Insecure)
	require.NoError(t, err)
	require.NoError(t, remote.Write(tag, img))
	dgst, err := img.Digest()
	require.NoError(t, err)
	return reg.host + "/" + repo + "@" + dgst.String()
}
