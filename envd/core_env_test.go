package envd_test

// The core tests (core_*_test.go) run the real service (envd.New) on a real
// PostgreSQL (a private cluster per test binary, a fresh database per test:
// internal/pgserver/pgtest) and the real embedded registry, in-process. Only
// the container runtime is a fake (internal/fakeruntime): no root, no
// containerd. Registry failures a real registry cannot show on demand come
// from faultyRegistry.

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/fakeruntime"
	"github.com/envd-dev/envd/internal/pgserver/pgtest"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/versions"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	testNode   = "node-a"
	testTenant = "acme"
	baseImage  = "base"
)

// coreEnv is one service with its own database, registry and runtime, as
// seen by one test: helpers fail t, which a subtest sets with with(t).
type coreEnv struct {
	t testing.TB
	*coreState
}

// coreState is what the tests of one env share.
type coreState struct {
	root    testing.TB // the top-level test or benchmark, owner of the env's cleanups
	ctx     context.Context
	store   *versions.Store
	regSrv  *registry.Server
	regRoot string
	reg     *faultyRegistry
	rt      *fakeruntime.Runtime
	engine  envd.Runtime // what the service is given: rt, or rt with a memory engine
	cfg     envd.Config
	svc     *envd.Service
	admin   types.Principal
	user    types.Principal // tenant testTenant
}

// newCoreEnv starts a service (Start called) with the base image imported.
// edit, if set, changes the config before New.
func newCoreEnv(t testing.TB, edit func(*envd.Config)) *coreEnv {
	t.Helper()
	return newCoreEnvOn(t, edit, false)
}

// newCoreEnvOn is newCoreEnv; with memory the runtime has a memory
// checkpoint engine (fakeruntime.Memory).
func newCoreEnvOn(t testing.TB, edit func(*envd.Config), memory bool) *coreEnv {
	t.Helper()
	// The env's whole life, the background loops of its service included:
	// long enough for a test's own waits (a squash waits two minutes) at
	// CI's load; the test binary's -timeout bounds a hang.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	e := &coreEnv{t: t, coreState: &coreState{root: t, ctx: ctx}}

	var err error
	e.store, err = versions.Open(ctx, pgtest.DSN(t))
	require.NoError(t, err)
	t.Cleanup(e.store.Close)

	e.regRoot = filepath.Join(t.TempDir(), "registry")
	e.regSrv, err = registry.Serve(ctx, e.regRoot, "127.0.0.1:0", registry.WithLogWriter(io.Discard))
	require.NoError(t, err)
	t.Cleanup(func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		assert.NoError(t, e.regSrv.Close(cctx))
	})
	a := e.regSrv.Access()
	rc, err := registry.NewClient(e.regSrv.Addr(), registry.WithCredential(a.Node), registry.WithDeleteCredential(a.GC))
	require.NoError(t, err)
	e.reg = &faultyRegistry{Client: rc}

	rtRoot := filepath.Join(t.TempDir(), "runtime")
	require.NoError(t, os.MkdirAll(rtRoot, 0o755))
	e.rt = fakeruntime.New(rtRoot)
	e.engine = e.rt
	if memory {
		e.engine = fakeruntime.Memory{Runtime: e.rt}
	}

	e.cfg = envd.Config{
		Node: testNode, WorkDir: filepath.Join(t.TempDir(), "work"), DataDir: t.TempDir(),
		PrefetchWindow: -1, Sweeper: e.regSrv,
		Logger: discardLogger(),
	}
	if edit != nil {
		edit(&e.cfg)
	}
	e.start()

	const adminToken = "core-test-admin-token"
	require.NoError(t, e.store.Access.EnsureAdminToken(ctx, "admin", adminToken))
	e.admin, err = e.svc.Parts().Tokens.Authenticate(ctx, adminToken)
	require.NoError(t, err)
	tok, err := e.svc.Parts().Tokens.CreateToken(ctx, e.admin, testTenant, types.CreateTokenRequest{})
	require.NoError(t, err)
	e.user, err = e.svc.Parts().Tokens.Authenticate(ctx, tok.Token)
	require.NoError(t, err)
	require.Equal(t, types.Principal{Tenant: testTenant}, e.user)

	_, err = e.svc.Parts().Images.ImportImage(ctx, e.admin, baseImage, bytes.NewReader(baseRootfsTar(t)))
	require.NoError(t, err)
	return e
}

// start makes and starts a service on the env's store, registry and runtime.
func (e *coreEnv) start() {
	e.t.Helper()
	svc, err := envd.New(e.cfg, e.store, e.reg, e.engine)
	require.NoError(e.t, err)
	require.NoError(e.t, svc.Start(e.ctx))
	e.svc = svc
	e.root.Cleanup(svc.Close) // Close twice is harmless: the second waits for nothing
}

// with is the env as seen by t, a subtest: its helpers fail t, not the
// test that made the env.
func (e *coreEnv) with(t *testing.T) *coreEnv { return &coreEnv{t: t, coreState: e.coreState} }

// restart closes the service, as a process exit would (its unfinished
// operations stay unfinished), and starts a new one on the same store.
func (e *coreEnv) restart() {
	e.t.Helper()
	e.svc.Close()
	e.start()
}

// project creates a project of the user's tenant on the base image.
func (e *coreEnv) project(name string) types.Project {
	e.t.Helper()
	p, err := e.svc.CreateProject(e.ctx, e.user, types.CreateProjectRequest{Name: name, Base: baseImage}, "")
	require.NoError(e.t, err)
	require.Equal(e.t, 1, p.Current, "a new project's version 1 is its base and current")
	return p
}

// instance starts an instance of project and checks it runs.
func (e *coreEnv) instance(project string, req types.CreateInstanceRequest) types.Instance {
	e.t.Helper()
	in, err := e.svc.Parts().Instances.CreateInstance(e.ctx, e.user, project, req, "")
	require.NoError(e.t, err)
	require.Equal(e.t, types.StateRunning, in.State)
	return in
}

// write creates file name (slash-separated, relative to the instance's
// root) in the instance's writable layer, as a process inside would.
func (e *coreEnv) write(id, name, content string) {
	e.t.Helper()
	upper := e.rt.UpperDir(id)
	require.NotEmpty(e.t, upper, "instance %s has no writable layer", id)
	p := filepath.Join(upper, filepath.FromSlash(name))
	require.NoError(e.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(e.t, os.WriteFile(p, []byte(content), 0o644))
}

// save asks for a save and waits for its operation to end.
func (e *coreEnv) save(id string, req types.SaveRequest) types.Operation {
	e.t.Helper()
	op, err := e.svc.Save(e.ctx, e.user, id, req, "")
	require.NoError(e.t, err)
	require.Equal(e.t, types.OpKindSave, op.Kind)
	return e.wait(e.user, op.ID)
}

// saved is save that must succeed; it returns the save's result.
func (e *coreEnv) saved(id string, req types.SaveRequest) types.SaveResult {
	e.t.Helper()
	op := e.save(id, req)
	require.Equal(e.t, types.OpSucceeded, op.State, "save failed: %+v", op.Error)
	var res types.SaveResult
	require.NoError(e.t, json.Unmarshal(op.Result, &res))
	return res
}

// wait polls an operation until it is done.
func (e *coreEnv) wait(p types.Principal, id string) types.Operation {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		op, err := e.svc.Parts().Operations.GetOperation(e.ctx, p, id)
		require.NoError(e.t, err)
		if op.Done() {
			return op
		}
		require.True(e.t, time.Now().Before(deadline), "operation %s still %s", id, op.State)
		time.Sleep(20 * time.Millisecond)
	}
}

// eventTypes are the types of an operation's events, in order.
func (e *coreEnv) eventTypes(p types.Principal, id string) []string {
	e.t.Helper()
	evs, err := e.svc.Parts().Operations.OperationEvents(e.ctx, p, id, 0)
	require.NoError(e.t, err)
	var out []string
	for i, ev := range evs {
		require.Equal(e.t, i+1, ev.Seq, "events are numbered from 1 without gaps")
		out = append(out, ev.Type)
	}
	return out
}

// versionsOf lists the project's versions as "n:state[:current]".
func (e *coreEnv) versionsOf(project string) []string {
	e.t.Helper()
	vs, err := e.svc.ListVersions(e.ctx, e.user, project)
	require.NoError(e.t, err)
	var out []string
	for _, v := range vs {
		s := strings.Join([]string{itoa(v.Number), v.State}, ":")
		if v.Current {
			s += ":current"
		}
		out = append(out, s)
	}
	return out
}

func (e *coreEnv) current(project string) int {
	e.t.Helper()
	p, err := e.svc.GetProject(e.ctx, e.user, project)
	require.NoError(e.t, err)
	return p.Current
}

// task is the runtime's state of the instance's task.
func (e *coreEnv) task(id string) string {
	e.t.Helper()
	st, err := e.rt.Status(e.ctx, id)
	require.NoError(e.t, err)
	return st.Task
}

// instanceNow is the instance as the service answers now, the zero value
// on an error: for conditions polled outside the test's goroutine.
func (e *coreEnv) instanceNow(id string) types.Instance {
	in, _ := e.svc.Parts().Instances.GetInstance(e.ctx, e.user, id)
	return in
}

func (e *coreEnv) getInstance(id string) types.Instance {
	e.t.Helper()
	in, err := e.svc.Parts().Instances.GetInstance(e.ctx, e.user, id)
	require.NoError(e.t, err)
	return in
}

// layerFiles reads the top layer of a version's image: its entries' names
// mapped to their content (directories to "").
func (e *coreEnv) layerFiles(project string, n int) map[string]string {
	e.t.Helper()
	v, err := e.svc.GetVersion(e.ctx, e.user, project, n)
	require.NoError(e.t, err)
	img, err := e.reg.Get(e.ctx, v.Image)
	require.NoError(e.t, err)
	require.NotEmpty(e.t, img.Layers)
	rc, err := e.reg.OpenLayer(e.ctx, img, len(img.Layers)-1)
	require.NoError(e.t, err)
	defer rc.Close()
	out := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(e.t, err)
		b, err := io.ReadAll(tr)
		require.NoError(e.t, err)
		switch h.Name {
		case "stargz.index.json", ".prefetch.landmark", ".no.prefetch.landmark":
			continue // eStargz's own entries
		}
		out[h.Name] = string(b)
	}
}

// registryBlobs lists the blobs in the registry's storage: what a push
// left behind, whether or not a manifest references it.
func (e *coreEnv) registryBlobs() []string {
	e.t.Helper()
	var out []string
	err := filepath.WalkDir(e.regRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && d.Name() == "data" && strings.Contains(p, string(filepath.Separator)+"blobs"+string(filepath.Separator)) {
			out = append(out, filepath.Base(filepath.Dir(p)))
		}
		return nil
	})
	require.NoError(e.t, err)
	sort.Strings(out)
	return out
}

// workDirEntries lists what saves left in the service's work dir (but
// the node's kept memory images, which stay on purpose).
func (e *coreEnv) workDirEntries() []string {
	e.t.Helper()
	ents, err := os.ReadDir(e.cfg.WorkDir)
	require.NoError(e.t, err)
	var out []string
	for _, d := range ents {
		if d.Name() == "memory-cache" {
			continue
		}
		out = append(out, d.Name())
	}
	return out
}

// opErr rebuilds the kind of a failed operation's error from its code.
func opErr(t *testing.T, op types.Operation) error {
	t.Helper()
	require.Equal(t, types.OpFailed, op.State)
	require.NotNil(t, op.Error)
	kind := errdefs.FromCode(op.Error.Code)
	require.NotNil(t, kind, "code %q of %q is no kind", op.Error.Code, op.Error.Message)
	return kind
}

// baseRootfsTar is a tiny root filesystem.
func baseRootfsTar(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	now := time.Unix(1700000000, 0)
	for _, d := range []string{"bin/", "etc/", "home/", "tmp/"} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: now}))
	}
	for name, content := range map[string]string{"etc/os-release": "ID=core-test\n", "bin/true": "#!/bin/sh\n"} {
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(content)), ModTime: now}))
		_, err := tw.Write([]byte(content))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

// faultyRegistry is the real registry client, whose next Append can be
// made to fail (a failure the embedded registry cannot show on demand); it
// counts the Appends that reached the registry.
type faultyRegistry struct {
	*registry.Client
	mu        sync.Mutex
	failNext  error
	pushes    int
	afterPush func(registry.Image) // runs after a successful Append
}

func (f *faultyRegistry) Append(ctx context.Context, parent registry.Image, layer registry.LayerFile, targetRepo, tag string, annotations map[string]string) (registry.Image, error) {
	f.mu.Lock()
	err := f.failNext
	f.failNext = nil
	after := f.afterPush
	f.mu.Unlock()
	if err != nil {
		return registry.Image{}, err
	}
	img, err := f.Client.Append(ctx, parent, layer, targetRepo, tag, annotations)
	if err == nil {
		f.mu.Lock()
		f.pushes++
		f.mu.Unlock()
		if after != nil {
			after(img)
		}
	}
	return img, err
}

func (f *faultyRegistry) failNextAppend(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failNext = err
}

func (f *faultyRegistry) setAfterPush(fn func(registry.Image)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.afterPush = fn
}

func (f *faultyRegistry) pushCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pushes
}

var _ envd.ImageStore = (*faultyRegistry)(nil)
var _ envd.Runtime = (*fakeruntime.Runtime)(nil)

func intp(n int) *int { return &n }

func itoa(n int) string { return strconv.Itoa(n) }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
