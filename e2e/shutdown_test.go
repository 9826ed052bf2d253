package e2e

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
)

// servingNode starts (or restarts) a node on dataDir that joins the shared
// node's PostgreSQL and registry and listens on every address, so it serves
// its API with its own self-signed certificate; it returns the node and a
// client that trusts that certificate.
func servingNode(t *testing.T, dataDir string) (*node.Node, *client.Client) {
	t.Helper()
	cred, _ := env.node.RegistryCredentialFiles()
	n, err := node.Start(ctx(t), node.Config{DataDir: dataDir, Node: "node-serving", DSN: env.node.DSN(),
		Registry: env.node.RegistryAddr(), RegistryCredentialFile: cred, Listen: "0.0.0.0:0",
		DefaultTTL: time.Hour, PrefetchWindow: -1, ShutdownGrace: 2 * time.Minute,
		Placement: envd.PlacementLocal, // its instances and their saves are its own, for the drain to wait for
		// It joins the shared node's cluster: at the default 15 s lease, its
		// restart at load average 40 outlasted the lease, another node
		// marked it lost and its instance failed.
		Lease: testLease})
	require.NoError(t, err)
	ca, err := os.ReadFile(n.SelfSignedCert())
	require.NoError(t, err)
	c, err := client.New(n.URL, n.Token, client.WithCACert(ca))
	require.NoError(t, err)
	return n, c
}

// A node listening beyond loopback serves TLS with a self-signed
// certificate it keeps across restarts. A graceful stop refuses new
// requests, lets an exec and a save in flight finish, and a save still
// running when the grace ends is run again by the next start.
func TestRootServeTLSAndDrain(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "envd-e2e-serving-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	dataDir := filepath.Join(dir, "data")
	n, c := servingNode(t, dataDir)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n.Shutdown(sctx)
		_ = os.RemoveAll(dir)
	})

	// TLS: the URL, the fingerprint of the certificate on disk, trust.
	require.True(t, strings.HasPrefix(n.URL, "https://127.0.0.1:"), n.URL)
	certPEM, err := os.ReadFile(filepath.Join(dataDir, node.TLSDir, "cert.pem"))
	require.NoError(t, err)
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block)
	fingerprint := node.Fingerprint(block.Bytes)
	assert.Equal(t, fingerprint, n.TLSFingerprint())
	url, err := os.ReadFile(filepath.Join(dataDir, "envd.url"))
	require.NoError(t, err)
	assert.Equal(t, n.URL, strings.TrimSpace(string(url)))
	untrusting, err := client.New(n.URL, n.Token)
	require.NoError(t, err)
	var unknown x509.UnknownAuthorityError
	err = untrusting.Healthz(ctx(t))
	assert.True(t, errors.As(err, &unknown), "want a certificate error, got %v", err)
	require.NoError(t, c.Healthz(ctx(t)))

	p := fmt.Sprintf("serving-%d", projectSeq.Add(1))
	_, err = c.CreateProject(ctx(t), types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	in, err := c.CreateInstance(ctx(t), p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	// Removed before the node's shutdown (cleanups run last first): a
	// node's shutdown leaves its instances running. c is the client of the
	// node running at the end.
	t.Cleanup(func() { _, _ = c.DeleteInstance(context.Background(), in.ID) })
	_, err = c.Exec(ctx(t), in.ID, types.ExecRequest{Args: []string{"sh", "-c", "dd if=/dev/urandom of=/blob bs=1M count=60 2>/dev/null && echo one > /marker"}})
	require.NoError(t, err)

	// Drain: an exec and a save in flight finish, a new request is refused.
	execDone := make(chan types.ExecResult, 1)
	go func() {
		res, err := c.Exec(context.Background(), in.ID, types.ExecRequest{Args: []string{"sh", "-c", "touch /tmp/exec-started; sleep 3; echo finished"}})
		assert.NoError(t, err)
		execDone <- res
	}()
	saveOp, err := c.Save(ctx(t), in.ID, types.SaveRequest{Message: "during drain"}, "")
	require.NoError(t, err)
	require.Eventually(t, func() bool { // the exec is under way
		res, err := c.Exec(ctx(t), in.ID, types.ExecRequest{Args: []string{"test", "-e", "/tmp/exec-started"}})
		return err == nil && res.ExitCode == 0
	}, time.Minute, 50*time.Millisecond, "the exec did not start")
	drained := make(chan error, 1)
	go func() { drained <- n.Drain(context.Background()) }()
	fresh, err := client.New(n.URL, n.Token, client.WithCACert(certPEM))
	require.NoError(t, err)
	assert.Eventually(t, func() bool { return fresh.Healthz(ctx(t)) != nil }, 10*time.Second, 20*time.Millisecond,
		"a draining node takes no new request")
	select {
	case res := <-execDone:
		assert.Equal(t, "finished\n", res.Stdout, "the exec in flight finished")
	case <-time.After(time.Minute):
		t.Fatal("the exec in flight did not finish")
	}
	require.NoError(t, <-drained)
	got, err := env.c.GetOperation(ctx(t), saveOp.ID)
	require.NoError(t, err)
	assert.Equalf(t, types.OpSucceeded, got.State, "the save finished within the grace: %+v", got.Error)
	n.Close(ctx(t))

	// Restart: the same certificate; then a save cut by an expired grace.
	n, c = servingNode(t, dataDir)
	assert.Equal(t, fingerprint, n.TLSFingerprint(), "the certificate is kept across restarts")
	assert.Equal(t, "one", strings.TrimSpace(mustExec(t, c, in.ID, "cat /marker")))
	mustExec(t, c, in.ID, "dd if=/dev/urandom of=/blob2 bs=1M count=150 2>/dev/null && echo two > /marker")
	cut, err := c.Save(ctx(t), in.ID, types.SaveRequest{Message: "past the grace"}, "")
	require.NoError(t, err)
	short, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	drainErr := n.Drain(short)
	cancel()
	n.Close(ctx(t))
	n, c = servingNode(t, dataDir)

	done, err := c.WaitOperation(ctx(t), cut.ID, nil)
	require.NoError(t, err)
	require.Equalf(t, types.OpSucceeded, done.State, "the save finished after the restart: %+v", done.Error)
	if drainErr != nil && strings.Contains(drainErr.Error(), cut.ID) {
		evs, err := c.OperationEvents(ctx(t), cut.ID, 0)
		require.NoError(t, err)
		require.NotEmpty(t, evs)
		assert.Equal(t, "resumed", evs[0].Type, "the save Drain named as unfinished ran again at the start")
	}
	vs, err := c.ListVersions(ctx(t), p)
	require.NoError(t, err)
	assert.Len(t, vs, 3, "the base and one version per save")
	b, err := c.CreateInstance(ctx(t), p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = c.DeleteInstance(context.Background(), b.ID) })
	assert.Equal(t, "two", strings.TrimSpace(mustExec(t, c, b.ID, "cat /marker")))
}

// mustExec runs script in instance id through c and returns its output.
func mustExec(t *testing.T, c *client.Client, id, script string) string {
	t.Helper()
	res, err := c.Exec(ctx(t), id, types.ExecRequest{Args: []string{"sh", "-c", script}})
	require.NoError(t, err)
	require.Equalf(t, 0, res.ExitCode, "script %q: %s", script, res.Stderr)
	return res.Stdout
}
