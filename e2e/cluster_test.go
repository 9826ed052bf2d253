package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/internal/s3test"
)

// The cluster tests' lease and sweep interval: a lost node's instances
// fail within clusterLease + clusterSweep of its last renewal.
const (
	clusterLease = 6 * time.Second
	clusterSweep = 2 * time.Second
)

// startClusterNode is startJoiningNode with a label zone=ZONE, the
// cluster tests' lease, and S3 for volume archives.
func startClusterNode(t *testing.T, name, zone string, s3 objstore.S3Config) (*node.Node, *client.Client) {
	t.Helper()
	return startJoiningNode(t, name, &node.Config{DefaultTTL: time.Hour, PrefetchWindow: -1, S3: &s3, Placement: envd.PlacementSpread,
		Lease: clusterLease, SweepInterval: clusterSweep, Labels: map[string]string{"zone": zone}})
}

// processNode is `envd serve` joining the shared node's database and
// registry as a process of its own, so that a test can kill -9 it and its
// containerd.
type processNode struct {
	bin, dataDir, name string
	args               []string
	env                []string
	p                  *envdProcess
	c                  *client.Client
}

func startProcessNode(t *testing.T, name, zone string, s3 objstore.S3Config) *processNode {
	t.Helper()
	dir, err := os.MkdirTemp("", "envd-e2e-"+name+"-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	cred, _ := env.node.RegistryCredentialFiles()
	pn := &processNode{bin: buildEnvd(t), dataDir: filepath.Join(dir, "data"), name: name}
	require.NoError(t, os.MkdirAll(pn.dataDir, 0o755))
	pn.args = []string{"serve", "--data-dir", pn.dataDir, "--node", name, "--database", env.node.DSN(),
		"--registry", env.node.RegistryAddr(), "--registry-credential-file", cred, "--ssh-listen", "",
		"--s3-endpoint", s3.Endpoint, "--s3-bucket", s3.Bucket, "--label", "zone=" + zone,
		"--lease", clusterLease.String(), "--sweep-interval", clusterSweep.String()}
	pn.env = []string{"ENVD_S3_ACCESS_KEY=" + s3.AccessKey, "ENVD_S3_SECRET_KEY=" + s3.SecretKey}
	pn.start(t)
	t.Cleanup(func() {
		if pn.p != nil {
			pn.p.kill(t)
		}
		out, err := exec.Command(pn.bin, "down", "--data-dir", pn.dataDir).CombinedOutput()
		assert.NoError(t, err, "envd down: %s", out)
		_ = os.RemoveAll(dir)
	})
	return pn
}

func (pn *processNode) start(t *testing.T) {
	t.Helper()
	_ = os.Remove(filepath.Join(pn.dataDir, "envd.url"))
	log, err := os.OpenFile(filepath.Join(pn.dataDir, "envd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer log.Close()
	cmd := exec.Command(pn.bin, pn.args...)
	cmd.Env = append(os.Environ(), pn.env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	require.NoError(t, cmd.Start())
	p := &envdProcess{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	var url []byte
	require.Eventually(t, func() bool {
		url, err = os.ReadFile(filepath.Join(pn.dataDir, "envd.url"))
		return err == nil && len(url) > 0
	}, 120*time.Second, 100*time.Millisecond, "envd serve did not start; see %s/envd.log", pn.dataDir)
	token, err := os.ReadFile(filepath.Join(pn.dataDir, "admin.token"))
	require.NoError(t, err)
	pn.c, err = client.New(strings.TrimSpace(string(url)), strings.TrimSpace(string(token)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return pn.c.Healthz(context.Background()) == nil }, 30*time.Second, 100*time.Millisecond)
	pn.p = p
}

// killHard kills the node's process and its containerd with SIGKILL, as a
// machine that dies would leave them.
func (pn *processNode) killHard(t *testing.T) {
	t.Helper()
	pids, _ := filepath.Glob(filepath.Join(pn.dataDir, "*", "containerd.pid"))
	more, _ := filepath.Glob(filepath.Join(pn.dataDir, "containerd.pid"))
	pids = append(pids, more...)
	require.NotEmpty(t, pids, "containerd's pid file under %s", pn.dataDir)
	pn.p.kill(t)
	pn.p = nil
	for _, f := range pids {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err)
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	}
}

// cordonSharedNode keeps the tests' shared node out of placement for the
// test: it is a member of the cluster too.
func cordonSharedNode(t *testing.T) {
	t.Helper()
	_, err := env.c.CordonNode(ctx(t), env.node.Name())
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.UncordonNode(context.Background(), env.node.Name()) })
}

func nodeOf(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	in, err := c.GetInstance(ctx(t), id)
	require.NoError(t, err)
	return in.Node
}

// Three nodes (two in this process, one `envd serve` process with its own
// containerd), one PostgreSQL, one registry, S3 for volumes. A client that
// talks to node A only: placement spreads a tenant's instances over the
// three, honours node_selector and cordon, prefers the node that has the
// version's image, keeps a project with volumes on their node (or refuses
// with volume_elsewhere); drain hibernates a node's instances (volumes
// handed off through S3) and they come back elsewhere with their files;
// kill -9 of node C and its containerd fails its instances node_lost
// within the lease and sweep interval, `up` restores the project
// elsewhere, and C, restarted, finds itself fenced and removes its
// containers.
func TestRootClusterPlacementDrainAndNodeLoss(t *testing.T) {
	c := ctx(t)
	s3 := s3test.Start(t)
	cordonSharedNode(t)
	a, ca := startClusterNode(t, "cl-a", "a", s3)
	b, cb := startClusterNode(t, "cl-b", "b", s3)
	pc := startProcessNode(t, "cl-c", "c", s3)
	names := []string{a.Name(), b.Name(), pc.name}

	// Membership, seen from any node.
	// A node serves its API a moment before it joins: wait for the three.
	var err error
	seen := map[string]types.Node{}
	require.Eventually(t, func() bool {
		ns, err := cb.ListNodes(c)
		if err != nil {
			return false
		}
		clear(seen)
		for _, n := range ns {
			seen[n.Name] = n
		}
		_, okA := seen[a.Name()]
		_, okB := seen[b.Name()]
		_, okC := seen[pc.name]
		return okA && okB && okC
	}, 30*time.Second, 200*time.Millisecond, "the three nodes are members")
	for i, name := range names {
		n, ok := seen[name]
		require.Truef(t, ok, "node %s listed", name)
		assert.Equal(t, types.NodeReady, n.State)
		assert.Equal(t, map[string]string{"zone": string("abc"[i])}, n.Labels)
		assert.Positive(t, n.Capacity.CPUs)
		assert.Positive(t, n.Capacity.MemoryBytes)
		assert.Equal(t, clusterLease.Seconds(), n.LeaseSeconds)
		assert.True(t, n.LeaseExpiresAt.After(time.Now().Add(-time.Second)), "a live lease")
	}
	assert.Equal(t, types.NodeCordoned, seen[env.node.Name()].State)

	var made []string
	create := func(cl *client.Client, p string, req types.CreateInstanceRequest) types.Instance {
		t.Helper()
		in, err := cl.CreateInstance(c, p, req)
		require.NoError(t, err)
		require.Equal(t, types.StateRunning, in.State)
		made = append(made, in.ID)
		return in
	}
	removeAll := func() {
		for _, id := range made {
			_, _ = ca.DeleteInstance(context.Background(), id)
		}
		made = nil
	}
	t.Cleanup(removeAll)

	// Spread: three instances asked on A land on three nodes.
	p1 := newProject(t, "cluster-spread")
	spread := map[string]bool{}
	for range 3 {
		in := create(ca, p1, types.CreateInstanceRequest{})
		spread[in.Node] = true
		assert.Contains(t, in.Placement, "placed on "+in.Node)
		got, err := ca.GetInstance(c, in.ID)
		require.NoError(t, err)
		assert.Equal(t, in.Placement, got.Placement, "the decision is kept on the instance")
	}
	assert.Len(t, spread, 3, "a tenant's instances spread: %v", spread)

	// node_selector, asked on A.
	sel := create(ca, p1, types.CreateInstanceRequest{NodeSelector: map[string]string{"zone": "c"}})
	assert.Equal(t, pc.name, sel.Node)
	assert.Contains(t, sel.Placement, "node_selector zone=c")
	_, err = ca.CreateInstance(c, p1, types.CreateInstanceRequest{NodeSelector: map[string]string{"zone": "nowhere"}})
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted)

	// Cordon: B takes nothing, even asked on B.
	_, err = ca.CordonNode(c, b.Name())
	require.NoError(t, err)
	for range 2 {
		in := create(cb, p1, types.CreateInstanceRequest{})
		assert.NotEqual(t, b.Name(), in.Node, "cordoned")
	}
	_, err = cb.CreateInstance(c, p1, types.CreateInstanceRequest{NodeSelector: map[string]string{"zone": "b"}})
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted, "the only node with the label is cordoned")
	un, err := ca.UncordonNode(c, b.Name())
	require.NoError(t, err)
	assert.Equal(t, types.NodeReady, un.State)
	removeAll()

	// Cache affinity: B pulled version 2 of p2 (a save, an image of its
	// own); the next instance, asked on A, goes to B.
	p2 := newProject(t, "cluster-affinity")
	saver := create(ca, p2, types.CreateInstanceRequest{NodeSelector: map[string]string{"zone": "a"}})
	mustShOn(t, ca, saver.ID, "echo two > /root/two")
	op, err := ca.Save(c, saver.ID, types.SaveRequest{Message: "two"}, "")
	require.NoError(t, err)
	op, err = ca.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	require.Equal(t, types.OpSucceeded, op.State)
	removeAll()
	first := create(ca, p2, types.CreateInstanceRequest{NodeSelector: map[string]string{"zone": "b"}})
	require.Equal(t, b.Name(), first.Node)
	removeAll()
	second := create(ca, p2, types.CreateInstanceRequest{})
	assert.Equal(t, b.Name(), second.Node, second.Placement)
	assert.Contains(t, second.Placement, "cache affinity")
	removeAll()

	// Volumes: a project's instances go where its volume data is; a start
	// elsewhere is refused, never given an empty volume.
	p3 := fmt.Sprintf("cluster-vol-%d", projectSeq.Add(1))
	_, err = ca.CreateProject(c, types.CreateProjectRequest{Name: p3, Base: fixtureBase, Volumes: []string{"work:/workspace"}})
	require.NoError(t, err)
	r := create(ca, p3, types.CreateInstanceRequest{Retain: true, NodeSelector: map[string]string{"zone": "b"}})
	require.Equal(t, b.Name(), r.Node)
	mustShOn(t, ca, r.ID, "echo vol > /workspace/v && echo layer > /root/l")
	other := create(ca, p3, types.CreateInstanceRequest{})
	assert.Equal(t, b.Name(), other.Node, "placed with its volumes: %s", other.Placement)
	assert.Contains(t, other.Placement, "volume data")
	_, err = ca.CreateInstance(c, p3, types.CreateInstanceRequest{NodeSelector: map[string]string{"zone": "a"}})
	require.ErrorIs(t, err, errdefs.ErrVolumeElsewhere)
	// r hibernated while other still uses the volume on B: no handoff,
	// so a wake on A is refused and r stays as it was.
	_, err = ca.StopInstance(c, r.ID)
	require.NoError(t, err)
	_, err = ca.HibernateInstance(c, r.ID)
	require.NoError(t, err)
	_, err = ca.StartInstance(c, r.ID)
	require.ErrorIs(t, err, errdefs.ErrVolumeElsewhere, "never an empty volume in silence")
	kept, err := ca.GetInstance(c, r.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateStopped, kept.State)
	assert.Equal(t, b.Name(), kept.Node)
	_, err = ca.DeleteInstance(c, other.ID)
	require.NoError(t, err)

	// Drain B (a retained instance running there, r hibernated there):
	// the instance is hibernated, the volumes handed off through S3; B
	// ends drained; both wake on A with their layer and volume.
	d := create(ca, p3, types.CreateInstanceRequest{Retain: true})
	require.Equal(t, b.Name(), d.Node, d.Placement)
	mustShOn(t, ca, d.ID, "echo d > /root/d && cat /workspace/v")
	dn, err := ca.DrainNode(c, b.Name())
	require.NoError(t, err)
	assert.Equal(t, types.NodeDraining, dn.State)
	require.Eventually(t, func() bool {
		n, err := ca.GetNode(c, b.Name())
		return err == nil && n.State == types.NodeDrained
	}, 2*time.Minute, 500*time.Millisecond, "node B drains")
	hib, err := ca.GetInstance(c, r.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateStopped, hib.State)
	assert.Positive(t, hib.HibernatedVersion, "hibernated by the drain")
	hd, err := ca.GetInstance(c, d.ID)
	require.NoError(t, err)
	assert.Positive(t, hd.HibernatedVersion, "the running retained instance too")
	woke, err := ca.StartInstance(c, r.ID)
	require.NoError(t, err)
	assert.NotEqual(t, b.Name(), woke.Node)
	res, err := ca.Exec(c, r.ID, types.ExecRequest{Args: []string{"cat", "/root/l", "/workspace/v"}})
	require.NoError(t, err)
	assert.Equal(t, "layer\nvol\n", res.Stdout, "nothing lost across the drain")
	_, err = ca.StopInstance(c, r.ID)
	require.NoError(t, err)
	woke, err = ca.StartInstance(c, d.ID)
	require.NoError(t, err)
	assert.Equal(t, a.Name(), woke.Node, "a wake runs on the node asked, where the volume went")
	res, err = ca.Exec(c, d.ID, types.ExecRequest{Args: []string{"cat", "/root/d", "/workspace/v"}})
	require.NoError(t, err)
	assert.Equal(t, "d\nvol\n", res.Stdout)
	un, err = ca.UncordonNode(c, b.Name())
	require.NoError(t, err)
	assert.Equal(t, types.NodeReady, un.State)
	removeAll()

	// Node loss: C runs two instances, checkpointed every 10s; kill -9
	// it and its containerd.
	p4 := newProject(t, "cluster-loss")
	cs, err := ca.SetProjectCheckpoint(c, p4, types.CheckpointSetting{Every: "10s"})
	require.NoError(t, err)
	assert.Equal(t, "10s", cs.Every)
	var onC []string
	for range 2 {
		in := create(ca, p4, types.CreateInstanceRequest{Retain: true, NodeSelector: map[string]string{"zone": "c"}})
		onC = append(onC, in.ID)
	}
	mustShOn(t, ca, onC[0], "echo checkpointed > /root/u")
	checkpoint := 0
	require.Eventually(t, func() bool {
		vs, err := ca.ListVersions(c, p4)
		if err != nil {
			return false
		}
		for _, v := range vs {
			if strings.Contains(v.Message, "checkpoint of instance "+onC[0]) {
				checkpoint = v.Number
			}
		}
		return checkpoint > 0
	}, time.Minute, 500*time.Millisecond, "a checkpoint of the retained instance")
	pc.killHard(t)
	killed := time.Now()
	bound := clusterLease + clusterSweep
	require.Eventually(t, func() bool {
		for _, id := range onC {
			in, err := ca.GetInstance(c, id)
			if err != nil || in.State != types.StateFailed {
				return false
			}
		}
		return true
	}, bound+10*time.Second, 200*time.Millisecond, "instances of a killed node fail within lease + sweep (%s)", bound)
	t.Logf("instances of the killed node Failed after %s (lease %s + sweep %s)", time.Since(killed).Round(100*time.Millisecond), clusterLease, clusterSweep)
	lost, err := ca.GetInstance(c, onC[0])
	require.NoError(t, err)
	assert.Equal(t, types.ReasonNodeLost, lost.Reason)
	assert.Contains(t, lost.Message, "retained writable layer", "show says what was lost")
	assert.Contains(t, lost.Message, fmt.Sprintf("--version %d", checkpoint), "and where to start again")
	fromCheckpoint := create(ca, p4, types.CreateInstanceRequest{Version: checkpoint})
	res, err = ca.Exec(c, fromCheckpoint.ID, types.ExecRequest{Args: []string{"cat", "/root/u"}})
	require.NoError(t, err)
	assert.Equal(t, "checkpointed\n", res.Stdout, "the checkpoint kept the retained layer's work")
	cn, err := ca.GetNode(c, pc.name)
	require.NoError(t, err)
	assert.Equal(t, types.NodeLost, cn.State)
	back := create(ca, p4, types.CreateInstanceRequest{})
	assert.NotEqual(t, pc.name, back.Node, "up restores the project on a live node")
	mustShOn(t, ca, back.ID, "test -d /fixtures")

	// C comes back: fenced, it removes its containers rather than
	// resurrecting them, and joins ready.
	pc.start(t)
	require.Eventually(t, func() bool {
		n, err := ca.GetNode(c, pc.name)
		return err == nil && n.State == types.NodeReady
	}, time.Minute, 500*time.Millisecond)
	for _, id := range onC {
		in, err := ca.GetInstance(c, id)
		require.NoError(t, err)
		assert.Equal(t, types.StateFailed, in.State, "not resurrected")
	}
	sock, _ := filepath.Glob(filepath.Join(pc.dataDir, "*", "containerd.sock"))
	require.NotEmpty(t, sock)
	require.Eventually(t, func() bool {
		out, err := exec.Command("ctr", "--address", sock[0], "-n", node.DefaultNamespace, "containers", "ls", "-q").CombinedOutput()
		if err != nil {
			return false
		}
		for _, id := range onC {
			if strings.Contains(string(out), id) {
				return false
			}
		}
		return true
	}, time.Minute, time.Second, "the returning node removed the lost instances' containers")
}
