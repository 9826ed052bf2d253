package runtime

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/mountinfo"
)

// Tests named TestRoot* need root (containerd, runc, netns, iptables). They
// fail rather than skip without it: CI runs as root.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("this test needs root (containerd, runc, network namespaces, iptables)")
	}
}

type testEnv struct {
	dir    string
	daemon *Daemon
	rt     *Runtime
	reg    *testRegistry
	ref    string // busybox image, pulled
}

// newTestEnv starts a private containerd under a temp dir, a runtime on it
// with the given subnet, and a registry holding the busybox image, which it
// pulls. Cleanup removes every instance, checks no mount is left under the
// dir, stops the daemon and removes the bridge, firewall rules and cgroups.
func newTestEnv(t testing.TB, subnet string) *testEnv {
	t.Helper()
	return newTestEnvNet(t, NetworkConfig{Subnet: subnet})
}

// newTestEnvNet is newTestEnv with a whole network configuration.
func newTestEnvNet(t testing.TB, netCfg NetworkConfig) *testEnv {
	t.Helper()
	return newTestEnvWith(t, netCfg, nil)
}

// newTestEnvWith is newTestEnvNet with set applied to the runtime's Config.
func newTestEnvWith(t testing.TB, netCfg NetworkConfig, set func(*Config)) *testEnv {
	t.Helper()
	requireRoot(t)
	ctx := context.Background()
	env := &testEnv{dir: t.TempDir()}
	env.reg = startTestRegistry(t)

	start := time.Now()
	d, err := StartDaemon(ctx, filepath.Join(env.dir, "containerd"))
	require.NoError(t, err)
	t.Logf("daemon start: %v", time.Since(start))
	env.daemon = d

	cfg := Config{
		Address:             d.Address(),
		Namespace:           "envd",
		StateDir:            filepath.Join(env.dir, "state"),
		Network:             netCfg,
		PlainHTTPRegistries: []string{env.reg.host},
		StopGrace:           3 * time.Second,
		// Every exec a runc exec, unless a test asks for agents
		// (agents_root_test.go): the same checks run both ways.
		NoAgents: true,
	}
	if set != nil {
		set(&cfg)
	}
	rt, err := New(ctx, cfg)
	if err != nil {
		_ = d.Stop(ctx)
		require.NoError(t, err)
	}
	env.rt = rt
	t.Cleanup(func() { env.cleanup(t) })

	env.ref = pushBusyboxImage(t, env.reg, "test/busybox")
	start = time.Now()
	require.NoError(t, rt.Pull(ctx, env.ref))
	t.Logf("pull: %v", time.Since(start))
	return env
}

// picked holds the subnets freeSubnet gave this process's tests, which
// run in parallel: one may not have made its bridge yet when another
// picks.
var picked struct {
	sync.Mutex
	subnets map[string]bool
}

// freeSubnet picks a random 10.X.Y.0/24 (X in 160..191) that no interface
// has an address in and no other test of this process was given, so
// concurrent tests and test processes on one machine (and nodes they
// start) do not collide.
func freeSubnet(t testing.TB) string {
	t.Helper()
	ifaces, err := net.Interfaces()
	require.NoError(t, err)
	picked.Lock()
	defer picked.Unlock()
	if picked.subnets == nil {
		picked.subnets = map[string]bool{}
	}
	for range 100 {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		cand := &net.IPNet{IP: net.IPv4(10, 160+b[0]%32, b[1], 0).To4(), Mask: net.CIDRMask(24, 32)}
		if !subnetInUse(ifaces, cand, "") && !picked.subnets[cand.String()] {
			picked.subnets[cand.String()] = true
			return cand.String()
		}
	}
	t.Fatal("no free test subnet")
	return ""
}

func (env *testEnv) cleanup(t testing.TB) {
	start := time.Now()
	defer func() { t.Logf("cleanup: %v", time.Since(start)) }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids, err := env.rt.List(ctx)
	assert.NoError(t, err)
	for _, id := range ids {
		assert.NoError(t, env.rt.Remove(ctx, id), "remove %s", id)
	}
	assert.Empty(t, mountsUnder(t, env.dir), "mounts left behind after Remove")
	assert.NoError(t, env.rt.DestroyNetwork())
	_ = env.rt.Close()
	assert.NoError(t, env.daemon.Stop(ctx))
	for _, m := range mountsUnder(t, env.dir) {
		_ = unix.Unmount(m, unix.MNT_DETACH)
	}
	cg, _ := filepath.Glob("/sys/fs/cgroup/*/envd-" + env.rt.scope[:12])
	assert.Empty(t, cg, "cgroup parents left after Remove")
	out, _ := exec.Command("iptables", "-S").Output()
	assert.NotContains(t, string(out), env.rt.net.cfg.Bridge, "iptables rules left")
	assert.NotContains(t, string(out), env.rt.net.fw.prefix, "iptables chains left")
	out, _ = exec.Command("ip6tables", "-S").Output()
	assert.NotContains(t, string(out), env.rt.net.fw.prefix, "ip6tables chains left")
	_, err = net.InterfaceByName(env.rt.net.cfg.Bridge)
	assert.Error(t, err, "bridge left")
}

// mountsUnder lists mount points at or below dir, deepest first.
func mountsUnder(t testing.TB, dir string) []string {
	mps, err := mountinfo.Under(dir)
	require.NoError(t, err)
	return mps
}

func (env *testEnv) create(t *testing.T, spec InstanceSpec) {
	t.Helper()
	if spec.Image == "" {
		spec.Image = env.ref
	}
	start := time.Now()
	require.NoError(t, env.rt.Create(context.Background(), spec))
	t.Logf("create %s: %v", spec.ID, time.Since(start))
}

// run execs args in id and returns stdout, stderr and the exit code.
func (env *testEnv) run(t *testing.T, id string, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	code, err := env.rt.Exec(ctx, id, ExecSpec{Args: args, Stdout: &stdout, Stderr: &stderr})
	require.NoError(t, err, "exec %v", args)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Logf("exec %v took %v", args, d)
	}
	return stdout.String(), stderr.String(), code
}

func upperDir(t *testing.T, rt *Runtime, id string) string {
	t.Helper()
	ms, err := rt.Mounts(context.Background(), id)
	require.NoError(t, err)
	for _, m := range ms {
		for _, o := range m.Options {
			if v, ok := strings.CutPrefix(o, "upperdir="); ok {
				return v
			}
		}
	}
	t.Fatalf("no upperdir in mounts %+v", ms)
	return ""
}

func TestRootDaemonStartReuse(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "d")

	start := time.Now()
	d, err := StartDaemon(ctx, dir)
	require.NoError(t, err)
	t.Logf("daemon start: %v", time.Since(start))
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	assert.Equal(t, filepath.Join(dir, "containerd.sock"), d.Address())
	cfg, err := os.ReadFile(filepath.Join(dir, "config.toml"))
	require.NoError(t, err)
	assert.Contains(t, string(cfg), "version = 3")
	assert.DirExists(t, filepath.Join(dir, "root"))
	assert.FileExists(t, filepath.Join(dir, "containerd.log"))

	// The daemon runs in its own session: it outlives this process.
	sid, err := unix.Getsid(d.Pid())
	require.NoError(t, err)
	assert.Equal(t, d.Pid(), sid)

	start = time.Now()
	d2, err := StartDaemon(ctx, dir)
	require.NoError(t, err)
	t.Logf("daemon reuse: %v", time.Since(start))
	assert.Equal(t, d.Pid(), d2.Pid(), "second StartDaemon must reuse the running daemon")

	require.NoError(t, d2.Stop(ctx))
	assert.True(t, processGone(d.Pid()), "daemon process still running after Stop")
	_, serving := d.serving(ctx)
	assert.False(t, serving, "daemon still serving after Stop")
}

// processGone reports whether pid no longer exists (or is a zombie).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] == "Z"
}

func TestStartDaemonRejectsLongSocketPath(t *testing.T) {
	_, err := StartDaemon(context.Background(), "/tmp/"+strings.Repeat("x", 100))
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}

func TestRootInstanceLifecycle(t *testing.T) {
	env := newTestEnv(t, freeSubnet(t))
	ctx := context.Background()
	rt := env.rt
	const id = "life"

	env.create(t, InstanceSpec{ID: id, Labels: map[string]string{"envd.generation": "1"}, Env: []string{"FOO=bar"}})
	err := rt.Create(ctx, InstanceSpec{ID: id, Image: env.ref})
	assert.ErrorIs(t, err, errdefs.ErrAlreadyExists)
	err = rt.Create(ctx, InstanceSpec{ID: "noimage", Image: env.reg.host + "/nope@sha256:" + strings.Repeat("0", 64)})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	st, err := rt.Status(ctx, id)
	require.NoError(t, err)
	assert.True(t, st.Exists)
	assert.Equal(t, "running", st.Task)
	assert.NotZero(t, st.Pid)
	assert.Equal(t, "1", st.Labels["envd.generation"])

	ids, err := rt.List(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{id}, ids)

	checkExec(t, env, id)

	t.Run("write shows in upper dir", func(t *testing.T) {
		_, _, code := env.run(t, id, "sh", "-c", "echo data > /root/f")
		require.Equal(t, 0, code)
		b, err := os.ReadFile(filepath.Join(upperDir(t, rt, id), "root", "f"))
		require.NoError(t, err)
		assert.Equal(t, "data\n", string(b))
	})

	t.Run("pause resume", func(t *testing.T) {
		require.NoError(t, rt.Pause(ctx, id))
		st, err := rt.Status(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, "paused", st.Task)
		_, err = rt.Exec(ctx, id, ExecSpec{Args: []string{"true"}})
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		require.NoError(t, rt.Resume(ctx, id))
		st, err = rt.Status(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, "running", st.Task)
		out, _, _ := env.run(t, id, "echo", "back")
		assert.Equal(t, "back\n", out)
	})

	t.Run("stop keeps container and snapshot", func(t *testing.T) {
		upper := upperDir(t, rt, id)
		start := time.Now()
		require.NoError(t, rt.Stop(ctx, id))
		t.Logf("stop: %v", time.Since(start))
		assert.Less(t, time.Since(start), 3*time.Second, "init should exit on SIGTERM, not wait for SIGKILL")
		st, err := rt.Status(ctx, id)
		require.NoError(t, err)
		assert.True(t, st.Exists)
		assert.Equal(t, "", st.Task)
		assert.FileExists(t, filepath.Join(upper, "root", "f"))
		assert.NoFileExists(t, rt.net.nsPath(id), "netns kept after Stop")
		_, err = rt.Exec(ctx, id, ExecSpec{Args: []string{"true"}})
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		require.NoError(t, rt.Stop(ctx, id), "second Stop")

		start = time.Now()
		require.NoError(t, rt.Start(ctx, id))
		t.Logf("start: %v", time.Since(start))
		out, _, _ := env.run(t, id, "cat", "/root/f")
		assert.Equal(t, "data\n", out)
		require.NoError(t, rt.Start(ctx, id), "Start of a running instance")
	})

	t.Run("remove", func(t *testing.T) {
		upper := upperDir(t, rt, id)
		require.NoError(t, rt.Remove(ctx, id))
		st, err := rt.Status(ctx, id)
		require.NoError(t, err)
		assert.False(t, st.Exists)
		_, err = rt.Client().SnapshotService(snapshotter).Stat(rt.ctx(ctx), id)
		assert.Error(t, err, "snapshot kept after Remove")
		// containerd removes snapshot directories asynchronously (GC).
		assert.Eventually(t, func() bool { _, err := os.Stat(upper); return os.IsNotExist(err) },
			10*time.Second, 100*time.Millisecond, "upper dir kept after Remove")
		assert.NoDirExists(t, rt.instanceDir(id))
		require.NoError(t, rt.Remove(ctx, id), "second Remove")
		_, err = rt.Mounts(ctx, id)
		assert.ErrorIs(t, err, errdefs.ErrNotFound)
		assert.ErrorIs(t, rt.Stop(ctx, id), errdefs.ErrNotFound)
		assert.ErrorIs(t, rt.Start(ctx, id), errdefs.ErrNotFound)
		ids, err := rt.List(ctx)
		require.NoError(t, err)
		assert.Empty(t, ids)
	})
}

func TestRootExecTTY(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, freeSubnet(t))
	env.create(t, InstanceSpec{ID: "tty"})
	var out bytes.Buffer
	code, err := env.rt.Exec(context.Background(), "tty", ExecSpec{Args: []string{"sh", "-c", "tty"}, TTY: true, Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Regexp(t, `^/dev/pts/\d+\r?\n$`, out.String())
}

func TestRootBindMount(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, freeSubnet(t))
	ws, ro := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(ro, "r"), []byte("ro\n"), 0o644))
	env.create(t, InstanceSpec{ID: "bind", Mounts: []Mount{
		{Source: ws, Destination: "/workspace"},
		{Source: ro, Destination: "/ro", ReadOnly: true},
	}})
	_, _, code := env.run(t, "bind", "sh", "-c", "echo inside > /workspace/a")
	require.Equal(t, 0, code)
	b, err := os.ReadFile(filepath.Join(ws, "a"))
	require.NoError(t, err)
	assert.Equal(t, "inside\n", string(b))

	out, _, code := env.run(t, "bind", "cat", "/ro/r")
	assert.Equal(t, 0, code)
	assert.Equal(t, "ro\n", out)
	_, _, code = env.run(t, "bind", "sh", "-c", "echo x > /ro/w")
	assert.NotEqual(t, 0, code, "read-only mount is writable")

	err = env.rt.Create(context.Background(), InstanceSpec{ID: "badmount", Image: env.ref,
		Mounts: []Mount{{Source: "relative", Destination: "/x"}}})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}

// listenTCP starts a TCP server on addr that counts accepted connections.
func listenTCP(t *testing.T, addr string) (port int, accepted *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp4", addr)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	accepted = new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port, accepted
}

func TestRootNetwork(t *testing.T) {
	t.Parallel()
	subnet := freeSubnet(t)
	env := newTestEnv(t, subnet)
	_, ipnet, _ := net.ParseCIDR(subnet)
	gw := env.rt.net.gateway.String()
	env.create(t, InstanceSpec{ID: "net1", Network: NetworkPolicy{Group: "p"}})
	env.create(t, InstanceSpec{ID: "net2", Network: NetworkPolicy{Group: "p"}})

	out, _, code := env.run(t, "net1", "ip", "-4", "-o", "addr", "show", "eth0")
	require.Equal(t, 0, code)
	f := strings.Fields(out)
	require.GreaterOrEqual(t, len(f), 4, out)
	ip1, _, err := net.ParseCIDR(f[3])
	require.NoError(t, err)
	assert.True(t, ipnet.Contains(ip1), "address %s not in %s", ip1, subnet)

	out, _, _ = env.run(t, "net1", "ip", "route")
	assert.Contains(t, out, "default via "+gw)

	hosts, _, _ := env.run(t, "net1", "cat", "/etc/hosts")
	assert.Contains(t, hosts, ip1.String()+"\tnet1")
	resolv, _, _ := env.run(t, "net1", "cat", "/etc/resolv.conf")
	assert.NotContains(t, resolv, "nameserver 127.")

	// Positive control: nc from inside can connect, to another instance on
	// the bridge.
	out, _, _ = env.run(t, "net2", "ip", "-4", "-o", "addr", "show", "eth0")
	ip2, _, err := net.ParseCIDR(strings.Fields(out)[3])
	require.NoError(t, err)
	// The listener's stdin stays open (a closed one can make busybox nc
	// hang up before it reads), and it gets time to listen under load.
	_, _, code = env.run(t, "net2", "sh", "-c", "(sleep 20 | nc -l -p 7000 >/tmp/got) >/dev/null 2>&1 & sleep 0.5")
	require.Equal(t, 0, code)
	_, _, code = env.run(t, "net1", "sh", "-c", "echo ping | nc -w 2 "+ip2.String()+" 7000")
	assert.Equal(t, 0, code, "instance cannot reach another instance")
	assert.Eventually(t, func() bool {
		out, _, _ := env.run(t, "net2", "cat", "/tmp/got")
		return out == "ping\n"
	}, 5*time.Second, 100*time.Millisecond)

	// The host reaches an instance (replies pass the INPUT rules).
	_, _, code = env.run(t, "net2", "sh", "-c", "nc -l -p 7001 -e echo pong </dev/null >/dev/null 2>&1 & sleep 0.2")
	require.Equal(t, 0, code)
	c, err := net.DialTimeout("tcp", net.JoinHostPort(ip2.String(), "7001"), 3*time.Second)
	if assert.NoError(t, err, "host cannot reach instance") {
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		b := make([]byte, 16)
		n, _ := c.Read(b)
		assert.Equal(t, "pong\n", string(b[:n]))
		c.Close()
	}

	// The host's services are unreachable: loopback ones, and ones on every
	// address through the gateway or the host's own addresses.
	loPort, loAccepted := listenTCP(t, "127.0.0.1:0")
	anyPort, anyAccepted := listenTCP(t, "0.0.0.0:0")
	targets := []string{fmt.Sprintf("127.0.0.1 %d", loPort), fmt.Sprintf("%s %d", gw, anyPort)}
	for _, a := range hostAddrs(t, ipnet) {
		targets = append(targets, fmt.Sprintf("%s %d", a, anyPort))
	}
	for _, target := range targets {
		start := time.Now()
		_, _, code := env.run(t, "net1", "sh", "-c", "nc -w 2 "+target+" </dev/null")
		assert.NotEqual(t, 0, code, "host service %s reachable from instance", target)
		t.Logf("nc %s: exit %d after %v", target, code, time.Since(start))
	}
	assert.Zero(t, loAccepted.Load())
	assert.Zero(t, anyAccepted.Load())
}

// hostAddrs returns the host's primary IPv4 address (the source address of
// its default route), if it has one outside the bridge subnet. Dialing UDP
// sends no packet.
func hostAddrs(t *testing.T, bridge *net.IPNet) []string {
	c, err := net.Dial("udp4", "203.0.113.1:9")
	if err != nil {
		t.Logf("no default route: %v", err)
		return nil
	}
	defer c.Close()
	ip := c.LocalAddr().(*net.UDPAddr).IP
	if ip.IsLoopback() || bridge.Contains(ip) {
		return nil
	}
	return []string{ip.String()}
}

func TestRootTwoDaemons(t *testing.T) {
	t.Parallel()
	a := newTestEnv(t, freeSubnet(t))
	b := newTestEnv(t, freeSubnet(t))
	ctx := context.Background()
	assert.NotEqual(t, a.rt.net.cfg.Bridge, b.rt.net.cfg.Bridge)
	assert.NotEqual(t, a.rt.net.name, b.rt.net.name)
	assert.NotEqual(t, a.rt.cgroupPath("same"), b.rt.cgroupPath("same"))

	// Same namespace, same instance ID on both.
	a.create(t, InstanceSpec{ID: "same", Hostname: "a"})
	b.create(t, InstanceSpec{ID: "same", Hostname: "b"})
	outA, _, _ := a.run(t, "same", "hostname")
	outB, _, _ := b.run(t, "same", "hostname")
	assert.Equal(t, "a\n", outA)
	assert.Equal(t, "b\n", outB)

	require.NoError(t, a.rt.Stop(ctx, "same"))
	st, err := b.rt.Status(ctx, "same")
	require.NoError(t, err)
	assert.Equal(t, "running", st.Task)
	require.NoError(t, a.rt.Remove(ctx, "same"))
	out, _, code := b.run(t, "same", "echo", "still")
	assert.Equal(t, 0, code)
	assert.Equal(t, "still\n", out)
	assert.ErrorIs(t, a.rt.Start(ctx, "same"), errdefs.ErrNotFound)
}

// checkExec is what an exec in instance id does, as a user sees it; the
// same with runc exec and through the instance's agent (agents.go).
// Expects the instance made with Env FOO=bar and hostname id.
func checkExec(t *testing.T, env *testEnv, id string) {
	ctx := context.Background()
	rt := env.rt
	t.Run("exec", func(t *testing.T) {
		start := time.Now()
		out, _, code := env.run(t, id, "echo", "hi")
		t.Logf("exec echo: %v", time.Since(start))
		assert.Equal(t, "hi\n", out)
		assert.Equal(t, 0, code)

		out, errOut, code := env.run(t, id, "sh", "-c", "echo err >&2; exit 3")
		assert.Equal(t, "", out)
		assert.Equal(t, "err\n", errOut)
		assert.Equal(t, 3, code)

		out, _, _ = env.run(t, id, "sh", "-c", "echo $FOO $(hostname) $(cat /etc/hostname)")
		assert.Equal(t, "bar "+id+" "+id+"\n", out)

		var stdout bytes.Buffer
		code, err := rt.Exec(ctx, id, ExecSpec{Args: []string{"sh", "-c", "pwd; echo $X; cat"}, Env: []string{"X=y"},
			Cwd: "/tmp", Stdin: strings.NewReader("from stdin\n"), Stdout: &stdout})
		require.NoError(t, err)
		assert.Equal(t, 0, code)
		assert.Equal(t, "/tmp\ny\nfrom stdin\n", stdout.String())

		// A command that cannot run is what a shell makes of it: 127 for
		// one not found, 126 for one not executable, the reason on stderr.
		for _, tc := range []struct {
			args   []string
			code   int
			stderr string
		}{
			{[]string{"/does/not/exist"}, 127, "/does/not/exist: no such file or directory\n"},
			{[]string{"nosuch", "-x"}, 127, "nosuch: executable file not found in $PATH\n"},
			{[]string{"/etc/passwd"}, 126, "/etc/passwd: permission denied\n"},
		} {
			stdout.Reset()
			var stderr bytes.Buffer
			code, err := rt.Exec(ctx, id, ExecSpec{Args: tc.args, Stdout: &stdout, Stderr: &stderr})
			require.NoError(t, err, "%v", tc.args)
			assert.Equal(t, tc.code, code, "%v", tc.args)
			assert.Equal(t, tc.stderr, stderr.String(), "%v", tc.args)
			assert.Empty(t, stdout.String())
		}
		_, err = rt.Exec(ctx, id, ExecSpec{Args: []string{"true"}, Cwd: "/nope"})
		assert.ErrorIs(t, err, errdefs.ErrStartFailed, "a working directory that does not exist")
		assert.ErrorContains(t, err, "/nope")

		// A background child keeps the output streams open; Exec returns
		// anyway, shortly after the shell exits.
		start = time.Now()
		out, _, code = env.run(t, id, "sh", "-c", "sleep 30 & echo started")
		assert.Equal(t, "started\n", out)
		assert.Equal(t, 0, code)
		assert.Less(t, time.Since(start), 5*time.Second)
	})

	t.Run("exec cancel kills", func(t *testing.T) {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		start := time.Now()
		_, err := rt.Exec(cctx, id, ExecSpec{Args: []string{"sleep", "60"}})
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Less(t, time.Since(start), 10*time.Second)
		out, _, _ := env.run(t, id, "sh", "-c", "ps | grep -c '[s]leep 60' || true")
		assert.Equal(t, "0\n", out, "canceled exec still running")
	})

}
