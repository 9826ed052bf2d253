// Package e2e drives envd end to end, through its HTTP API, against the real
// parts: a private containerd, the embedded registry and a private PostgreSQL,
// all started by node.Start under a temporary data dir. Needs root (Linux):
// the tests fail, never skip, without it.
package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/apispec"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/internal/dnstest"
)

// env is the node shared by the tests of this package; each test uses its
// own projects.
var env struct {
	tmpDir     string // the package's temporary dir, removed when its tests end
	dataDir    string
	fixtureTar []byte // the fixture base image as a tar, for nodes a test starts itself
	node       *node.Node
	c          *client.Client
	// spec checks every request and answer of the package's node (and of
	// its restarts) against docs/openapi.yaml; run fails on a violation.
	spec *apispec.Validator
	// dns is the egress gateway's upstream resolver of the shared node
	// (egress by name): names the tests set, on loopback.
	dns *dnstest.Server
	// upstreamCA is the test's own CA, which signs the HTTPS servers the
	// instances reach; the shared node trusts it upstream
	// (EgressUpstreamCAFile = upstreamCA.file), the instances do not.
	upstreamCA *testCA
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	flag.Parse()
	setDefaultParallel(defaultParallel)
	if err := selectGroup(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 2
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: these tests need root (containerd, overlayfs, network namespaces); run scripts/test.sh as root")
		return 1
	}
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "envd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = os.Chmod(dir, 0o755) // the postgres user must reach its cluster dir
	defer os.RemoveAll(dir)
	env.tmpDir = dir
	env.dataDir = filepath.Join(dir, "data")
	doc, err := apispec.LoadSpec(ctx, "../docs/openapi.yaml")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if env.spec, err = apispec.NewValidator(doc); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if env.dns, err = dnstest.Listen(nil); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: resolver:", err)
		return 1
	}
	defer env.dns.Close()
	if env.upstreamCA, err = newTestCA("envd e2e upstream CA", filepath.Join(dir, "upstream-ca.pem")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: upstream CA:", err)
		return 1
	}
	n, err := node.Start(ctx, sharedNodeConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: start node:", err)
		return 1
	}
	env.node = n
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// A node restartNode started holds parts of its own (its API,
		// its buildkitd): close it too, or its buildkitd outlives the run.
		if env.node != n {
			env.node.Close(sctx)
		}
		n.Shutdown(sctx)
	}()
	if env.c, err = client.New(n.URL, n.Token); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	if err := importFixtureImage(ctx, filepath.Join(dir, "rootfs")); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: import base image:", err)
		return 1
	}
	code := m.Run()
	fmt.Fprintf(os.Stderr, "e2e: %d requests checked against docs/openapi.yaml\n", env.spec.Checked())
	var report bytes.Buffer
	if env.spec.Report(&report) {
		fmt.Fprintf(os.Stderr, "e2e: requests or answers that do not match docs/openapi.yaml (method path -> status: error):\n%s", report.String())
		if code == 0 {
			code = 1
		}
	}
	return code
}

// defaultParallel is how many tests of this package run at once unless
// -parallel says otherwise. They wait on instances, containerd, the
// registry and timers far more than on the CPU: four at a time keep two
// cores busy without starving the shared node (see
// docs/notes/testing.md for which tests run in parallel and why).
const defaultParallel = 4

// setDefaultParallel sets -test.parallel to n unless the command line set it.
func setDefaultParallel(n int) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		_ = flag.Set("test.parallel", fmt.Sprint(n))
	}
}

// sharedNodeConfig is the configuration of the node the tests share, at
// its first start and at every restart: every answer checked against the
// spec, metrics also on a listener of their own.
//
// $ENVD_E2E_RUNTIME_CLASS sets the node's default runtime class (gvisor):
// the scenarios then run on it, e.g.
// `ENVD_E2E_RUNTIME_CLASS=gvisor go test -run 'TestRootSaveRestoreRoundTrip|...' ./e2e/`
// (docs/gvisor.md lists which ones pass there and why the others do not).
func sharedNodeConfig() node.Config {
	return node.Config{DataDir: env.dataDir, DefaultTTL: time.Hour, PrefetchWindow: prefetchWindow,
		WrapAPI: env.spec.Wrap, MetricsListen: "127.0.0.1:0", SSHListen: "127.0.0.1:0", PreviewDomain: previewDomain,
		Placement: envd.PlacementLocal, // the tests ask the node they mean
		Limits:    sharedNodeLimits, Lease: testLease, Capacity: sharedNodeCapacity,
		RuntimeClass: os.Getenv("ENVD_E2E_RUNTIME_CLASS"), EgressResolvers: []string{env.dns.Addr},
		EgressUpstreamCAFile: env.upstreamCA.file,
		// Receivers of the webhook tests listen on loopback; retries
		// come soon so that a test waits seconds, not minutes, and are not
		// given up while a loaded machine takes long to stop an instance.
		Webhooks: envd.WebhookConfig{AllowLoopback: true, Poll: 100 * time.Millisecond, BackoffBase: 300 * time.Millisecond, BackoffCap: 2 * time.Second, MaxAttempts: 300}}
}

// sharedNodeCapacity is what the shared node offers placement: more than
// the parallel tests' instances add up to, so that it always keeps what it
// is asked for (placement local) and never places a test's instance on
// another test's node.
var sharedNodeCapacity = types.NodeCapacity{CPUs: 1024, MemoryBytes: 1 << 50, DiskBytes: 1 << 50}

// testLease is the lease of the shared node and of the nodes the tests
// join to it (startJoiningNode) unless a test sets one: at the default
// 15 s a node stalled by a loaded machine was marked lost by another
// and its instances failed. A minute: no test here waits
// for one of these nodes to be found lost.
const testLease = time.Minute

// sharedNodeLimits are the admin tenant's limits on the shared node: the
// parallel tests all act as the admin, so its concurrent saves (default 4)
// and builds (2) would refuse one test's work for another's. The other
// limits are the defaults (tests of them use tenants of their own).
var sharedNodeLimits = envd.TenantLimits{Saves: 32, Builds: 16}

// prefetchWindow is how long new instances' first reads are recorded here
// (a minute in production): long enough that a test's first commands run
// within it on a loaded machine with other tests running.
const prefetchWindow = 10 * time.Second

// fixtureBase is the base image of the tests: busybox plus a /fixtures
// tree that the tests modify and delete from.
const fixtureBase = "fixture"

func importFixtureImage(ctx context.Context, dir string) error {
	script, _ := filepath.Abs("../scripts/busybox-rootfs.sh")
	if out, err := exec.Command("bash", script, dir).CombinedOutput(); err != nil {
		return fmt.Errorf("%v: %s", err, out)
	}
	files := map[string]string{
		"fixtures/modify-me":          "base content\n",
		"fixtures/delete-me":          "base file to delete\n",
		"fixtures/deldir/a":           "a\n",
		"fixtures/deldir/sub/b":       "b\n",
		"fixtures/file-to-dir":        "was a file\n",
		"fixtures/dir-to-file/inner":  "was in a dir\n",
		"fixtures/opaque/old-1":       "old\n",
		"fixtures/opaque/sub/old-2":   "old\n",
		"fixtures/keep/untouched":     "stays\n",
		"fixtures/chmod-me":           "mode\n",
		"fixtures/link-target":        "target\n",
		"fixtures/replace-by-symlink": "file\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	tarball, err := tarDir(dir)
	if err != nil {
		return err
	}
	env.fixtureTar = tarball
	_, err = env.c.ImportImage(ctx, fixtureBase, bytes.NewReader(tarball))
	return err
}

func tarDir(dir string) ([]byte, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command("tar", "--numeric-owner", "--xattrs", "-C", dir, "-cf", "-", ".")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("tar %s: %v: %s", dir, err, errb.String())
	}
	return out.Bytes(), nil
}

var _ = io.Discard
