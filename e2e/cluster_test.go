package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/internal/s3test"
)

// The cluster tests' lease and sweep interval: a lost node's instances
// fail within clusterLease + clusterSweep of its last renewal. The lease
// is the default: renewed every 5 s, it outlives a node process stalled
// for up to 10 s on a loaded machine.
const (
	clusterLease = envd.DefaultLease
	clusterSweep = 2 * time.Second
)

// clusterRegistry is the cluster tests' shared registry: `envd registry`
// with its content in S3 (versitygw), apart from every node as in a
// deployment, so that no node's loss or restart takes it away.
type clusterRegistry struct {
	bin                    string // envd, built once for the test
	addr, nodeCred, gcCred string
	base                   string // the fixture base image, imported into it
}

func startClusterRegistry(t *testing.T, s3 objstore.S3Config) *clusterRegistry {
	t.Helper()
	dir := t.TempDir()
	bin := buildEnvd(t)
	cmd := exec.Command(bin, "registry", "--listen", "127.0.0.1:0", "--data-dir", dir,
		"--s3-endpoint", s3.Endpoint, "--s3-bucket", "registry")
	cmd.Env = append(os.Environ(), "ENVD_REGISTRY_S3_ACCESS_KEY="+s3.AccessKey, "ENVD_REGISTRY_S3_SECRET_KEY="+s3.SecretKey)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	log, err := os.Create(filepath.Join(dir, "registry.log"))
	require.NoError(t, err)
	cmd.Stderr = log
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	up := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "envd registry is up: "); ok {
				up <- strings.Fields(rest)[0]
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
		log.Close()
	})
	reg := &clusterRegistry{bin: bin, nodeCred: filepath.Join(dir, "registry-node.credential"), gcCred: filepath.Join(dir, "registry-gc.credential")}
	select {
	case reg.addr = <-up:
	case <-exited:
		logTail(t, log.Name(), 20)
		t.Fatal("envd registry exited")
	case <-time.After(time.Minute):
		logTail(t, log.Name(), 20)
		t.Fatal("envd registry did not start")
	}
	return reg
}

// importBase imports the fixture base image into the cluster's registry
// through node c, under a name of its own (the image names are shared with
// the test node's registry through the database).
func (r *clusterRegistry) importBase(t *testing.T, c *client.Client) {
	t.Helper()
	r.base = fmt.Sprintf("fixture-s3-%d", projectSeq.Add(1))
	_, err := c.ImportImage(ctx(t), r.base, bytes.NewReader(env.fixtureTar))
	require.NoError(t, err)
}

// project creates a project on the cluster's base through c.
func (r *clusterRegistry) project(t *testing.T, c *client.Client, prefix string, volumes ...string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, projectSeq.Add(1))
	_, err := c.CreateProject(ctx(t), types.CreateProjectRequest{Name: name, Base: r.base, Volumes: volumes})
	require.NoError(t, err)
	return name
}

// startClusterNode is startJoiningNode on the cluster's database (dsn) and
// registry with a label zone=ZONE, the cluster tests' lease, S3 for volume archives, the
// tests' preview domain and an SSH endpoint; it runs GCs too.
func startClusterNode(t *testing.T, name, zone, dsn string, s3 objstore.S3Config, reg *clusterRegistry) (*node.Node, *client.Client) {
	t.Helper()
	return startJoiningNode(t, name, &node.Config{DSN: dsn, DefaultTTL: time.Hour, PrefetchWindow: -1, S3: &s3, Placement: envd.PlacementSpread,
		Lease: clusterLease, SweepInterval: clusterSweep, Labels: map[string]string{"zone": zone},
		Registry: reg.addr, RegistryCredentialFile: reg.nodeCred, RegistryGCCredentialFile: reg.gcCred,
		PreviewDomain: previewDomain, SSHListen: "127.0.0.1:0"})
}

// processNode is `envd serve --join URL --token T` as a process of its
// own (so that a test can kill -9 it and its containerd): it fetches the
// database, registry, S3 and lease settings from the node at URL. It logs
// in to the database as a node's role, which may not make tokens: its
// client uses adminToken, made on another node.
type processNode struct {
	bin, dataDir, name string
	adminToken         string
	args               []string
	env                []string
	p                  *envdProcess
	c                  *client.Client
}

func startProcessNode(t *testing.T, name, zone string, reg *clusterRegistry, joinURL, token, adminToken string) *processNode {
	t.Helper()
	dir, err := os.MkdirTemp("", "envd-e2e-"+name+"-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	pn := &processNode{bin: reg.bin, dataDir: filepath.Join(dir, "data"), name: name, adminToken: adminToken}
	require.NoError(t, os.MkdirAll(pn.dataDir, 0o755))
	pn.args = []string{"serve", "--data-dir", pn.dataDir, "--node", name, "--join", joinURL, "--token", token,
		"--ssh-listen", "", "--label", "zone=" + zone, "--sweep-interval", clusterSweep.String()}
	pn.start(t)
	t.Cleanup(func() {
		if pn.p != nil {
			pn.p.kill(t)
		}
		out, err := exec.Command(pn.bin, "down", "--data-dir", pn.dataDir).CombinedOutput()
		assert.NoError(t, err, "envd down: %s", out)
		if t.Failed() {
			// The data dir goes below: keep what the node said went wrong.
			logWarnings(t, pn.name, filepath.Join(pn.dataDir, "envd.log"))
			cd, _ := filepath.Glob(filepath.Join(pn.dataDir, "*", "containerd.log"))
			for _, f := range cd {
				logWarnings(t, pn.name+" containerd", f)
			}
		}
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
	_, err = os.Stat(filepath.Join(pn.dataDir, "admin.token"))
	require.ErrorIs(t, err, os.ErrNotExist, "a node with a node's database role makes no admin token")
	pn.c, err = client.New(strings.TrimSpace(string(url)), pn.adminToken)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return pn.c.Healthz(context.Background()) == nil }, 30*time.Second, 100*time.Millisecond)
	pn.p = p
}

// logWarnings copies the warning and error lines of a log of a node (the
// last 200) into the test's output.
func logWarnings(t *testing.T, node, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Logf("node %s: no log: %v", node, err)
		return
	}
	var lines []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") ||
			strings.Contains(line, "level=warning") || strings.Contains(line, "level=error") { // envd's, containerd's
			lines = append(lines, line)
		}
	}
	lines = lines[max(0, len(lines)-200):]
	t.Logf("node %s: %d warnings and errors in its log:\n%s", node, len(lines), strings.Join(lines, "\n"))
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

var clusterDBSeq atomic.Int64

// clusterDatabase makes a database of its own on the shared node's
// PostgreSQL server and returns its connection string. The nodes that use
// it are a cluster apart: the shared node and the nodes of other tests are
// no members, so the test may place, cordon, drain and lose nodes while
// other tests run. Dropped at the end, after the nodes' own cleanups
// (call it before starting them).
func clusterDatabase(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("envd_cluster_%d", clusterDBSeq.Add(1))
	conn, err := pgx.Connect(ctx(t), env.node.DSN())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx(t), "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(c, env.node.DSN())
		if err != nil {
			t.Logf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(c, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Logf("drop database %s: %v", name, err)
		}
	})
	dsn := regexp.MustCompile(`dbname=('[^']*'|\S+)`).ReplaceAllString(env.node.DSN(), "dbname="+name)
	require.Contains(t, dsn, "dbname="+name, "the shared node's DSN names its database: %s", env.node.DSN())
	return dsn
}

func nodeOf(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	in, err := c.GetInstance(ctx(t), id)
	require.NoError(t, err)
	return in.Node
}

// Three nodes (two in this process, one `envd serve` process with its own
// containerd), each with its own containerd and data dir, one PostgreSQL,
// the registry on S3 (versitygw), S3 for volumes. A client that talks to
// node A only: placement spreads a tenant's instances over the three,
// honours node_selector and cordon, prefers the node that has the
// version's image; every instance route reaches an instance on node B;
// saves on two nodes race GCs on both and every committed version
// restores; a project with volumes stays on their node (or is refused
// with volume_elsewhere); drain hibernates a node's instances (volumes
// handed off through S3) and they come back elsewhere with their files;
// kill -9 of node C and its containerd fails its instances node_lost
// within the lease and sweep interval, their periodic checkpoints (layer
// and volume) start the project elsewhere, and C, restarted, finds itself
// fenced and removes its containers.
func TestRootClusterPlacementDrainAndNodeLoss(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	began := time.Now()
	dsn := clusterDatabase(t)
	s3 := s3test.Start(t)
	reg := startClusterRegistry(t, s3)
	a, ca := startClusterNode(t, "cl-a", "a", dsn, s3, reg)
	b, cb := startClusterNode(t, "cl-b", "b", dsn, s3, reg)
	// C joins with a join token made on A: `envd serve --join URL --token T`.
	jt, err := ca.CreateJoinToken(c, types.JoinTokenRequest{TTL: "10m"})
	require.NoError(t, err)
	assert.Contains(t, jt.Command, "envd serve --join "+a.URL+" --token "+jt.Token)
	pc := startProcessNode(t, "cl-c", "c", reg, a.URL, jt.Token, a.Token)
	reg.importBase(t, ca)
	t.Logf("registry on S3 and three nodes up in %s", time.Since(began).Round(time.Second))
	names := []string{a.Name(), b.Name(), pc.name}

	// Membership, seen from any node.
	// A node serves its API a moment before it joins: wait for the three.
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
	assert.Len(t, seen, len(names), "the cluster is the three nodes: %v", seen)
	// C joined with --join and --token only (no database, registry or S3
	// flags): it runs on the cluster's lease. Its token is spent; a made-up
	// one is unknown.
	assert.Equal(t, clusterLease.Seconds(), seen[pc.name].LeaseSeconds, "the lease came with the join")
	for _, tc := range []struct{ name, token, reason string }{
		{"used", jt.Token, "used"},
		{"unknown", "envdjoin_madeup", "unknown"},
	} {
		jc, err := client.New(b.URL, tc.token)
		require.NoError(t, err)
		_, err = jc.Join(c, types.JoinRequest{Node: "intruder"})
		require.ErrorIs(t, err, errdefs.ErrJoinToken, tc.name)
		var apiErr *types.Error
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, "join_token_invalid", apiErr.Code)
		assert.Equal(t, tc.reason, apiErr.Details["reason"], tc.name)
	}
	// C logs in to the database as a node's role: PostgreSQL refuses it
	// an API token (docs/deploy.md, "What a node can do").
	_, err = pc.c.CreateToken(c, "from-c", types.CreateTokenRequest{Admin: true})
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "a token made through a node with a node's role")
	assert.Contains(t, err.Error(), "database role may not")
	logged, err := os.ReadFile(filepath.Join(pc.dataDir, "envd.log"))
	require.NoError(t, err)
	assert.NotContains(t, string(logged), jt.Token, "the join token stays out of the log")
	assert.NotContains(t, string(logged), s3.SecretKey, "so do the S3 keys it fetched")

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
	p1 := reg.project(t, ca, "cluster-spread")
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

	// One endpoint: every instance route of an instance on B, asked on A.
	fw := create(ca, p1, types.CreateInstanceRequest{Retain: true, NodeSelector: map[string]string{"zone": "b"}})
	require.Equal(t, b.Name(), fw.Node)
	assertForwarded(t, asker{a.URL, a.Token, ca}, cb, b.Name(), fw.ID)
	_, err = ca.DeleteInstance(c, fw.ID)
	require.NoError(t, err, "delete through A")
	gone, err := cb.GetInstance(c, fw.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateTerminated, gone.State)
	made = nil
	t.Logf("forwarding checked at %s", time.Since(began).Round(time.Second))

	// Cache affinity: B pulled version 2 of p2 (a save, an image of its
	// own); the next instance, asked on A, goes to B.
	p2 := reg.project(t, ca, "cluster-affinity")
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

	// The sweeper races saves on A and B (registry on S3).
	raceSavesWithGCs(t, reg.project(t, ca, "cluster-gcrace"), a.RegistryClient(),
		raceNode{a.Name(), ca, map[string]string{"zone": "a"}}, raceNode{b.Name(), cb, map[string]string{"zone": "b"}})
	t.Logf("GC race checked at %s", time.Since(began).Round(time.Second))

	// Volumes: a project's instances go where its volume data is; a start
	// elsewhere is refused, never given an empty volume.
	p3 := reg.project(t, ca, "cluster-vol", "work:/workspace")
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

	// Node loss: C runs two retained instances of a project with a
	// volume, checkpointed every 10s (coordinated: layer and volume);
	// kill -9 it and its containerd.
	t.Logf("node loss begins at %s", time.Since(began).Round(time.Second))
	p4 := reg.project(t, ca, "cluster-loss", "work:/workspace")
	cs, err := ca.SetProjectCheckpoint(c, p4, types.CheckpointSetting{Every: "10s"})
	require.NoError(t, err)
	assert.Equal(t, "10s", cs.Every)
	var onC []string
	for range 2 {
		in := create(ca, p4, types.CreateInstanceRequest{Retain: true, NodeSelector: map[string]string{"zone": "c"}})
		onC = append(onC, in.ID)
	}
	mustShOn(t, ca, onC[0], "echo checkpointed > /root/u && echo volume > /workspace/w && sync")
	require.Eventually(t, func() bool {
		cps, err := ca.ListCheckpoints(c, p4)
		if err != nil {
			return false
		}
		for _, cp := range cps {
			if cp.Instance == onC[0] && len(cp.Volumes) == 1 {
				return true
			}
		}
		return false
	}, time.Minute, 500*time.Millisecond, "a periodic checkpoint of the retained instance with its volume")
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
	m := regexp.MustCompile(`envctl up ` + regexp.QuoteMeta(p4) + ` --checkpoint (\d+)`).FindStringSubmatch(lost.Message)
	require.NotNil(t, m, "the message names the checkpoint to start from: %s", lost.Message)
	checkpoint, _ := strconv.Atoi(m[1])
	cp, err := ca.GetCheckpoint(c, p4, checkpoint)
	require.NoError(t, err)
	assert.Equal(t, onC[0], cp.Instance)
	require.Len(t, cp.Volumes, 1, "the periodic checkpoint archived the volume")

	// A plain up elsewhere is refused: the volume is on the lost node; the
	// refusal names a checkpoint that archived it.
	_, err = ca.CreateInstance(c, p4, types.CreateInstanceRequest{})
	require.ErrorIs(t, err, errdefs.ErrVolumeElsewhere)
	assert.Contains(t, err.Error(), "envctl up "+p4+" --checkpoint ")
	fromCheckpoint := create(ca, p4, types.CreateInstanceRequest{Checkpoint: checkpoint})
	assert.NotEqual(t, pc.name, fromCheckpoint.Node)
	res, err = ca.Exec(c, fromCheckpoint.ID, types.ExecRequest{Args: []string{"cat", "/root/u", "/workspace/w"}})
	require.NoError(t, err)
	assert.Equal(t, "checkpointed\nvolume\n", res.Stdout, "the checkpoint kept the retained layer's work and the volume")
	cn, err := ca.GetNode(c, pc.name)
	require.NoError(t, err)
	assert.Equal(t, types.NodeLost, cn.State)
	// The node that started from the checkpoint is the volume's home now.
	back := create(ca, p4, types.CreateInstanceRequest{})
	assert.Equal(t, fromCheckpoint.Node, back.Node, "placed with its volume: %s", back.Placement)
	res, err = ca.Exec(c, back.ID, types.ExecRequest{Args: []string{"cat", "/workspace/w"}})
	require.NoError(t, err)
	assert.Equal(t, "volume\n", res.Stdout)

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

// benchAddresses puts n addresses of 198.18.0.0/15 (the benchmarking
// range: no one else's) on a bridge the test makes and removes at its end
// (a bridge rather than a dummy: not every kernel here has the dummy
// module); the nodes of a test listen on them as on a LAN's addresses.
func benchAddresses(t *testing.T, n int) []string {
	t.Helper()
	link := fmt.Sprintf("envdtls%d", os.Getpid()%100000)
	ip := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
	}
	ip("link", "add", link, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", link).Run() })
	third := 1 + os.Getpid()%250 // two test binaries at once do not share addresses
	var addrs []string
	for i := range n {
		a := fmt.Sprintf("198.18.%d.%d", third, i+1)
		ip("addr", "add", a+"/32", "dev", link)
		addrs = append(addrs, a)
	}
	ip("link", "set", link, "up")
	return addrs
}

// tlsNode is a node with the default TLS on a non-loopback address, and a
// client and HTTP client that trust its self-signed certificate (as
// envctl does from its data dir).
type tlsNode struct {
	n    *node.Node
	c    *client.Client
	hc   *http.Client
	cert []byte // DER of the certificate it serves
}

func startTLSNode(t *testing.T, name, addr string) tlsNode {
	t.Helper()
	n, _ := startJoiningNode(t, name, &node.Config{DefaultTTL: time.Hour, Listen: addr + ":0", PreviewDomain: previewDomain})
	require.True(t, strings.HasPrefix(n.URL, "https://"+addr+":"), "a non-loopback listen serves TLS: %s", n.URL)
	require.NotEmpty(t, n.SelfSignedCert(), "the default certificate is the node's self-signed one")
	certPEM, err := os.ReadFile(n.SelfSignedCert())
	require.NoError(t, err)
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(certPEM))
	c, err := client.New(n.URL, n.Token, client.WithCACert(certPEM))
	require.NoError(t, err)
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	t.Cleanup(hc.CloseIdleConnections)
	return tlsNode{n: n, c: c, hc: hc, cert: block.Bytes}
}

// Three nodes on non-loopback addresses with the default TLS (each its own
// self-signed certificate, no CA in common, none in the system's store): a
// client of node A only reaches an instance on node B: exec (buffered and
// over its WebSocket), the port proxy (path form) and a cross-node preview
// (host form) are forwarded over https, B's certificate checked against
// the one B recorded. When C's recorded certificate is not the one C
// presents, A refuses to forward to C (503, naming the certificate it
// expected) and sends C nothing; with C's own recorded again, it forwards.
func TestRootClusterTLSBetweenNodes(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	addrs := benchAddresses(t, 3)
	a := startTLSNode(t, "tls-a", addrs[0])
	b := startTLSNode(t, "tls-b", addrs[1])
	cn := startTLSNode(t, "tls-c", addrs[2])
	for _, x := range []tlsNode{a, b, cn} {
		m, err := a.c.GetNode(c, x.n.Name())
		require.NoError(t, err)
		assert.Equal(t, x.n.URL, m.APIURL)
	}
	require.NotEqual(t, a.cert, b.cert, "each node its own certificate")

	p := fmt.Sprintf("tls-%d", projectSeq.Add(1))
	_, err := a.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	onB, err := b.c.CreateInstance(c, p, types.CreateInstanceRequest{}) // placed where asked
	require.NoError(t, err)
	require.Equal(t, b.n.Name(), onB.Node)
	t.Cleanup(func() { _, _ = b.c.DeleteInstance(context.Background(), onB.ID) })

	// Exec through A, buffered and over the WebSocket.
	res, err := a.c.Exec(c, onB.ID, types.ExecRequest{Args: []string{"sh", "-c", "echo on-b > /root/f && cat /root/f"}})
	require.NoError(t, err, "exec forwarded from A to B over https")
	assert.Equal(t, "on-b\n", res.Stdout)
	var out bytes.Buffer
	code, err := a.c.ExecStream(c, onB.ID, types.ExecRequest{Args: []string{"cat", "/root/f", "-"}},
		types.Stdio{Stdin: strings.NewReader("streamed\n"), Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "on-b\nstreamed\n", out.String())

	// The port proxy through A: path form, and the preview host form.
	mustShOn(t, b.c, onB.ID, "mkdir -p /www && echo served-by-b > /www/index.html && (httpd -p 127.0.0.1:8080 -h /www &)")
	get := func(node tlsNode, path, host, cookie string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(c, http.MethodGet, node.n.URL+path, nil)
		require.NoError(t, err)
		if host != "" {
			req.Host = host
		}
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: "envd_preview", Value: cookie})
		} else {
			req.Header.Set("Authorization", "Bearer "+node.n.Token)
		}
		resp, err := node.hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	require.Eventually(t, func() bool {
		status, body := get(a, "/v1/instances/"+onB.ID+"/ports/8080/index.html", "", "")
		return status == http.StatusOK && body == "served-by-b\n"
	}, 20*time.Second, 200*time.Millisecond, "the dev server on B through A's port proxy")
	tok, err := a.c.PreviewToken(c, onB.ID, 8080, "10m")
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(a.n.URL, "https://"))
	require.NoError(t, err)
	previewHost := fmt.Sprintf("8080-%s.%s:%s", onB.ID, previewDomain, port)
	status, body := get(a, "/index.html", previewHost, tok.Token)
	assert.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "served-by-b\n", body, "the cross-node preview through A")

	// C presents a certificate other than the one recorded for it (here:
	// B's, which A trusts for B only): A refuses to forward to C.
	onC, err := cn.c.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	require.Equal(t, cn.n.Name(), onC.Node)
	t.Cleanup(func() { _, _ = cn.c.DeleteInstance(context.Background(), onC.ID) })
	mustShOn(t, a.c, onC.ID, "true") // forwarded while C's own certificate is recorded
	db, err := pgx.Connect(c, env.node.DSN())
	require.NoError(t, err)
	defer db.Close(context.Background())
	setPin := func(der []byte) {
		t.Helper()
		_, err := db.Exec(c, "UPDATE nodes SET tls_cert = $2 WHERE name = $1", cn.n.Name(), der)
		require.NoError(t, err)
	}
	setPin(b.cert)
	_, err = a.c.Exec(c, onC.ID, types.ExecRequest{Args: []string{"sh", "-c", "echo ran > /root/refused"}})
	require.ErrorIs(t, err, errdefs.ErrUnavailable, "a node presenting another certificate than its recorded one is refused")
	assert.Contains(t, err.Error(), "presented a TLS certificate other than the one it recorded")
	status, body = get(a, "/v1/instances/"+onC.ID+"/ports/8080/", "", "")
	assert.Equal(t, http.StatusServiceUnavailable, status, body)
	res, err = cn.c.Exec(c, onC.ID, types.ExecRequest{Args: []string{"sh", "-c", "test -e /root/refused && echo reached || echo not-reached"}})
	require.NoError(t, err)
	assert.Equal(t, "not-reached\n", res.Stdout, "the refused request never reached C")
	setPin(cn.cert)
	res, err = a.c.Exec(c, onC.ID, types.ExecRequest{Args: []string{"echo", "back"}})
	require.NoError(t, err, "with C's own certificate recorded again, A forwards to C")
	assert.Equal(t, "back\n", res.Stdout)
}
