package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// capEff parses the CapEff mask of a /proc/PID/status text.
func capEff(t *testing.T, status string) uint64 {
	t.Helper()
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no CapEff in %q", status)
	return 0
}

const (
	capChown  = 0
	capSetuid = 7
	capNetRaw = 13
	capMknod  = 27
)

func TestRootHardenedInstance(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, freeSubnet(t))
	limits := Limits{MemoryBytes: 64 << 20, Pids: 64, CPUWeight: 100, CPUQuota: 0.5, IOWeight: 200}
	env.create(t, InstanceSpec{ID: "hard", Limits: limits})

	status, _, code := env.run(t, "hard", "cat", "/proc/self/status")
	require.Equal(t, 0, code)
	assert.Contains(t, status, "Seccomp:\t2")
	assert.Contains(t, status, "NoNewPrivs:\t1")
	caps := capEff(t, status)
	assert.Zero(t, caps&(1<<capNetRaw), "CAP_NET_RAW in %x", caps)
	assert.Zero(t, caps&(1<<capMknod), "CAP_MKNOD in %x", caps)
	assert.NotZero(t, caps&(1<<capChown), "CAP_CHOWN (apt, dpkg) missing in %x", caps)
	assert.NotZero(t, caps&(1<<capSetuid), "CAP_SETUID (apt's _apt sandbox, su) missing in %x", caps)

	_, stderr, code := env.run(t, "hard", "mknod", "/tmp/sda", "b", "8", "0")
	assert.NotEqual(t, 0, code, "mknod of a block device succeeded")
	assert.Contains(t, stderr, "not permitted")

	// Root still does what package installs do: chown, setuid to a user.
	_, stderr, code = env.run(t, "hard", "sh", "-c", "touch /tmp/f && chown 100:100 /tmp/f && su -s /bin/sh nobody -c id")
	assert.Equal(t, 0, code, stderr)

	// The cgroup namespace: the instance's own cgroup is its root.
	cg, _, _ := env.run(t, "hard", "cat", "/proc/self/cgroup")
	for _, line := range strings.Split(strings.TrimSpace(cg), "\n") {
		assert.True(t, strings.HasSuffix(line, ":/"), "cgroup line %q is not the namespace root", line)
	}
	// Masked and read-only /proc paths.
	masked, merr, _ := env.run(t, "hard", "sh", "-c", "wc -c < /proc/timer_list")
	assert.Equal(t, "0", strings.TrimSpace(masked), merr)
	_, _, code = env.run(t, "hard", "sh", "-c", "echo 1 > /proc/sys/vm/drop_caches")
	assert.NotEqual(t, 0, code, "/proc/sys is writable")

	// The limits, as the kernel holds them (cgroup v1 files on this host).
	host := func(ctrl, file string) string {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctrl, env.rt.cgroupPath("hard"), file))
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	if env.rt.cgroups.unified {
		t.Fatal("this test reads cgroup v1 files; the host has cgroup v2 only")
	}
	assert.Equal(t, strconv.FormatInt(64<<20, 10), host("memory", "memory.limit_in_bytes"))
	assert.Equal(t, "64", host("pids", "pids.max"))
	assert.Equal(t, strconv.FormatUint(cpuShares(100), 10), host("cpu", "cpu.shares"))
	assert.Equal(t, "50000", host("cpu", "cpu.cfs_quota_us"))
	// Inside, through the cgroup namespace, the tenant sees the same.
	in, inErr, _ := env.run(t, "hard", "cat", "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/pids/pids.max")
	assert.Equal(t, strconv.FormatInt(64<<20, 10)+"\n64\n", in, inErr)
	oom, _, _ := env.run(t, "hard", "cat", "/proc/self/oom_score_adj")
	assert.Equal(t, strconv.Itoa(instanceOOMScoreAdj), strings.TrimSpace(oom))

	// A fork bomb stops at the pids limit; the instance lives on.
	out, _, _ := env.run(t, "hard", "sh", "-c", "for i in $(seq 200); do sleep 2 & done 2>&1; echo started")
	assert.Contains(t, out, "can't fork")
	require.Eventually(t, func() bool {
		_, err := env.rt.Exec(context.Background(), "hard", ExecSpec{Args: []string{"true"}})
		return err == nil
	}, 10*time.Second, 200*time.Millisecond, "the instance takes execs again once the bomb's processes exit")

	// A memory hog is killed by the OOM killer: exit 137, the OOM seen.
	before := time.Now()
	_, _, code = env.run(t, "hard", "dd", "if=/dev/zero", "of=/dev/null", "bs=200M", "count=1")
	assert.Equal(t, 137, code)
	require.Eventually(t, func() bool { return env.rt.OOMKilledSince("hard", before) }, 5*time.Second, 50*time.Millisecond)
	st, err := env.rt.Status(context.Background(), "hard")
	require.NoError(t, err)
	assert.Equal(t, "running", st.Task, "the init survives an exec's OOM kill")

	// The init itself killed by the OOM killer: its task stops, OOMKilled.
	// The init ranks first once its oom_score_adj is the maximum and no
	// process holds more than a third of the limit: five dd processes
	// hold 20 MiB each (blocked writing to a pipe nobody reads).
	_, _, _ = env.run(t, "hard", "sh", "-c", "echo 1000 > /proc/1/oom_score_adj")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, _ = env.rt.Exec(ctx, "hard", ExecSpec{Args: []string{"sh", "-c",
		"for i in 1 2 3 4 5; do (dd if=/dev/zero bs=20M count=1 | sleep 30) & sleep 0.3; done; wait"}})
	require.Eventually(t, func() bool {
		st, err = env.rt.Status(context.Background(), "hard")
		return err == nil && st.Task == "stopped"
	}, 10*time.Second, 100*time.Millisecond)
	assert.True(t, st.OOMKilled, "status %+v", st)
	assert.Equal(t, uint32(137), st.ExitCode)
}

func TestRootPrivilegeEscalationAllowed(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, freeSubnet(t))
	env.create(t, InstanceSpec{ID: "nnp", AllowPrivilegeEscalation: true})
	status, _, _ := env.run(t, "nnp", "cat", "/proc/self/status")
	assert.Contains(t, status, "NoNewPrivs:\t0")
	assert.Contains(t, status, "Seccomp:\t2")
}

func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    Limits
		ok   bool
	}{
		{"none", Limits{}, true},
		{"all", Limits{MemoryBytes: 1 << 30, Pids: 512, CPUWeight: 100, CPUQuota: 1.5, IOWeight: 100, DiskBytes: 1 << 30}, true},
		{"tiny memory", Limits{MemoryBytes: 1024}, false},
		{"negative pids", Limits{Pids: -1}, false},
		{"weight too big", Limits{CPUWeight: 10001}, false},
		{"negative quota", Limits{CPUQuota: -1}, false},
		{"io weight too small", Limits{IOWeight: 5}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.Validate()
			if tc.ok {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			}
		})
	}
}

func TestCPUShares(t *testing.T) {
	assert.Equal(t, uint64(2), cpuShares(1))
	assert.Equal(t, uint64(262144), cpuShares(10000))
	assert.Equal(t, uint64(2597), cpuShares(100))
}
