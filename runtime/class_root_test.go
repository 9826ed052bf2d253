package runtime

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// requireGVisor fails (CI runs as root after scripts/setup.sh, which
// installs runsc) unless runsc is installed where the runtime looks.
func requireGVisor(t *testing.T) {
	t.Helper()
	requireRoot(t)
	runsc := filepath.Join(gvisorDir(""), "runsc")
	if !isExecutable(runsc) {
		t.Fatalf("runsc is not installed at %s (scripts/setup.sh --tests installs it)", runsc)
	}
}

// newGVisorEnv is a test runtime whose default class is gVisor, with exec
// agents on.
func newGVisorEnv(t *testing.T, set func(*Config)) *testEnv {
	requireGVisor(t)
	bin := buildAgent(t)
	return newTestEnvWith(t, NetworkConfig{Subnet: freeSubnet(t)}, func(c *Config) {
		c.NoAgents, c.AgentBinary, c.DefaultClass = false, bin, ClassGVisor
		if set != nil {
			set(c)
		}
	})
}

// hostRelease is the node's kernel release (uname -r).
func hostRelease(t *testing.T) string {
	var uts unix.Utsname
	require.NoError(t, unix.Uname(&uts))
	return unix.ByteSliceToString(uts.Release[:])
}

// One node, both classes: an instance runs on the class its spec names
// (else the node default), keeps it across Stop/Start, and everything the
// runtime does for an instance works on gVisor: exec (through the agent
// and runc-style), writes and deletions in the writable layer as the save
// path reads it (whiteouts), volumes, pause, stop and start with a new
// network attachment each time (runsc strips the namespace's addresses),
// and the instance's files from the node through RootPid.
func TestRootGVisorInstance(t *testing.T) {
	env := newTestEnvWith(t, NetworkConfig{Subnet: freeSubnet(t)}, func(c *Config) {
		requireGVisor(t)
		c.NoAgents, c.AgentBinary = false, buildAgent(t)
	})
	ctx := context.Background()
	rt := env.rt
	assert.Equal(t, ClassRunc, rt.DefaultClass())
	assert.Equal(t, []Class{ClassRunc, ClassGVisor}, rt.Classes(ctx))

	vol := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(vol, "in-volume"), []byte("from the node\n"), 0o644))
	env.create(t, InstanceSpec{ID: "g", Class: ClassGVisor, Mounts: []Mount{{Source: vol, Destination: "/workspace", Owned: true}}})
	env.create(t, InstanceSpec{ID: "r"})

	st, err := rt.Status(ctx, "g")
	require.NoError(t, err)
	assert.Equal(t, ClassGVisor, st.Class)
	st, err = rt.Status(ctx, "r")
	require.NoError(t, err)
	assert.Equal(t, ClassRunc, st.Class)

	release := hostRelease(t)
	out, _, _ := env.run(t, "r", "uname", "-r")
	assert.Equal(t, release, strings.TrimSpace(out), "runc shares the node's kernel")
	out, _, _ = env.run(t, "g", "uname", "-r")
	assert.NotEqual(t, release, strings.TrimSpace(out), "gVisor has a kernel of its own")
	assert.Contains(t, out, "gvisor")

	t.Run("exec through the agent and without it", func(t *testing.T) {
		parent := parentOf(t, env, "g")
		assert.Contains(t, parent, agentBinDest, "a command without a terminal runs under the agent")
		var o strings.Builder
		code, err := rt.Exec(ctx, "g", ExecSpec{Args: []string{"sh", "-c", "echo $FOO; exit 7"}, Env: []string{"FOO=bar"}, Stdout: &o, TTY: true})
		require.NoError(t, err)
		assert.Equal(t, 7, code)
		assert.Contains(t, o.String(), "bar")
	})

	t.Run("writes and deletions reach the upper dir", func(t *testing.T) {
		_, errOut, code := env.run(t, "g", "sh", "-c", "echo data > /root/f && rm /bin/vi && mkdir -p /opt/d && echo x > /opt/d/x && echo t > /tmp/t")
		require.Equal(t, 0, code, errOut)
		upper := upperDir(t, rt, "g")
		b, err := os.ReadFile(filepath.Join(upper, "root", "f"))
		require.NoError(t, err)
		assert.Equal(t, "data\n", string(b))
		// /tmp too, as on runc (runsc would put a tmpfs of its own there).
		b, err = os.ReadFile(filepath.Join(upper, "tmp", "t"))
		require.NoError(t, err, "/tmp is the writable layer's")
		assert.Equal(t, "t\n", string(b))
		var wh unix.Stat_t
		require.NoError(t, unix.Lstat(filepath.Join(upper, "bin", "vi"), &wh), "the deletion's whiteout")
		assert.Equal(t, uint32(unix.S_IFCHR), wh.Mode&unix.S_IFMT)
		assert.Zero(t, wh.Rdev, "an overlay whiteout is a 0,0 character device")
	})

	t.Run("volumes", func(t *testing.T) {
		out, errOut, code := env.run(t, "g", "sh", "-c", "cat /workspace/in-volume && echo from-instance > /workspace/out")
		require.Equal(t, 0, code, errOut)
		assert.Equal(t, "from the node\n", out)
		b, err := os.ReadFile(filepath.Join(vol, "out"))
		require.NoError(t, err)
		assert.Equal(t, "from-instance\n", string(b))
	})

	t.Run("files from the node through RootPid", func(t *testing.T) {
		st, err := rt.Status(ctx, "g")
		require.NoError(t, err)
		require.NotZero(t, st.RootPid)
		assert.NotEqual(t, st.Pid, st.RootPid, "the sandbox process's root is runsc's, not the instance's")
		root := fmt.Sprintf("/proc/%d/root", st.RootPid)
		b, err := os.ReadFile(filepath.Join(root, "root", "f"))
		require.NoError(t, err)
		assert.Equal(t, "data\n", string(b))
		b, err = os.ReadFile(filepath.Join(root, "workspace", "out"))
		require.NoError(t, err)
		assert.Equal(t, "from-instance\n", string(b))
		_, err = os.Stat(filepath.Join(root, "bin", "vi"))
		assert.ErrorIs(t, err, os.ErrNotExist, "a file deleted inside is gone from the view")
		// A file made from the node is seen inside, also after the
		// instance looked for it and found nothing, and a change to a
		// file the instance has read.
		_, _, code := env.run(t, "g", "cat", "/tmp/from-node", "/root/f")
		require.NotEqual(t, 0, code)
		require.NoError(t, os.WriteFile(filepath.Join(root, "tmp", "from-node"), []byte("hello\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(root, "root", "f"), []byte("changed from the node\n"), 0o644))
		out, errOut, _ := env.run(t, "g", "cat", "/tmp/from-node", "/root/f")
		assert.Equal(t, "hello\nchanged from the node\n", out, errOut)
		require.NoError(t, os.WriteFile(filepath.Join(root, "root", "f"), []byte("data\n"), 0o644))
		st, err = rt.Status(ctx, "r")
		require.NoError(t, err)
		assert.Equal(t, st.Pid, st.RootPid, "runc: the init")
	})

	t.Run("pause and resume", func(t *testing.T) {
		require.NoError(t, rt.Pause(ctx, "g"))
		st, err := rt.Status(ctx, "g")
		require.NoError(t, err)
		assert.Equal(t, "paused", st.Task)
		_, err = rt.Exec(ctx, "g", ExecSpec{Args: []string{"true"}})
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		require.NoError(t, rt.Resume(ctx, "g"))
		out, _, _ := env.run(t, "g", "echo", "back")
		assert.Equal(t, "back\n", out)
	})

	t.Run("stop and start: layer kept, network set up again", func(t *testing.T) {
		for round := range 2 {
			require.NoError(t, rt.Stop(ctx, "g"), "round %d", round)
			st, err := rt.Status(ctx, "g")
			require.NoError(t, err)
			assert.Equal(t, "", st.Task)
			require.NoError(t, rt.Start(ctx, "g"), "round %d", round)
			st, err = rt.Status(ctx, "g")
			require.NoError(t, err)
			assert.Equal(t, ClassGVisor, st.Class, "the class holds across starts")
			out, _, _ := env.run(t, "g", "cat", "/root/f")
			assert.Equal(t, "data\n", out)
			out, _, _ = env.run(t, "g", "ip", "-4", "addr", "show", "eth0")
			assert.Contains(t, out, "inet "+st.Address+"/", "the instance has its new address inside")
			out, _, _ = env.run(t, "g", "uname", "-r")
			assert.NotEqual(t, release, strings.TrimSpace(out))
			env.listenIn(t, "g", 7000)
			c, err := net.DialTimeout("tcp", net.JoinHostPort(st.Address, "7000"), 5*time.Second)
			if assert.NoError(t, err, "the node reaches the instance's port after start %d", round) {
				c.Close()
			}
		}
	})

	t.Run("remove", func(t *testing.T) {
		require.NoError(t, rt.Remove(ctx, "g"))
		st, err := rt.Status(ctx, "g")
		require.NoError(t, err)
		assert.False(t, st.Exists)
		// The cleanup checks no mount (runsc's null-netns included) is left.
	})
}

// A class is refused with a stable error, and nothing is made, when the
// node cannot run it or the request asks what the class does not do.
func TestRootRuntimeClassRefused(t *testing.T) {
	none := t.TempDir() // no runsc in it
	env := newTestEnvWith(t, NetworkConfig{Subnet: freeSubnet(t)}, func(c *Config) { c.GVisorDir = none })
	ctx := context.Background()
	rt := env.rt

	assert.Equal(t, []Class{ClassRunc}, rt.Classes(ctx))
	err := rt.Create(ctx, InstanceSpec{ID: "g", Image: env.ref, Class: ClassGVisor})
	require.ErrorIs(t, err, ErrClassUnavailable)
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	assert.Contains(t, err.Error(), "runsc not installed")
	err = rt.Create(ctx, InstanceSpec{ID: "k", Image: env.ref, Class: "kata"})
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	ids, err := rt.List(ctx)
	require.NoError(t, err)
	assert.Empty(t, ids, "a refused Create makes nothing")
	assert.NoDirExists(t, rt.instanceDir("g"))

	// A node whose default is a class it cannot run does not start.
	_, err = New(ctx, Config{Address: env.daemon.Address(), StateDir: filepath.Join(t.TempDir(), "state"),
		Network: NetworkConfig{Subnet: freeSubnet(t)}, DefaultClass: ClassGVisor, GVisorDir: none, NoAgents: true})
	require.ErrorIs(t, err, ErrClassUnavailable)
	_, err = New(ctx, Config{Address: env.daemon.Address(), StateDir: filepath.Join(t.TempDir(), "state"),
		Network: NetworkConfig{Subnet: freeSubnet(t)}, DefaultClass: "kata", NoAgents: true})
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)

	t.Run("user namespaces", func(t *testing.T) {
		requireGVisor(t)
		env := newTestEnvWith(t, NetworkConfig{Subnet: freeSubnet(t)}, func(c *Config) { c.UserNS = true })
		err := env.rt.Create(ctx, InstanceSpec{ID: "u", Image: env.ref, Class: ClassGVisor})
		require.ErrorIs(t, err, ErrNotOnClass)
		require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		ids, err := env.rt.List(ctx)
		require.NoError(t, err)
		assert.Empty(t, ids)
		// A build's container (HostIDs) runs on gVisor on such a node.
		env.create(t, InstanceSpec{ID: "b", Class: ClassGVisor, HostIDs: true})
		out, _, _ := env.run(t, "b", "uname", "-r")
		assert.Contains(t, out, "gvisor")
	})
}

// Limits on gVisor: the node's cgroup holds the whole sandbox. Memory,
// CPU and pids are applied there; a memory hog or a fork bomb past them
// stops that instance (exit 137, OOMKilled for memory) and nothing else;
// the writable layer's disk limit holds inside as on runc.
func TestRootGVisorLimits(t *testing.T) {
	env := newGVisorEnv(t, nil)
	ctx := context.Background()
	rt := env.rt
	limits := Limits{MemoryBytes: 96 << 20, Pids: 32, CPUWeight: 100, CPUQuota: 0.5, DiskBytes: 64 << 20}
	env.create(t, InstanceSpec{ID: "lim", Limits: limits})
	env.create(t, InstanceSpec{ID: "bomb", Limits: Limits{Pids: 16}})
	env.create(t, InstanceSpec{ID: "neighbour"})

	host := func(id, ctrl, file string) string {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctrl, rt.cgroupPath(id), file))
		require.NoError(t, err)
		return strings.TrimSpace(string(b))
	}
	if rt.cgroups.unified {
		t.Fatal("this test reads cgroup v1 files; the host has cgroup v2 only")
	}
	assert.Equal(t, strconv.FormatInt(96<<20, 10), host("lim", "memory", "memory.limit_in_bytes"))
	assert.Equal(t, strconv.FormatInt(gvisorHostPids(32), 10), host("lim", "pids", "pids.max"))
	assert.Equal(t, "50000", host("lim", "cpu", "cpu.cfs_quota_us"))
	// The sentry is told its memory, so the instance sees its limit.
	out, _, _ := env.run(t, "lim", "sh", "-c", "grep MemTotal /proc/meminfo")
	assert.Contains(t, out, strconv.Itoa(96<<10)+" kB")

	t.Run("disk", func(t *testing.T) {
		if err := rt.DiskLimitErr(); err != nil {
			t.Fatalf("disk limits unavailable here: %v", err)
		}
		_, errOut, code := env.run(t, "lim", "sh", "-c", "dd if=/dev/zero of=/root/big bs=1M count=200")
		assert.NotEqual(t, 0, code)
		assert.Contains(t, errOut, "No space left")
		out, _, code := env.run(t, "lim", "echo", "alive")
		assert.Equal(t, 0, code)
		assert.Equal(t, "alive\n", out)
	})

	t.Run("fork bomb", func(t *testing.T) {
		ectx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		_, _ = rt.Exec(ectx, "bomb", ExecSpec{Args: []string{"sh", "-c", "for i in $(seq 300); do sleep 30 & done; wait"}})
		require.Eventually(t, func() bool {
			st, err := rt.Status(ctx, "bomb")
			return err == nil && st.Task == "stopped"
		}, time.Minute, 200*time.Millisecond, "the bomb's sandbox stops at its host pids limit")
		out, _, code := env.run(t, "neighbour", "echo", "ok")
		assert.Equal(t, 0, code)
		assert.Equal(t, "ok\n", out)
	})

	t.Run("memory hog", func(t *testing.T) {
		before := time.Now()
		_, _, code := env.run(t, "lim", "dd", "if=/dev/zero", "of=/dev/null", "bs=300M", "count=1")
		assert.Equal(t, 137, code)
		require.Eventually(t, func() bool {
			st, err := rt.Status(ctx, "lim")
			return err == nil && st.Task == "stopped" && st.OOMKilled
		}, 30*time.Second, 100*time.Millisecond, "the instance stops, OOMKilled")
		assert.True(t, rt.OOMKilledSince("lim", before))
		out, _, _ := env.run(t, "neighbour", "echo", "ok")
		assert.Equal(t, "ok\n", out)
	})
}

// buildProbe builds e2e's probe program (what a hostile tenant tries)
// into a directory that instances mount read-only.
func buildProbe(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-ldflags", "-s -w", "-o", filepath.Join(dir, "probe"), "../e2e/testdata/probe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build probe: %s", out)
	return dir
}

// The wall: inside a gVisor instance the kernel, its log and /proc are
// the sandbox's; the node's processes, devices and other instances are
// not visible; the probes that hold on runc hold; the network rules are
// the node's as for runc.
func TestRootGVisorWall(t *testing.T) {
	svc := newServiceNetns(t)
	env := newGVisorEnv(t, nil)
	ctx := context.Background()
	probe := buildProbe(t)
	mounts := []Mount{{Source: probe, Destination: "/probe", ReadOnly: true}}
	env.create(t, InstanceSpec{ID: "w", Mounts: mounts, Network: NetworkPolicy{Group: "A"}})
	env.create(t, InstanceSpec{ID: "same", Network: NetworkPolicy{Group: "A"}})
	env.create(t, InstanceSpec{ID: "other", Network: NetworkPolicy{Group: "B"}})
	svcAccepted := svc.listen(t, svc.addr+":8080")

	t.Run("kernel", func(t *testing.T) {
		out, _, _ := env.run(t, "w", "sh", "-c", "uname -r; cat /proc/version")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 2, out)
		assert.NotEqual(t, hostRelease(t), lines[0])
		hostVersion, err := os.ReadFile("/proc/version")
		require.NoError(t, err)
		assert.NotEqual(t, strings.TrimSpace(string(hostVersion)), lines[1])
		// The kernel log: syslog(2) is refused by the seccomp profile as
		// on runc; /dev/kmsg does not exist. Whatever is read is not the
		// node's log.
		out, _, code := env.run(t, "w", "sh", "-c", "dmesg 2>&1; cat /dev/kmsg 2>&1")
		assert.NotEqual(t, 0, code, out)
		assert.NotContains(t, out, hostRelease(t), "the node's kernel log")
	})

	t.Run("proc is the sandbox's", func(t *testing.T) {
		// Only the instance's own processes: its init, agent and command.
		out, _, _ := env.run(t, "w", "sh", "-c", "ls -d /proc/[0-9]* | wc -l; cat /proc/1/cmdline | tr '\\0' ' '")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 2, out)
		n, err := strconv.Atoi(strings.TrimSpace(lines[0]))
		require.NoError(t, err)
		assert.Less(t, n, 10, "processes visible inside")
		assert.Contains(t, lines[1], "trap", "pid 1 is the instance's init")
		// The test process's pid on the node is not a process inside.
		_, _, code := env.run(t, "w", "test", "-e", fmt.Sprintf("/proc/%d/cmdline", os.Getpid()))
		if os.Getpid() > 20 {
			assert.NotEqual(t, 0, code)
		}
		out, _, _ = env.run(t, "w", "sh", "-c", "cat /proc/mounts")
		assert.NotContains(t, out, env.dir, "no node path in the instance's mounts")
		assert.NotContains(t, out, "overlay ", "the node's overlay mount is not visible")
	})

	t.Run("devices", func(t *testing.T) {
		out, _, _ := env.run(t, "w", "ls", "/dev")
		for _, dev := range []string{"sda", "vda", "loop0", "kvm", "mem", "kmsg", "nvme0"} {
			assert.NotContains(t, strings.Fields(out), dev)
		}
		_, _, code := env.run(t, "w", "sh", "-c", "cat /sys/block/*/dev")
		assert.NotEqual(t, 0, code, "no block device of the node under /sys")
	})

	t.Run("probes", func(t *testing.T) {
		for _, p := range []string{"unshare-user", "keyctl", "raw-socket", "mknod-block"} {
			out, errOut, code := env.run(t, "w", "/probe/probe", p)
			assert.Equal(t, 3, code, "%s: %s%s", p, out, errOut)
			assert.Contains(t, out, "refused:", p)
		}
		_, _, code := env.run(t, "w", "ping", "-c1", "-W1", "127.0.0.1")
		assert.NotEqual(t, 0, code, "raw sockets are off")
	})

	t.Run("other instances", func(t *testing.T) {
		for _, id := range []string{"same", "other"} {
			env.listenIn(t, id, 7000)
		}
		out, _, _ := env.run(t, "w", "ps")
		assert.NotContains(t, out, "nc -ll", "another instance's processes are not visible")
		assert.True(t, env.reach(t, "w", env.addr(t, "same"), 7000), "same group connects")
		assert.False(t, env.reach(t, "w", env.addr(t, "other"), 7000), "another group does not")
	})

	t.Run("node and private ranges", func(t *testing.T) {
		anyPort, anyAccepted := listenTCP(t, "0.0.0.0:0")
		assert.False(t, env.reach(t, "w", env.rt.net.gateway.String(), anyPort), "the node's services through the gateway")
		assert.False(t, env.reach(t, "w", svc.addr, 8080), "a private range under open egress")
		assert.Zero(t, anyAccepted.Load())
		assert.Zero(t, svcAccepted.Load())
	})
	_ = ctx
}

// FIFOs made inside a gVisor instance live in the sandbox's memory (the
// gofer refuses mknod of a FIFO on the node): SandboxFIFOs names them,
// but not the instance's other mounts' or a FIFO the node sees too; a runc
// instance's FIFOs are files of its layer and are not named.
func TestRootGVisorSandboxFIFOs(t *testing.T) {
	env := newGVisorEnv(t, nil)
	ctx := context.Background()
	vol := t.TempDir()
	require.NoError(t, unix.Mkfifo(filepath.Join(vol, "node-fifo"), 0o644))
	env.create(t, InstanceSpec{ID: "fifos", Mounts: []Mount{{Source: vol, Destination: "/vol"}}})
	env.create(t, InstanceSpec{ID: "runc-fifos", Class: ClassRunc})

	none, err := env.rt.SandboxFIFOs(ctx, "fifos")
	require.NoError(t, err)
	assert.Empty(t, none)

	_, errOut, code := env.run(t, "fifos", "sh", "-c", "mkdir -p /data/deep && mkfifo /data/f1 /data/deep/f2 /vol/in-volume && [ -p /data/f1 ]")
	require.Equal(t, 0, code, errOut)
	began := time.Now()
	got, err := env.rt.SandboxFIFOs(ctx, "fifos")
	require.NoError(t, err)
	t.Logf("listing the FIFOs of a busybox rootfs took %s (an exec and a walk in the sandbox)", time.Since(began))
	assert.ElementsMatch(t, []string{"/data/f1", "/data/deep/f2"}, got)
	upper := upperDir(t, env.rt, "fifos")
	_, err = os.Lstat(filepath.Join(upper, "data/f1"))
	assert.ErrorIs(t, err, os.ErrNotExist, "the FIFO is not in the writable layer")

	_, errOut, code = env.run(t, "runc-fifos", "sh", "-c", "mkfifo /f3")
	require.Equal(t, 0, code, errOut)
	got, err = env.rt.SandboxFIFOs(ctx, "runc-fifos")
	require.NoError(t, err)
	assert.Nil(t, got, "runc's FIFOs are in its layer")
}
