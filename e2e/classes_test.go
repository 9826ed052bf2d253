package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/node"

	"github.com/envd-dev/envd/snapshotter/stargz"
)

// Scenarios on the gVisor runtime class, on the shared node (whose default
// stays runc): TestRootGVisorClass runs the scenario functions of saves
// (the round trip of every kind of change, the seed scenario), retained
// layers, files, ports, SSH again, and gVisor's own limits and wall
// scenarios, each as a subtest whose
// projects (newProject, volumeProject, newSSHTenant) are of class gvisor
// (projectClass). Only parallel tests can run there: TestRootLazyRestore
// restarts the node (a sole test, groups_test.go), so its lazy part is
// gvisorLazyRestore.

// gvisorScenarios are the test names (and their subtests) whose projects
// are of class gvisor.
var gvisorScenarios sync.Map

// projectClass is the runtime class of the projects test t makes: gvisor
// under TestRootGVisorClass, else "" (the node's default).
func projectClass(t testing.TB) string {
	for name := t.Name(); ; {
		if _, ok := gvisorScenarios.Load(name); ok {
			return "gvisor"
		}
		i := strings.LastIndex(name, "/")
		if i < 0 {
			return ""
		}
		name = name[:i]
	}
}

func TestRootGVisorClass(t *testing.T) {
	t.Parallel()
	for _, sc := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"kernel", gvisorKernel},
		{"lazy restore", gvisorLazyRestore},
		{"save round trip", TestRootSaveRestoreRoundTrip},
		{"seed", gvisorSeed},
		{"limits", gvisorLimits},
		{"wall", gvisorWall},
		{"retained layer", TestRootRetainedLayerSurvivesStopStart},
		{"files volume", TestRootFilesVolume},
		{"ports", TestRootPortsListAndPathForm},
		{"ports tunnel", TestRootPortsPortForward},
		{"ssh exec", TestRootSSHExec},
		{"ssh file transfer", TestRootSSHFileTransfer},
		{"ssh forward", TestRootSSHForward},
	} {
		t.Run(sc.name, func(t *testing.T) {
			gvisorScenarios.Store(t.Name(), true)
			sc.run(t)
		})
	}
}

// gvisorKernel: an instance of a gvisor project runs on gVisor's kernel.
func gvisorKernel(t *testing.T) {
	t.Parallel()
	project := newProject(t, "gvkernel")
	p, err := env.c.GetProject(ctx(t), project)
	require.NoError(t, err)
	require.Equal(t, "gvisor", p.RuntimeClass)
	in := up(t, project, 0)
	assert.Contains(t, mustSh(t, in.ID, "uname -r"), "gvisor")
}

// gvisorLazyRestore: a saved version starts on gVisor through the lazy
// snapshotter (the layer mounted, its blob not pulled), with the saved
// files and deletions.
func gvisorLazyRestore(t *testing.T) {
	t.Parallel()
	p := newProject(t, "gvlazy")
	in := up(t, p, 0)
	sum := mustSh(t, in.ID, "head -c 20971520 /dev/urandom > /big20 && sha256sum /big20 && rm /fixtures/delete-me")
	_, res := save(t, in.ID, "20 MB file and a deletion")
	_, layer := topLayer(t, p, res.Version)
	in2 := up(t, p, res.Version)
	assert.Equal(t, "gvisor", strings.TrimSpace(mustSh(t, in2.ID, "uname -r | grep -o gvisor")))
	assert.Equal(t, stargz.Name, containerSnapshotter(t, in2.ID))
	assert.False(t, holdsBlob(t, layer), "containerd holds the layer's blob: the restore pulled it instead of mounting it lazily")
	assert.Equal(t, sum, mustSh(t, in2.ID, "sha256sum /big20"))
	assert.Equal(t, "gone", mustSh(t, in2.ID, "test -e /fixtures/delete-me || echo gone"))
}

// gvisorSeed is the seed scenario on gVisor with a small package: on a
// Debian base, apt-get installs tree (dpkg, its database, threads of xz:
// the clone3 answer of docs/gvisor.md) and a base file is deleted; the
// save's version, started as a fresh instance, runs tree and still lacks
// the file (a whiteout), on gVisor.
func gvisorSeed(t *testing.T) {
	t.Parallel()
	base := importDebian(t)
	p := gvisorProject(t, "gvseed", base, types.Limits{})
	in := up(t, p, 0)
	mustSh(t, in.ID, "apt-get -o Acquire::Retries=3 update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends tree >/dev/null && rm /etc/debian_version")
	_, res := save(t, in.ID, "tree installed on gVisor")
	require.Equal(t, 2, res.Version)
	fresh := up(t, p, res.Version)
	assert.Contains(t, mustSh(t, fresh.ID, "uname -r"), "gvisor")
	assert.Contains(t, mustSh(t, fresh.ID, "mkdir -p /seed/a/b && tree /seed"), "`-- b")
	assert.Contains(t, mustSh(t, fresh.ID, "dpkg -s tree | grep Status"), "install ok installed")
	assert.Equal(t, "gone", mustSh(t, fresh.ID, "test -e /etc/debian_version || echo gone"))
}

// gvisorProject creates a gvisor project on base with limits.
func gvisorProject(t *testing.T, prefix, base string, limits types.Limits) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, projectSeq.Add(1))
	p, err := env.c.CreateProject(ctx(t), types.CreateProjectRequest{Name: name, Base: base, Limits: &limits, RuntimeClass: "gvisor"})
	require.NoError(t, err)
	require.Equal(t, "gvisor", p.RuntimeClass)
	return name
}

// awaitFailed waits for instance id to be Failed and returns it.
func awaitFailed(t *testing.T, id string) types.Instance {
	t.Helper()
	var got types.Instance
	require.Eventually(t, func() bool {
		var err error
		got, err = env.c.GetInstance(ctx(t), id)
		return err == nil && got.State == types.StateFailed
	}, 2*time.Minute, 250*time.Millisecond, "instance %s fails", id)
	return got
}

// gvisorLimits: a gvisor project's limits as its user sees them. The
// sandbox is told its memory (MemTotal inside is the limit); the writable
// layer's disk limit holds inside and the instance lives on; past memory
// the whole sandbox stops: the instance is Failed, oom_killed (on runc
// only the process dies); past pids it stops too, Failed, task_exited (on
// runc a fork fails);
// the neighbour and the node carry on either way.
func gvisorLimits(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	base := probeImage(t)
	require.NoError(t, env.node.Runtime().DiskLimitErr(), "disk limits must work on the test node")
	limits := types.Limits{MemoryBytes: 96 << 20, Pids: 64, CPUs: 0.5, DiskBytes: 256 << 20}
	in := up(t, gvisorProject(t, "gvlimits", base, limits), 0)
	require.NotNil(t, in.Limits)
	assert.Equal(t, limits.MemoryBytes, in.Limits.MemoryBytes)
	assert.Equal(t, limits.Pids, in.Limits.Pids)
	assert.Equal(t, limits.DiskBytes, in.Limits.DiskBytes)
	other := up(t, newProject(t, "gvneighbour"), 0)

	assert.Equal(t, fmt.Sprintf("MemTotal: %d kB", 96<<10), strings.Join(strings.Fields(mustSh(t, in.ID, "grep MemTotal /proc/meminfo")), " "))

	t.Run("disk", func(t *testing.T) {
		res := sh(t, in.ID, "dd if=/dev/zero of=/root/big bs=1M count=400")
		assert.NotEqual(t, 0, res.ExitCode)
		assert.Contains(t, res.Stderr, "No space left")
		assert.Equal(t, "alive", mustSh(t, in.ID, "rm -f /root/big; echo alive"))
	})

	t.Run("pids", func(t *testing.T) {
		bomb := up(t, gvisorProject(t, "gvbomb", base, types.Limits{Pids: 16}), 0)
		_, _ = env.c.Exec(c, bomb.ID, types.ExecRequest{Args: []string{"sh", "-c", "for i in $(seq 300); do sleep 30 & done; wait"}, Timeout: "60s"})
		got := awaitFailed(t, bomb.ID)
		assert.Equal(t, types.ReasonTaskExited, got.Reason, "the sandbox ended at its host pids limit: %s", got.Message)
		assert.Equal(t, "ok", mustSh(t, other.ID, "echo ok"))
		assert.Equal(t, "alive", mustSh(t, in.ID, "echo alive"), "another gvisor instance is not touched")
	})

	t.Run("memory", func(t *testing.T) {
		res, err := env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"probe", "hog", "300"}, Timeout: "60s"})
		if err == nil {
			assert.NotEqual(t, 0, res.ExitCode, "a hog past the memory limit ends: %s%s", res.Stdout, res.Stderr)
		}
		got := awaitFailed(t, in.ID)
		assert.Equal(t, types.ReasonOOMKilled, got.Reason, got.Message)
		assert.Equal(t, "ok", mustSh(t, other.ID, "echo ok"))
		hr, err := http.Get(env.node.URL + "/healthz")
		require.NoError(t, err)
		hr.Body.Close()
		assert.Equal(t, http.StatusOK, hr.StatusCode)
	})
}

// gvisorWall: the hostile-tenant probes that hold on runc hold in a gvisor
// instance (seccomp, no_new_privs, no NET_RAW or MKNOD, user namespaces,
// keyctl, raw sockets, block devices refused), and the sandbox's wall: its
// kernel is not the node's, /proc has its own processes only, the node's
// devices are absent, another instance's processes are invisible.
func gvisorWall(t *testing.T) {
	t.Parallel()
	in := up(t, gvisorProject(t, "gvwall", probeImage(t), types.Limits{}), 0)
	other := up(t, newProject(t, "gvwall-other"), 0)
	// A process of the other instance with an argument to look for.
	marker := fmt.Sprintf("sleep %d", 600000+projectSeq.Add(1))
	mustSh(t, other.ID, "("+marker+" >/dev/null 2>&1 &)")
	require.Contains(t, mustSh(t, other.ID, "ps"), marker)

	status := mustSh(t, in.ID, "cat /proc/self/status")
	assert.Contains(t, status, "Seccomp:\t2")
	assert.Contains(t, status, "NoNewPrivs:\t1")
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			require.NoError(t, err)
			assert.Zero(t, caps&(1<<13), "CAP_NET_RAW in CapEff %x", caps)
			assert.Zero(t, caps&(1<<27), "CAP_MKNOD in CapEff %x", caps)
		}
	}
	for _, probe := range []string{"unshare-user", "keyctl", "raw-socket", "mknod-block"} {
		res := sh(t, in.ID, "probe "+probe)
		assert.Equal(t, 3, res.ExitCode, "%s: %s%s", probe, res.Stdout, res.Stderr)
		assert.Contains(t, res.Stdout, "refused:", probe)
	}
	res := sh(t, in.ID, "ping -c1 -W1 127.0.0.1")
	assert.NotEqual(t, 0, res.ExitCode, "ping without NET_RAW: %s%s", res.Stdout, res.Stderr)

	var uts unix.Utsname
	require.NoError(t, unix.Uname(&uts))
	assert.NotEqual(t, unix.ByteSliceToString(uts.Release[:]), mustSh(t, in.ID, "uname -r"), "the kernel is the sandbox's")
	hostVersion, err := os.ReadFile("/proc/version")
	require.NoError(t, err)
	assert.NotEqual(t, strings.TrimSpace(string(hostVersion)), mustSh(t, in.ID, "cat /proc/version"))

	procs, err := strconv.Atoi(mustSh(t, in.ID, "ls -d /proc/[0-9]* | wc -l"))
	require.NoError(t, err)
	assert.Less(t, procs, 10, "only the instance's own processes in its /proc")
	assert.NotEqual(t, 0, sh(t, in.ID, fmt.Sprintf("test -e /proc/%d/cmdline", os.Getpid())).ExitCode, "the test process, a node process, is not visible")
	assert.NotContains(t, mustSh(t, in.ID, "ps"), marker, "another instance's process is not visible")
	mounts := mustSh(t, in.ID, "cat /proc/mounts")
	assert.NotContains(t, mounts, env.node.DataDir(), "no node path in the instance's mounts")

	devs := strings.Fields(mustSh(t, in.ID, "ls /dev"))
	for _, dev := range []string{"sda", "vda", "loop0", "kvm", "mem", "kmsg", "nvme0"} {
		assert.NotContains(t, devs, dev, "the node's device %s", dev)
	}
	assert.NotEqual(t, 0, sh(t, in.ID, "cat /sys/block/*/dev").ExitCode, "no block device of the node under /sys")
}

// TestRootGVisorGraphvizSeed is issue 26's seed scenario on the sandboxed
// class: a gvisor project on the Debian base installs Graphviz (66
// packages: dpkg, xz's threads, many small files through the gofer), is
// saved, and the version restored on a second node renders a graph with
// dot, on gVisor there too. It costs minutes on a busy machine (520 s at
// load 50-75, the install 4 min of it; docs/gvisor.md). It runs beside the
// other parallel tests: it needs no node to itself (its second node is its
// own), and alone in the sole process it would add its whole time to the
// suite's longest path.
func TestRootGVisorGraphvizSeed(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	base := importDebian(t)
	p := gvisorProject(t, "gvgraphviz", base, types.Limits{})
	in := up(t, p, 0)
	began := time.Now()
	mustSh(t, in.ID, "apt-get -o Acquire::Retries=3 update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends graphviz >/dev/null")
	t.Logf("graphviz installed on gVisor in %s", time.Since(began).Round(time.Second))
	_, res := save(t, in.ID, "graphviz installed on gVisor")

	_, cb := startJoiningNode(t, "node-gvgraphviz-b", &node.Config{DefaultTTL: time.Hour})
	began = time.Now()
	fresh, err := cb.CreateInstance(c, p, types.CreateInstanceRequest{Version: res.Version})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cb.DeleteInstance(context.Background(), fresh.ID) })
	assert.Equal(t, "node-gvgraphviz-b", fresh.Node)
	run := func(script string) string {
		r, err := cb.Exec(c, fresh.ID, types.ExecRequest{Args: []string{"sh", "-c", script}})
		require.NoError(t, err)
		require.Equal(t, 0, r.ExitCode, "%s: %s%s", script, r.Stdout, r.Stderr)
		return r.Stdout
	}
	assert.Contains(t, run("uname -r"), "gvisor")
	svg := run("echo 'digraph { seed -> restored }' | dot -Tsvg")
	t.Logf("restored on the second node and rendered in %s", time.Since(began).Round(time.Second))
	assert.Contains(t, svg, "<svg")
	assert.Contains(t, svg, "restored")
}
