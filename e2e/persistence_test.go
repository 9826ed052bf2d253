package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/s3test"
	"github.com/envd-dev/envd/versions"
)

// Volumes outlive instances, are mounted with their owner and PATH
// additions, are never part of a snapshot, and are limited in size.
func TestRootVolumesSurviveInstances(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := fmt.Sprintf("vols-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase,
		Volumes: []string{"work:/workspace", "tools:/opt/tools:1000:1000:32M"}})
	require.NoError(t, err)
	_, err = env.c.AddVolume(c, p, types.AddVolumeRequest{Spec: "bin:/opt/bin", PathAdd: []string{"/opt/bin"}})
	require.NoError(t, err)

	a := up(t, p, 0)
	mustSh(t, a.ID, `echo precious > /workspace/file && printf '#!/bin/sh\necho hello from the volume\n' > /opt/bin/hello && chmod +x /opt/bin/hello`)
	assert.Equal(t, "1000:1000", mustSh(t, a.ID, "stat -c %u:%g /opt/tools"))
	assert.Contains(t, a.Protection.Volumes, "/workspace")
	assert.Contains(t, a.Protection.LostOnRemove, "volumes are kept")

	// Past its size a write fails inside the instance with ENOSPC.
	full := sh(t, a.ID, "dd if=/dev/zero of=/opt/tools/fill bs=1M count=40")
	assert.NotEqual(t, 0, full.ExitCode)
	assert.Contains(t, full.Stderr, "No space left on device")
	mustSh(t, a.ID, "rm /opt/tools/fill")

	// A save never takes volume content.
	_, res := save(t, a.ID, "with volumes mounted")
	require.True(t, res.Current)
	_, err = env.c.DeleteInstance(c, a.ID)
	require.NoError(t, err)

	b := up(t, p, 0)
	assert.Equal(t, "precious", mustSh(t, b.ID, "cat /workspace/file"), "volume content survives rm + up")
	assert.Equal(t, "hello from the volume", mustSh(t, b.ID, "hello"), "the volume's directory is on PATH")
	vols, err := env.c.ListVolumes(c, p)
	require.NoError(t, err)
	require.Len(t, vols, 3)
	for _, v := range vols {
		assert.Positive(t, v.SizeBytes, v.Name)
		if v.Name == "work" {
			assert.Positive(t, v.UsedBytes, "usage is reported")
		}
	}

	// Removing a volume is refused while an instance may have it mounted.
	_, err = env.c.RemoveVolume(c, p, "work")
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	_, err = env.c.DeleteInstance(c, b.ID)
	require.NoError(t, err)
	_, err = env.c.RemoveVolume(c, p, "work")
	require.NoError(t, err)
	d := up(t, p, 0)
	mustSh(t, d.ID, "[ ! -e /workspace/file ]") // the saved version did not capture it
}

// Mount points that would hide the image are refused with a clear error.
func TestVolumeBadPathsRefused(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	for _, spec := range []string{"x:workspace", "x:/", "x:/usr/local", "x:/etc", "x:/var/lib/x", "x:/proc",
		"x:/run/x", "x:/boot", "x:/lib64", "x:/home/../etc", "Bad:/workspace", "x:/workspace:1:2:10Q"} {
		t.Run(spec, func(t *testing.T) {
			_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: "badvol", Base: fixtureBase, Volumes: []string{spec}})
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		})
	}
	_, err := env.c.GetProject(c, "badvol")
	require.ErrorIs(t, err, errdefs.ErrNotFound, "nothing was created")
}

// A retained instance keeps its whole rootfs across stop and start, without
// a save; a non-retained one refuses to stop.
func TestRootRetainedLayerSurvivesStopStart(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := newProject(t, "retain")
	plain := up(t, p, 0)
	_, err := env.c.StopInstance(c, plain.ID)
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "stopping a non-retained instance would lose its layer")

	in, err := env.c.CreateInstance(c, p, types.CreateInstanceRequest{Retain: true})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(context.Background(), in.ID) })
	assert.True(t, in.Protection.RetainedLayer)
	mustSh(t, in.ID, "echo notes > /root/notes && mkdir -p /usr/local/bin && ln -s /bin/busybox /usr/local/bin/sha1sum")
	_, err = env.c.StopInstance(c, in.ID)
	require.NoError(t, err)
	started, err := env.c.StartInstance(c, in.ID)
	require.NoError(t, err)
	assert.EqualValues(t, 2, started.Generation)
	assert.Equal(t, "notes", mustSh(t, in.ID, "cat /root/notes"))
	assert.Contains(t, mustSh(t, in.ID, "sha1sum /root/notes"), "/root/notes", "the installed applet link works after start")
}

// Requests carrying an older generation are refused; a task of an older
// generation is killed by the node that finds it.
func TestRootStaleGenerationFenced(t *testing.T) {
	c := ctx(t)
	p := newProject(t, "fence")
	in, err := env.c.CreateInstance(c, p, types.CreateInstanceRequest{Retain: true})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(context.Background(), in.ID) })
	_, err = env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"true"}, Generation: 1})
	require.NoError(t, err)
	_, err = env.c.StopInstance(c, in.ID)
	require.NoError(t, err)
	_, err = env.c.StartInstance(c, in.ID)
	require.NoError(t, err)

	_, err = env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"true"}, Generation: 1})
	require.ErrorIs(t, err, errdefs.ErrStaleGeneration)
	_, err = env.c.Save(c, in.ID, types.SaveRequest{Generation: 1}, "")
	require.ErrorIs(t, err, errdefs.ErrStaleGeneration)
	_, err = env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"true"}, Generation: 2})
	require.NoError(t, err)

	// Another holder takes a newer generation (as a node that took the
	// instance over would) while this node's task still runs with 2.
	store, err := versions.Open(c, env.node.DSN())
	require.NoError(t, err)
	defer store.Close()
	_, err = store.Instances.BumpGeneration(c, in.ID)
	require.NoError(t, err)
	require.NoError(t, env.node.Service.Reconcile(c))
	st, err := env.node.Runtime().Status(c, in.ID)
	require.NoError(t, err)
	assert.NotEqual(t, "running", st.Task, "the stale generation's task was killed")
}

// startJoiningNode starts a node that joins the test node's PostgreSQL and
// registry (unless cfg names another of either), with its own containerd
// and the given object store.
func startJoiningNode(t *testing.T, name string, s3 *node.Config) (*node.Node, *client.Client) {
	t.Helper()
	dir, err := os.MkdirTemp("", "envd-e2e-"+name+"-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	cfg := *s3
	cfg.DataDir, cfg.Node = filepath.Join(dir, "data"), name
	if cfg.DSN == "" {
		cfg.DSN = env.node.DSN()
	}
	cfg.WrapAPI = env.spec.Wrap
	if cfg.Placement == "" {
		cfg.Placement = envd.PlacementLocal // the tests ask the node they mean
	}
	if cfg.Lease == 0 {
		cfg.Lease = testLease
	}
	switch cfg.Registry {
	case "":
		cfg.Registry = env.node.RegistryAddr()
		cfg.RegistryCredentialFile, _ = env.node.RegistryCredentialFiles()
	case "-": // its own embedded registry
		cfg.Registry = ""
	}
	n, err := node.Start(ctx(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n.Shutdown(sctx)
		_ = os.RemoveAll(dir)
	})
	c, err := client.New(n.URL, n.Token)
	require.NoError(t, err)
	return n, c
}

// Two nodes (two data dirs, two containerds) share one PostgreSQL and
// registry: volumes move through S3, hibernated instances wake on the other
// node, and a node whose instance moved away removes its stale copy.
func TestRootTwoNodesShareDatabase(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	s3 := s3test.Start(t)
	base := &node.Config{S3: &s3, DefaultTTL: time.Hour}
	a, ca := startJoiningNode(t, "node-a", base)
	b, cb := startJoiningNode(t, "node-b", base)

	p := fmt.Sprintf("twonodes-%d", projectSeq.Add(1))
	_, err := ca.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase, Volumes: []string{"work:/workspace"}})
	require.NoError(t, err)

	// A volume archived on node A restores on node B.
	x, err := ca.CreateInstance(c, p, types.CreateInstanceRequest{Retain: true})
	require.NoError(t, err)
	_, err = ca.Exec(c, x.ID, types.ExecRequest{Args: []string{"sh", "-c", "echo from-a > /workspace/data && echo layer-a > /root/layer"}})
	require.NoError(t, err)
	arch, err := ca.ArchiveVolume(c, p, "work", types.VolumeArchiveRequest{})
	require.NoError(t, err)
	assert.Positive(t, arch.Bytes)
	_, err = cb.RestoreVolume(c, p, "work", types.VolumeArchiveRequest{Key: arch.Key})
	require.NoError(t, err)
	y, err := cb.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	res, err := cb.Exec(c, y.ID, types.ExecRequest{Args: []string{"cat", "/workspace/data"}})
	require.NoError(t, err)
	assert.Equal(t, "from-a\n", res.Stdout)

	// Node B answers for node A's instance by forwarding to node A.
	res, err = cb.Exec(c, x.ID, types.ExecRequest{Args: []string{"cat", "/root/layer"}})
	require.NoError(t, err)
	assert.Equal(t, "layer-a\n", res.Stdout, "run on node A, asked on node B")

	// Hibernate on A, wake on B: the retained layer moves with it.
	_, err = ca.StopInstance(c, x.ID)
	require.NoError(t, err)
	hib, err := ca.HibernateInstance(c, x.ID)
	require.NoError(t, err)
	assert.Positive(t, hib.HibernatedVersion)
	assert.Equal(t, envd.ReasonHibernated, hib.Reason)
	st, err := a.Runtime().Status(c, x.ID)
	require.NoError(t, err)
	assert.False(t, st.Exists, "the local layer is freed")
	proj, err := ca.GetProject(c, p)
	require.NoError(t, err)
	assert.Equal(t, 1, proj.Current, "a hibernation version does not become current")

	woke, err := cb.StartInstance(c, x.ID)
	require.NoError(t, err)
	assert.Equal(t, "node-b", woke.Node)
	assert.Equal(t, types.StateRunning, woke.State)
	assert.Greater(t, woke.Generation, x.Generation)
	res, err = cb.Exec(c, x.ID, types.ExecRequest{Args: []string{"cat", "/root/layer"}})
	require.NoError(t, err)
	assert.Equal(t, "layer-a\n", res.Stdout, "the retained layer came back on the other node")

	// A stale copy: node A still has a container of an instance that the
	// database says node B owns now (a partition healed): A removes it.
	z, err := ca.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	store, err := versions.Open(c, env.node.DSN())
	require.NoError(t, err)
	defer store.Close()
	_, err = store.Instances.SetNode(c, z.ID, "node-b")
	require.NoError(t, err)
	_, err = store.Instances.BumpGeneration(c, z.ID)
	require.NoError(t, err)
	require.NoError(t, a.Service.Reconcile(c))
	st, err = a.Runtime().Status(c, z.ID)
	require.NoError(t, err)
	assert.False(t, st.Exists, "node A removed its stale copy")
	_ = b
}

// A retained instance stopped longer than HibernateAfter is hibernated by
// the node on its own, and start brings it back.
func TestRootIdleRetainedInstanceHibernates(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	s3 := s3test.Start(t)
	n, cl := startJoiningNode(t, "node-h", &node.Config{S3: &s3, HibernateAfter: time.Second, ReconcileInterval: time.Second})
	p := fmt.Sprintf("hibernate-%d", projectSeq.Add(1))
	_, err := cl.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	in, err := cl.CreateInstance(c, p, types.CreateInstanceRequest{Retain: true})
	require.NoError(t, err)
	_, err = cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "echo idle > /root/idle"}})
	require.NoError(t, err)
	_, err = cl.StopInstance(c, in.ID)
	require.NoError(t, err)
	var got types.Instance
	require.Eventually(t, func() bool {
		got, err = cl.GetInstance(c, in.ID)
		return err == nil && got.HibernatedVersion > 0
	}, 30*time.Second, 250*time.Millisecond, "hibernated on its own")
	assert.Equal(t, envd.ReasonHibernated, got.Reason, "the version and the reason are recorded together")
	// The layer is freed once the hibernation is recorded.
	require.Eventually(t, func() bool {
		st, err := n.Runtime().Status(c, in.ID)
		return err == nil && !st.Exists
	}, 30*time.Second, 100*time.Millisecond, "its layer was freed")
	_, err = cl.StartInstance(c, in.ID)
	require.NoError(t, err)
	res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/root/idle"}})
	require.NoError(t, err)
	assert.Equal(t, "idle\n", res.Stdout)
}
