package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
)

// probeBase is a busybox image with /usr/local/bin/probe (e2e/testdata/probe),
// imported once per run by probeImage.
const probeBase = "probe"

var probeOnce struct {
	sync.Once
	err error
}

// probeImage builds the probe static and imports busybox + probe through
// the API, as a user imports a base image.
func probeImage(t *testing.T) string {
	t.Helper()
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "envd-probe-")
		if err != nil {
			probeOnce.err = err
			return
		}
		defer os.RemoveAll(dir)
		rootfs := filepath.Join(dir, "rootfs")
		script, _ := filepath.Abs("../scripts/busybox-rootfs.sh")
		if out, err := exec.Command("bash", script, rootfs).CombinedOutput(); err != nil {
			probeOnce.err = fmt.Errorf("busybox rootfs: %v: %s", err, out)
			return
		}
		build := exec.Command("go", "build", "-ldflags", "-s -w", "-o", filepath.Join(rootfs, "usr/local/bin/probe"), "./testdata/probe")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			probeOnce.err = fmt.Errorf("build probe: %v: %s", err, out)
			return
		}
		tarball, err := tarDir(rootfs)
		if err != nil {
			probeOnce.err = err
			return
		}
		_, probeOnce.err = env.c.ImportImage(context.Background(), probeBase, bytes.NewReader(tarball))
	})
	require.NoError(t, probeOnce.err)
	return probeBase
}

// A tenant inside a hardened instance, probing what it may do: seccomp is
// on, no_new_privs is set, NET_RAW and MKNOD are gone, user namespaces,
// keyctl, raw sockets and block devices are refused, the project's limits
// are what its cgroups hold, a fork bomb stops at the pids limit while
// the node and another tenant's instance carry on, and a memory hog is
// OOM-killed (exec: 137 and oom_killed; init: the instance Failed with
// reason oom_killed).
func TestRootHostileRuntime(t *testing.T) {
	c := ctx(t)
	base := probeImage(t)
	limits := types.Limits{MemoryBytes: 96 << 20, Pids: 64, CPUs: 0.5, CPUWeight: 50, IOWeight: 100, DiskBytes: 1 << 30}
	name := fmt.Sprintf("hostile-%d", projectSeq.Add(1))
	proj, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: name, Base: base, Limits: &limits})
	require.NoError(t, err)
	require.Equal(t, &limits, proj.Limits)
	in := up(t, name, 0)
	require.NotNil(t, in.Limits, "the instance records its effective limits")
	assert.Equal(t, limits.MemoryBytes, in.Limits.MemoryBytes)
	assert.Equal(t, limits.Pids, in.Limits.Pids)
	assert.Equal(t, limits.CPUs, in.Limits.CPUs)
	assert.Equal(t, limits.DiskBytes, in.Limits.DiskBytes)

	// The neighbour: another project's instance, without limits of its own.
	other := up(t, newProject(t, "neighbour"), 0)

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
		t.Run(probe, func(t *testing.T) {
			res := sh(t, in.ID, "probe "+probe)
			assert.Equal(t, 3, res.ExitCode, "%s: %s%s", probe, res.Stdout, res.Stderr)
			assert.Contains(t, res.Stdout, "refused:")
		})
	}
	res := sh(t, in.ID, "unshare -Ur true")
	assert.NotEqual(t, 0, res.ExitCode, "unshare -Ur: %s%s", res.Stdout, res.Stderr)
	res = sh(t, in.ID, "ping -c1 -W1 127.0.0.1")
	assert.NotEqual(t, 0, res.ExitCode, "ping without NET_RAW: %s%s", res.Stdout, res.Stderr)

	// What the cgroups hold is what the project asked (cgroup v1 files on
	// this host, read through the instance's cgroup namespace).
	cg := mustSh(t, in.ID, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/cpu/cpu.cfs_quota_us")
	assert.Equal(t, fmt.Sprintf("%d\n64\n50000", 96<<20), cg)

	// A fork bomb stops at the pids limit; the node and the neighbour are fine.
	res = sh(t, in.ID, "for i in $(seq 500); do sleep 3 & done 2>&1 | tail -1; echo done")
	assert.Contains(t, res.Stdout, "can't fork")
	assert.Equal(t, "ok", mustSh(t, other.ID, "echo ok"))
	hr, err := http.Get(env.node.URL + "/healthz")
	require.NoError(t, err)
	hr.Body.Close()
	assert.Equal(t, http.StatusOK, hr.StatusCode)
	require.Eventually(t, func() bool {
		r, err := env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"true"}})
		return err == nil && r.ExitCode == 0
	}, 20*time.Second, 500*time.Millisecond, "the instance takes execs again once the bomb's processes exit")

	// A memory hog exec'd: killed by the OOM killer, exit 137, oom_killed.
	res = sh(t, in.ID, "probe hog 300")
	assert.Equal(t, 137, res.ExitCode, res.Stdout+res.Stderr)
	assert.True(t, res.OOMKilled, "the exec result says the OOM killer took it")
	got, err := env.c.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, got.State, "an exec's OOM kill leaves the instance running")
	assert.Equal(t, "ok", mustSh(t, other.ID, "echo ok"))

	// The init taken by the OOM killer: the instance fails, oom_killed.
	// Several small hogs, none larger than the init's badness at
	// oom_score_adj 1000, make the kernel pick the init.
	mustSh(t, in.ID, "echo 1000 > /proc/1/oom_score_adj")
	_, _ = env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c",
		"for i in 1 2 3 4 5 6; do probe hog 20 & sleep 0.3; done; wait"}, Timeout: "30s"})
	require.Eventually(t, func() bool {
		got, err = env.c.GetInstance(c, in.ID)
		return err == nil && got.State == types.StateFailed
	}, 60*time.Second, 500*time.Millisecond, "the instance whose init was OOM-killed fails")
	assert.Equal(t, types.ReasonOOMKilled, got.Reason, got.Message)
	assert.Contains(t, got.Message, "OOM")
	assert.Equal(t, "ok", mustSh(t, other.ID, "echo ok"))
}

// Tenant maxima: a project asking more than its tenant may have is refused
// with quota_exceeded (507) and nothing is made; node defaults and
// unset limits are cut to the maxima; writable-layer limits count toward
// the tenant's stored bytes and are shown by usage.
func TestRootLimitMaxima(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	tenant := fmt.Sprintf("maxima-%d", projectSeq.Add(1))
	tok, err := env.c.CreateToken(c, tenant, types.CreateTokenRequest{})
	require.NoError(t, err)
	tc, err := client.New(env.node.URL, tok.Token)
	require.NoError(t, err)
	q, err := env.c.SetQuota(c, tenant, types.Quota{MaxMemoryBytes: 256 << 20, MaxPids: 128, MaxCPUs: 1, MaxDiskBytes: 2 << 30,
		MaxStoredBytes: 5 << 29})
	require.NoError(t, err)
	assert.Equal(t, int64(256<<20), q.MaxMemoryBytes)
	assert.Equal(t, 1.0, q.MaxCPUs)

	for _, tc2 := range []struct {
		name  string
		l     types.Limits
		quota string
	}{
		{"memory", types.Limits{MemoryBytes: 512 << 20}, "memory_bytes"},
		{"pids", types.Limits{Pids: 1000}, "pids"},
		{"cpus", types.Limits{CPUs: 2}, "cpus"},
		{"disk", types.Limits{DiskBytes: 10 << 30}, "disk_bytes"},
	} {
		t.Run(tc2.name, func(t *testing.T) {
			_, err := tc.CreateProject(c, types.CreateProjectRequest{Name: "over-" + tc2.name, Base: fixtureBase, Limits: &tc2.l})
			require.ErrorIs(t, err, errdefs.ErrQuotaExceeded)
			var ae *types.Error
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, http.StatusInsufficientStorage, ae.Status)
			assert.Equal(t, tc2.quota, ae.Details["quota"])
			_, err = tc.GetProject(c, "over-"+tc2.name)
			assert.ErrorIs(t, err, errdefs.ErrNotFound, "a refused project is not made")
		})
	}

	_, err = tc.CreateProject(c, types.CreateProjectRequest{Name: "capped", Base: fixtureBase})
	require.NoError(t, err)
	_, err = tc.SetProjectLimits(c, "capped", types.Limits{MemoryBytes: 1 << 30})
	require.ErrorIs(t, err, errdefs.ErrQuotaExceeded, "PUT limits is checked like create")
	p, err := tc.SetProjectLimits(c, "capped", types.Limits{MemoryBytes: 128 << 20, DiskBytes: 1 << 30})
	require.NoError(t, err)
	require.NotNil(t, p.Limits)
	in, err := tc.CreateInstance(c, "capped", types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = tc.DeleteInstance(context.Background(), in.ID) })
	require.NotNil(t, in.Limits)
	assert.Equal(t, int64(128<<20), in.Limits.MemoryBytes, "the project's value")
	assert.Equal(t, int64(128), in.Limits.Pids, "unset under a maximum: the maximum")
	assert.Equal(t, 1.0, in.Limits.CPUs)
	res, err := tc.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/pids/pids.max"}})
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprintf("%d\n128\n", 128<<20), res.Stdout)

	u, err := tc.Usage(c, "")
	require.NoError(t, err)
	assert.Equal(t, int64(1<<30), u.DiskBytes, "the writable-layer limit counts")
	assert.GreaterOrEqual(t, u.StoredBytes, int64(1<<30))

	// Stored bytes at most 2.5 GiB: a second 1 GiB layer fits, a third not.
	in2, err := tc.CreateInstance(c, "capped", types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = tc.DeleteInstance(context.Background(), in2.ID) })
	_, err = tc.CreateInstance(c, "capped", types.CreateInstanceRequest{})
	require.ErrorIs(t, err, errdefs.ErrQuotaExceeded, "writable layers count toward max_stored_bytes")
}

// A working directory under /proc, /sys or /dev, or one that is not a
// clean absolute path, is refused with invalid_argument before runc sees
// it (runc CVE-2024-21626: cwd /proc/self/fd/N reached a host fd runc
// leaked), by exec and by the terminal WebSocket; the instance serves on.
func TestRootHostileCwdUnderProc(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	in := up(t, newProject(t, "cwd"), 0)
	for _, dir := range []string{"/proc/self/fd/7", "/proc/1/cwd", "/proc", "/sys/fs/cgroup", "/dev", "/tmp/../proc/self/cwd"} {
		_, err := env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"pwd"}, Cwd: dir})
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "exec cwd %q", dir)
		var out bytes.Buffer
		_, err = env.c.ExecStream(c, in.ID, types.ExecRequest{Args: []string{"pwd"}, Cwd: dir}, types.Stdio{Stdout: &out, TTY: true})
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "terminal cwd %q", dir)
		assert.Empty(t, out.String(), "nothing ran")
	}
	res, err := env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"pwd"}, Cwd: "/tmp"})
	require.NoError(t, err)
	assert.Equal(t, "/tmp\n", res.Stdout)
}
