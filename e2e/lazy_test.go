package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/internal/syncbuf"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/snapshotter/prefetch"
	"github.com/envd-dev/envd/snapshotter/stargz"
)

// stargzRoot is the state dir of the node's lazy snapshotter process.
func stargzRoot() string { return filepath.Join(env.dataDir, "stargz", "root") }

// containerSnapshotter is the snapshotter of the instance's container.
func containerSnapshotter(t *testing.T, id string) string {
	t.Helper()
	c := env.node.Runtime().Client()
	cctx := namespaces.WithNamespace(ctx(t), "envd")
	ctr, err := c.LoadContainer(cctx, id)
	require.NoError(t, err)
	info, err := ctr.Info(cctx, client.WithoutRefreshedMetadata)
	require.NoError(t, err)
	return info.Snapshotter
}

// lazyLayer finds the lazy (FUSE) mount of the layer with this digest
// under the snapshotter root, and its state.
func lazyLayer(t *testing.T, root, digest string) (string, stargz.State) {
	t.Helper()
	mps, err := stargz.LazyMounts(root)
	require.NoError(t, err)
	for _, mp := range mps {
		st, err := stargz.LayerState(mp)
		if err == nil && st.Digest == digest {
			return mp, st
		}
	}
	t.Fatalf("no lazy mount of layer %s among %v", digest, mps)
	return "", stargz.State{}
}

// topLayer is the digest of the last layer of the version's image.
func topLayer(t *testing.T, project string, version int) (registry.Image, string) {
	t.Helper()
	v, err := env.c.GetVersion(ctx(t), project, version)
	require.NoError(t, err)
	img, err := env.node.RegistryClient().Get(ctx(t), v.Image)
	require.NoError(t, err)
	require.NotEmpty(t, img.Layers)
	return img, img.Layers[len(img.Layers)-1].Digest
}

// TestRootLazyRestore: a version saved as eStargz (the default) restores
// through the stargz snapshotter, its first command answers before the new
// layer is fetched, and saves from it work; a zstd version restores with
// overlayfs.
func TestRootLazyRestore(t *testing.T) {
	require.Equal(t, stargz.Name, env.node.Runtime().LazySnapshotter(), "the node must run the lazy snapshotter (see DATA_DIR/stargz/snapshotter.log)")

	p := newProject(t, "lazy")
	in := up(t, p, 0)
	sum := mustSh(t, in.ID, "head -c 52428800 /dev/urandom > /big50 && sha256sum /big50")
	_, res := save(t, in.ID, "50 MB file")
	img, layer := topLayer(t, p, res.Version)
	require.NotEmpty(t, img.Layers[len(img.Layers)-1].Annotations["containerd.io/snapshot/stargz/toc.digest"], "saved layer is not eStargz")

	// The registry serves ranged blob reads (the stargz snapshotter's
	// fetches are ranged GETs).
	repo := strings.SplitN(img.Repo, "@", 2)[0]
	req, err := http.NewRequestWithContext(ctx(t), http.MethodGet,
		fmt.Sprintf("http://%s/v2/%s/blobs/%s", env.node.RegistryAddr(), repo, layer), nil)
	require.NoError(t, err)
	req.Header.Set("Range", "bytes=100-1123")
	setNodeAuth(t, req, env.node)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusPartialContent, resp.StatusCode)
	assert.Len(t, body, 1024)

	start := time.Now()
	in2 := up(t, p, res.Version)
	assert.Equal(t, "ok", mustSh(t, in2.ID, "echo ok"))
	firstCmd := time.Since(start)
	_, st := lazyLayer(t, stargzRoot(), layer)
	t.Logf("restore to first command: %v; layer %s fetched %d of %d bytes", firstCmd, layer, st.FetchedSize, st.Size)
	// Lazy means containerd mounted the layer through the snapshotter
	// without pulling its blob first. (How much the snapshotter's background
	// fetch has read by now depends on the machine's load: on a busy machine
	// it finishes 50 MB before a slow first command, so it proves nothing.)
	assert.False(t, holdsBlob(t, layer), "containerd holds the layer's blob: the restore pulled it instead of mounting it lazily")
	assert.Equal(t, stargz.Name, containerSnapshotter(t, in2.ID))
	// The lazy mounts belong to the snapshotter process, not to envd: the
	// instance keeps reading through a restart of the API process.
	restartNode(t)
	assert.Equal(t, sum, mustSh(t, in2.ID, "sha256sum /big50"))

	// Saves read the upper dir of the stargz snapshotter's overlay.
	mustSh(t, in2.ID, "echo lazy-change > /lazy-change && rm /fixtures/delete-me")
	_, res3 := save(t, in2.ID, "change on a lazy instance")
	in3 := up(t, p, res3.Version)
	assert.Equal(t, "lazy-change", mustSh(t, in3.ID, "cat /lazy-change"))
	assert.Equal(t, "gone", mustSh(t, in3.ID, "test -e /fixtures/delete-me || echo gone"))
	assert.Equal(t, sum, mustSh(t, in3.ID, "sha256sum /big50"))
	assert.Equal(t, stargz.Name, containerSnapshotter(t, in3.ID))

	// Imported bases are eStargz too, so the base layer was lazy as well.
	baseImg, err := env.node.RegistryClient().Get(ctx(t), img.Repo+"@"+img.Digest)
	require.NoError(t, err)
	assert.NotEmpty(t, baseImg.Layers[0].Annotations["containerd.io/snapshot/stargz/toc.digest"], "imported base is eStargz")

	// A gzip base (as images from other tools are) and zstd saves: no
	// eStargz layer at all, so overlayfs and a full pull.
	tarPath := filepath.Join(t.TempDir(), "fixture.tar")
	require.NoError(t, os.WriteFile(tarPath, env.fixtureTar, 0o644))
	gz, err := env.node.RegistryClient().ImportRootfs(ctx(t), tarPath, "envd/images/gzip-fixture", "latest")
	require.NoError(t, err)
	zp := fmt.Sprintf("lazy-zstd-%d", projectSeq.Add(1))
	_, err = env.c.CreateProject(ctx(t), types.CreateProjectRequest{Name: zp, Base: gz.Ref(), Compression: "zstd"})
	require.NoError(t, err)
	zin := up(t, zp, 0)
	mustSh(t, zin.ID, "echo zstd > /zstd-file")
	_, zres := save(t, zin.ID, "zstd change")
	zin2 := up(t, zp, zres.Version)
	assert.Equal(t, "zstd", mustSh(t, zin2.ID, "cat /zstd-file"))
	assert.Equal(t, "overlayfs", containerSnapshotter(t, zin2.ID))
	_, ztop := topLayer(t, zp, zres.Version)
	assert.True(t, holdsBlob(t, ztop), "a full pull leaves the layer's blob in containerd's content store")
}

// holdsBlob reports whether containerd's content store has the blob: a
// pulled layer's is there, a lazily mounted one's is not.
func holdsBlob(t *testing.T, dgst string) bool {
	t.Helper()
	_, err := env.node.Runtime().Client().ContentStore().Info(namespaces.WithNamespace(ctx(t), "envd"), digest.Digest(dgst))
	if cerrdefs.IsNotFound(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// TestRootLazyRegistryOutage: an instance started lazily keeps answering
// while the registry is frozen or gone, its init lives on once what it
// needs is local, a read of a file not fetched yet fails with an I/O error
// after the fetch timeout instead of hanging (or waiting a multiple of it),
// and once the registry is back the layer is fetched in full so the
// instance no longer needs it.
//
// The version is saved on the shared node; a second runtime (own namespace
// and state dir) on the node's containerd and lazy snapshotter pulls it
// through a TCP proxy in front of the node's registry. Stopping the proxy is
// the registry going away for that runtime; it is throttled while up the
// first time so the background fetch of the 200 MB layer cannot finish
// before the outage starts.
func TestRootLazyRegistryOutage(t *testing.T) {
	t.Parallel()
	require.Equal(t, stargz.Name, env.node.Runtime().LazySnapshotter())
	p := newProject(t, "outage")
	in := up(t, p, 0)
	sum := mustSh(t, in.ID, "head -c 209715200 /dev/urandom > /big200 && sha256sum /big200 | cut -d' ' -f1")
	_, res := save(t, in.ID, "200 MB file")
	_, layer := topLayer(t, p, res.Version)
	v, err := env.c.GetVersion(ctx(t), p, res.Version)
	require.NoError(t, err)

	px, rt := proxiedRuntime(t, "outage", 4<<20)

	ref := px.addr + "/" + v.Image
	require.NoError(t, rt.Pull(ctx(t), ref))
	require.NoError(t, rt.Create(ctx(t), runtime.InstanceSpec{ID: "outage-1", Image: ref}))
	exec := func(timeout time.Duration, script string) (int, string, time.Duration) {
		c, cancel := context.WithTimeout(ctx(t), timeout)
		defer cancel()
		var out syncbuf.Buffer // written by two copy goroutines
		start := time.Now()
		code, err := rt.Exec(c, "outage-1", runtime.ExecSpec{Args: []string{"/bin/sh", "-c", script}, Stdout: &out, Stderr: &out})
		require.NoError(t, err, "exec %q: %s", script, out.String())
		return code, strings.TrimSpace(out.String()), time.Since(start)
	}
	code, out, _ := exec(time.Minute, "echo ok")
	require.Equal(t, 0, code, out)
	mp, st := lazyLayer(t, stargzRoot(), layer)
	require.Less(t, st.FetchedSize, st.Size/2, "background fetch went too far before the outage")

	// What the init needs is made local, as a node does before it reports
	// a lazy instance Running (lifecycle's warm).
	rst, err := rt.Status(ctx(t), "outage-1")
	require.NoError(t, err)
	warmed, err := prefetch.Warm(ctx(t), int(rst.Pid), prefetch.WarmOptions{Commands: []string{"sleep", "cat"}})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, warmed.Needed, 1)
	t.Logf("warmed the init's needs: %+v", warmed)

	// The registry freezes (as a registry process stopped with SIGSTOP):
	// connections are accepted and never answered. A read of data not
	// fetched yet fails with EIO after the snapshotter's fetch timeout
	// (20 s), once, not two or three times that; the init, which has what
	// it needs, lives on.
	px.freeze()
	frozen := time.Now()
	code, out, took := exec(2*time.Minute, "cat /big200 > /dev/null")
	t.Logf("read with the registry frozen: exit %d after %v: %s", code, took, out)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, out, "Input/output error")
	assert.Less(t, took, 30*time.Second, "a read waits about the 20 s fetch timeout, not a multiple of it")
	code, out, _ = exec(time.Minute, "sleep 0 && echo alive")
	assert.Equal(t, 0, code, out)
	assert.Equal(t, "alive", out)
	time.Sleep(time.Until(frozen.Add(30 * time.Second)))
	rst, err = rt.Status(ctx(t), "outage-1")
	require.NoError(t, err)
	assert.Equal(t, "running", rst.Task, "the init died while the registry was frozen")
	px.thaw()

	// The registry goes away: connections are refused. A read retries
	// through the outage for the fetch timeout, then fails with EIO.
	px.stop()
	stopped := time.Now()
	code, out, took = exec(2*time.Minute, "cat /big200 > /dev/null")
	t.Logf("read with the registry gone: exit %d after %v: %s", code, took, out)
	assert.NotEqual(t, 0, code)
	assert.Contains(t, out, "Input/output error") // EIO, as busybox words it
	assert.Less(t, took, 30*time.Second)
	// Files already there still answer.
	code, out, _ = exec(time.Minute, "echo still-here && cat /fixtures/keep/untouched")
	assert.Equal(t, 0, code, out)

	// Long enough for the snapshotter's one-shot background fetch (it
	// starts after 5 s without foreground checks) to start and give up.
	time.Sleep(time.Until(stopped.Add(15 * time.Second)))

	// Back, on the same address: the layer gets fetched in full without
	// anyone reading it.
	st, err = stargz.LayerState(mp)
	require.NoError(t, err)
	t.Logf("before the registry comes back: fetched %d of %d bytes", st.FetchedSize, st.Size)
	px.start(0)
	back := time.Now()
	deadline := time.Now().Add(4 * time.Minute)
	for {
		st, err = stargz.LayerState(mp)
		require.NoError(t, err)
		if st.Cached || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	require.True(t, st.Cached, "layer not fully fetched after the registry came back: %+v", st)
	t.Logf("layer cached %v after the registry came back (fetched %d of %d bytes by the background fetch)",
		time.Since(back).Round(time.Second), st.FetchedSize, st.Size)
	if b, err := os.ReadFile(filepath.Join(env.dataDir, "stargz", "snapshotter.log")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "fetch") || strings.Contains(line, "stalled") || strings.Contains(line, "fully cached") {
				t.Log("snapshotter: " + line)
			}
		}
	}

	// And the instance no longer needs the registry.
	px.stop()
	code, out, took = exec(2*time.Minute, "sha256sum /big200")
	assert.Equal(t, 0, code, "after %v: %s", took, out)
	assert.Equal(t, sum, strings.TrimSpace(strings.SplitN(out+" ", " ", 2)[0]))
}

// proxy forwards TCP connections from addr to a backend; stop closes the
// listener and every connection (connections are then refused), start
// listens again on the same address.
type proxy struct {
	t       *testing.T
	addr    string
	backend string

	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
	rate   int           // bytes per second from backend to client per connection; 0 = unlimited
	frozen chan struct{} // non-nil while frozen: closed by thaw
}

// freeze makes the proxy behave like a registry process stopped with
// SIGSTOP: connections are still accepted (by the kernel's backlog) and
// requests sent, but nothing answers until thaw; data in flight stops.
func (p *proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen == nil {
		p.frozen = make(chan struct{})
	}
}

func (p *proxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen != nil {
		close(p.frozen)
		p.frozen = nil
	}
}

// wait blocks while the proxy is frozen.
func (p *proxy) wait() {
	p.mu.Lock()
	f := p.frozen
	p.mu.Unlock()
	if f != nil {
		<-f
	}
}

// gated passes reads through while the proxy is not frozen.
type gated struct {
	p *proxy
	r io.Reader
}

func (g gated) Read(b []byte) (int, error) {
	g.p.wait()
	n, err := g.r.Read(b)
	g.p.wait() // data read while frozen is held back
	return n, err
}

func startProxy(t *testing.T, backend string, rate int) *proxy {
	p := &proxy{t: t, backend: backend, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.addr = ln.Addr().String()
	p.serve(ln, rate)
	t.Cleanup(p.stop)
	return p
}

// proxiedRuntime is a second runtime on the node's containerd and lazy
// snapshotter, in namespace ns, that pulls through a proxy of the node's
// registry passing rate bytes/s per connection (0: no limit). Its one
// instance is to be named ns+"-1"; cleanup removes it, the runtime's
// network and images, and the proxy's credential.
func proxiedRuntime(t *testing.T, ns string, rate int) (*proxy, *runtime.Runtime) {
	px := startProxy(t, env.node.RegistryAddr(), rate)
	// The proxy is another registry host to containerd and the node's lazy
	// snapshotter: both need the node credential for it.
	cred := nodeCredential(t, env.node)
	credFile := filepath.Join(env.dataDir, "stargz", "registry.credentials")
	require.NoError(t, stargz.WriteCredentials(credFile, map[string]registry.Credential{env.node.RegistryAddr(): cred, px.addr: cred}))
	t.Cleanup(func() {
		assert.NoError(t, stargz.WriteCredentials(credFile, map[string]registry.Credential{env.node.RegistryAddr(): cred}))
	})
	rt, err := runtime.New(ctx(t), runtime.Config{
		Address:             filepath.Join(env.dataDir, "containerd", "containerd.sock"),
		Namespace:           ns,
		StateDir:            filepath.Join(filepath.Dir(env.dataDir), ns+"-runtime"),
		PlainHTTPRegistries: []string{px.addr},
		RegistryCredentials: func(string) (string, string, error) { return cred.User, cred.Password, nil },
		LazySnapshotter:     stargz.Name,
		StopGrace:           time.Second,
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		px.start(0) // a proxy a test stopped: the removal must not wait on a registry that is gone
		assert.NoError(t, rt.Remove(cctx, ns+"-1"))
		assert.NoError(t, rt.DestroyNetwork())
		nctx := namespaces.WithNamespace(cctx, ns)
		if imgs, err := rt.Client().ImageService().List(nctx); err == nil {
			for _, img := range imgs {
				_ = rt.Client().ImageService().Delete(nctx, img.Name)
			}
		}
		_ = rt.Close()
	})
	return px, rt
}

func (p *proxy) start(rate int) {
	p.mu.Lock()
	running := p.ln != nil
	p.mu.Unlock()
	if running {
		return
	}
	var ln net.Listener
	var err error
	for range 50 { // the port may linger a moment
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(p.t, err)
	p.serve(ln, rate)
}

func (p *proxy) serve(ln net.Listener, rate int) {
	p.mu.Lock()
	p.ln, p.rate = ln, rate
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.handle(c)
		}
	}()
}

func (p *proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln == nil {
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *proxy) handle(c net.Conn) {
	if !p.track(c) {
		c.Close()
		return
	}
	p.wait() // frozen: accepted, never answered
	b, err := net.Dial("tcp", p.backend)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(c, b) {
		c.Close()
		b.Close()
		return
	}
	p.mu.Lock()
	rate := p.rate
	p.mu.Unlock()
	go func() { _, _ = io.Copy(b, gated{p, c}); b.Close() }()
	var src io.Reader = gated{p, b}
	if rate > 0 {
		src = &throttled{r: src, rate: rate, start: time.Now()}
	}
	_, _ = io.Copy(c, src)
	c.Close()
}

func (p *proxy) stop() {
	p.thaw()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

type throttled struct {
	r     io.Reader
	rate  int
	start time.Time
	n     int
}

func (t *throttled) Read(b []byte) (int, error) {
	if len(b) > 32<<10 {
		b = b[:32<<10]
	}
	n, err := t.r.Read(b)
	t.n += n
	if ahead := time.Duration(float64(t.n)/float64(t.rate)*float64(time.Second)) - time.Since(t.start); ahead > 0 {
		time.Sleep(ahead)
	}
	return n, err
}

// What a restored instance reads in its first window is recorded on the
// project, and the next save puts those files first in its eStargz layer.
func TestRootFirstReadsRecordedForPrefetch(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := newProject(t, "prefetch")
	in := up(t, p, 0)
	mustSh(t, in.ID, "cat /fixtures/keep/untouched /fixtures/link-target > /dev/null")
	var proj types.Project
	require.Eventually(t, func() bool {
		var err error
		proj, err = env.c.GetProject(c, p)
		return err == nil && len(proj.Prefetch) > 0
	}, prefetchWindow+15*time.Second, 200*time.Millisecond, "the first reads are recorded")
	assert.Contains(t, proj.Prefetch, "/fixtures/keep/untouched")
	assert.Contains(t, proj.Prefetch, "/fixtures/link-target")
	for _, f := range proj.Prefetch {
		assert.NotRegexp(t, `^/(proc|sys|dev|run|tmp)/`, f)
	}
	mustSh(t, in.ID, "echo new > /fixtures/new-file")
	_, res := save(t, in.ID, "with prioritized files")
	assert.True(t, res.Current)
	b := up(t, p, 0)
	assert.Equal(t, "stays", mustSh(t, b.ID, "cat /fixtures/keep/untouched"))
}
