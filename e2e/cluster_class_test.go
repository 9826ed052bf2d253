package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/versions"
)

// Two nodes of one cluster, one of which cannot run gVisor (its runsc
// fails the probe). Each records the classes it runs; an instance of a
// gvisor project asked of the runc-only node (placement local) goes to
// the other and runs on gVisor there, the placement saying why; a runc
// project's instance stays on the node asked.
func TestRootClusterPlacesByRuntimeClass(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	dsn := clusterDatabase(t)
	broken := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(broken, "runsc"), []byte("#!/bin/sh\necho 'no sandboxes on this node' >&2\nexit 1\n"), 0o755))
	gv, cg := startJoiningNode(t, "class-gvisor", &node.Config{DSN: dsn, Registry: "-", DefaultTTL: time.Hour, PrefetchWindow: -1, Placement: envd.PlacementLocal})
	cred, _ := gv.RegistryCredentialFiles()
	_, cr := startJoiningNode(t, "class-runc", &node.Config{DSN: dsn, Registry: gv.RegistryAddr(), RegistryCredentialFile: cred,
		DefaultTTL: time.Hour, PrefetchWindow: -1, Placement: envd.PlacementLocal, GVisorDir: broken})

	store, err := versions.Open(c, dsn)
	require.NoError(t, err)
	t.Cleanup(store.Close)
	classes := map[string][]string{}
	ms, err := store.Nodes.ListMembers(c)
	require.NoError(t, err)
	for _, m := range ms {
		classes[m.Name] = m.RuntimeClasses
	}
	assert.Equal(t, map[string][]string{"class-gvisor": {"runc", "gvisor"}, "class-runc": {"runc"}}, classes, "each node records the classes it runs")

	_, err = cg.ImportImage(c, "fixture-class", bytes.NewReader(env.fixtureTar))
	require.NoError(t, err)
	upOn := func(t *testing.T, project string) types.Instance {
		t.Helper()
		in, err := cr.CreateInstance(c, project, types.CreateInstanceRequest{})
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = cr.DeleteInstance(context.Background(), in.ID) })
		require.Equal(t, types.StateRunning, in.State)
		return in
	}

	_, err = cr.CreateProject(c, types.CreateProjectRequest{Name: "sandboxed", Base: "fixture-class", RuntimeClass: "gvisor"})
	require.NoError(t, err)
	in := upOn(t, "sandboxed")
	assert.Equal(t, "class-gvisor", in.Node, "the gvisor instance goes to the node that runs gVisor")
	assert.Contains(t, in.Placement, "class-runc (cannot run runtime class gvisor (runs runc))")
	res, err := cr.Exec(c, in.ID, types.ExecRequest{Args: []string{"uname", "-r"}})
	require.NoError(t, err)
	assert.Contains(t, res.Stdout, "gvisor", "asked of the runc node, forwarded to the instance's")

	_, err = cr.CreateProject(c, types.CreateProjectRequest{Name: "shared-kernel", Base: "fixture-class"})
	require.NoError(t, err)
	assert.Equal(t, "class-runc", upOn(t, "shared-kernel").Node, "a runc project stays on the node asked (placement local)")
}
