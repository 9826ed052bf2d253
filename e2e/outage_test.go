package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
)

// When the registry or the database is down, requests fail with a clear
// "unavailable" and nothing that existed is touched: the current version
// stays, the instance keeps running, and work succeeds once they are back.
func TestRootDependenciesDown(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	n, reg, dir := startCuttableNode(t, "outage", node.Config{PrefetchWindow: -1, WrapAPI: env.spec.Wrap})
	cl, err := client.New(n.URL, n.Token)
	require.NoError(t, err)
	_, err = cl.ImportImage(c, "fixture", bytes.NewReader(env.fixtureTar))
	require.NoError(t, err)
	_, err = cl.CreateProject(c, types.CreateProjectRequest{Name: "outage", Base: "fixture"})
	require.NoError(t, err)
	in, err := cl.CreateInstance(c, "outage", types.CreateInstanceRequest{})
	require.NoError(t, err)
	_, err = cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "echo unsaved > /work"}})
	require.NoError(t, err)

	// Registry down: the save fails as unavailable, current stays 1.
	reg.stop()
	op, err := cl.Save(c, in.ID, types.SaveRequest{Message: "registry down"}, "")
	require.NoError(t, err)
	done, err := cl.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, types.OpFailed, done.State)
	require.NotNil(t, done.Error)
	assert.Equal(t, "unavailable", done.Error.Code, done.Error.Message)
	proj, err := cl.GetProject(c, "outage")
	require.NoError(t, err)
	assert.Equal(t, 1, proj.Current)
	vs, err := cl.ListVersions(c, "outage")
	require.NoError(t, err)
	assert.Len(t, vs, 1, "no half version")
	res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/work"}})
	require.NoError(t, err)
	assert.Equal(t, "unsaved\n", res.Stdout, "the instance and its changes are untouched")

	// Back: the same save works.
	reg.start(0)
	op, err = cl.Save(c, in.ID, types.SaveRequest{Message: "registry back"}, "")
	require.NoError(t, err)
	done, err = cl.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	require.Equal(t, types.OpSucceeded, done.State, "%+v", done.Error)

	// Database down: requests answer 503 unavailable, quickly.
	ctls, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	require.NotEmpty(t, ctls, "Debian's postgresql is installed by scripts/setup.sh")
	pgctl := ctls[len(ctls)-1]
	out, err := exec.Command("runuser", "-u", "postgres", "--", pgctl, "-D", filepath.Join(dir, "data", "pg", "data"), "stop", "-m", "fast").CombinedOutput()
	require.NoError(t, err, string(out))
	start := time.Now()
	_, err = cl.GetProject(c, "outage")
	require.ErrorIs(t, err, errdefs.ErrUnavailable)
	var ce *types.Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, 503, ce.Status)
	assert.Less(t, time.Since(start), 15*time.Second)
	_, err = cl.Save(c, in.ID, types.SaveRequest{}, "")
	require.ErrorIs(t, err, errdefs.ErrUnavailable)
}

// startCuttableNode starts a node with its own PostgreSQL (the test can
// stop it: its data is under dir/data/pg) and the shared registry behind a
// proxy the test can cut; cfg's other fields are kept.
func startCuttableNode(t *testing.T, name string, cfg node.Config) (*node.Node, *proxy, string) {
	t.Helper()
	reg := startProxy(t, env.node.RegistryAddr(), 0) // the registry as this node sees it
	dir, err := os.MkdirTemp("", "envd-e2e-"+name+"-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755)) // the postgres user must reach its cluster dir
	cfg.DataDir, cfg.Registry = filepath.Join(dir, "data"), reg.addr
	cfg.RegistryCredentialFile, _ = env.node.RegistryCredentialFiles()
	n, err := node.Start(ctx(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n.Shutdown(sctx)
		_ = os.RemoveAll(dir)
	})
	return n, reg, dir
}
