package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/internal/s3test"
)

// restartable is a node of the test that can be stopped and started again
// on its data dir (an upgrade in place).
type restartable struct {
	cfg node.Config
	n   *node.Node
	c   *client.Client
}

func (r *restartable) start(t *testing.T) {
	t.Helper()
	n, err := node.Start(ctx(t), r.cfg)
	require.NoError(t, err)
	r.n = n
	r.c, err = client.New(n.URL, n.Token)
	require.NoError(t, err)
}

// rollingLease is the rolling restart's lease: no node is lost there, and
// a node down for its restart must not be marked lost before it is back
// (it would join again ready, not drained).
const rollingLease = time.Minute

// A rolling restart of a three-node cluster (registry on S3) loses
// nothing: node by node,
// drain (its instances hibernate, their volumes go to S3), restart on the
// same data dir, uncordon; every instance answers with its files and
// volume after each step, asked on a node that stays up.
func TestRootClusterRollingRestart(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	dsn := clusterDatabase(t)
	s3 := s3test.Start(t)
	reg := startClusterRegistry(t, s3)
	var nodes []*restartable
	for _, name := range []string{"roll-a", "roll-b", "roll-c"} {
		dir, err := os.MkdirTemp("", "envd-e2e-"+name+"-")
		require.NoError(t, err)
		require.NoError(t, os.Chmod(dir, 0o755))
		cfg := node.Config{DataDir: filepath.Join(dir, "data"), Node: name, DSN: dsn, Registry: reg.addr,
			RegistryCredentialFile: reg.nodeCred, WrapAPI: env.spec.Wrap, DefaultTTL: time.Hour, PrefetchWindow: -1, S3: &s3,
			Placement: envd.PlacementSpread, Lease: rollingLease, SweepInterval: clusterSweep}
		r := &restartable{cfg: cfg}
		r.start(t)
		nodes = append(nodes, r)
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r.n.Shutdown(sctx)
			_ = os.RemoveAll(dir)
		})
	}

	reg.importBase(t, nodes[0].c)
	type made struct{ id, project, file string }
	var all []made
	for i := range 3 {
		p := reg.project(t, nodes[0].c, "rolling", "work:/workspace")
		in, err := nodes[0].c.CreateInstance(c, p, types.CreateInstanceRequest{Retain: true})
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = nodes[0].c.DeleteInstance(context.Background(), in.ID) })
		f := fmt.Sprintf("file-%d", i)
		mustShOn(t, nodes[0].c, in.ID, fmt.Sprintf("echo %s > /root/f && echo %s > /workspace/v", f, f))
		all = append(all, made{in.ID, p, f})
	}
	check := func(asker *client.Client, step string) {
		t.Helper()
		for _, m := range all {
			res, err := asker.Exec(c, m.id, types.ExecRequest{Args: []string{"cat", "/root/f", "/workspace/v"}, Wake: true})
			require.NoError(t, err, step)
			assert.Equal(t, m.file+"\n"+m.file+"\n", res.Stdout, "%s: instance %s", step, m.id)
		}
	}
	check(nodes[0].c, "before")
	for i, r := range nodes {
		asker := nodes[(i+1)%3].c
		_, err := asker.DrainNode(c, r.cfg.Node)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			n, err := asker.GetNode(c, r.cfg.Node)
			return err == nil && n.State == types.NodeDrained
		}, 2*time.Minute, 500*time.Millisecond, "%s drains", r.cfg.Node)
		r.n.Close(c)
		r.start(t)
		n, err := asker.GetNode(c, r.cfg.Node)
		require.NoError(t, err)
		assert.Equal(t, types.NodeDrained, n.State, "a restart keeps the drain")
		_, err = asker.UncordonNode(c, r.cfg.Node)
		require.NoError(t, err)
		check(asker, "after restarting "+r.cfg.Node)
	}
}
