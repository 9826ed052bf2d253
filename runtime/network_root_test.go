package runtime

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/netns"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serviceNetns is a network namespace the test makes to stand for a
// private service: a veth pair, the host end 10.X.Y.1/30, the namespace end
// 10.X.Y.2/30 plus the extra addresses given, routed from the host. Its
// listeners are Go listeners created inside it.
type serviceNetns struct {
	name     string
	addr     string // 10.X.Y.2
	hostAddr string // 10.X.Y.1, the host's end
	path     string
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	require.NoError(t, err, "%v: %s", args, out)
}

func newServiceNetns(t *testing.T, extra ...string) *serviceNetns {
	t.Helper()
	ifaces, err := net.Interfaces()
	require.NoError(t, err)
	var base net.IP
	picked.Lock()
	if picked.subnets == nil {
		picked.subnets = map[string]bool{}
	}
	for range 100 {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		cand := &net.IPNet{IP: net.IPv4(10, 224+b[0]%16, b[1], 0).To4(), Mask: net.CIDRMask(24, 32)}
		if !subnetInUse(ifaces, cand, "") && !picked.subnets[cand.String()] {
			picked.subnets[cand.String()] = true // tests run in parallel (freeSubnet)
			base = cand.IP
			break
		}
	}
	picked.Unlock()
	require.NotNil(t, base, "no free service subnet")
	tag := fmt.Sprintf("%02x%02x", base[1], base[2])
	s := &serviceNetns{name: "envdtest-" + tag, path: "/run/netns/envdtest-" + tag}
	host, inner := "vsh"+tag, "vsn"+tag
	hostIP := fmt.Sprintf("10.%d.%d.1", base[1], base[2])
	s.addr = fmt.Sprintf("10.%d.%d.2", base[1], base[2])
	s.hostAddr = hostIP
	sh(t, "ip", "netns", "add", s.name)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", host).Run()
		_ = exec.Command("ip", "netns", "del", s.name).Run()
	})
	sh(t, "ip", "link", "add", host, "type", "veth", "peer", "name", inner)
	sh(t, "ip", "link", "set", inner, "netns", s.name)
	sh(t, "ip", "addr", "add", hostIP+"/30", "dev", host)
	sh(t, "ip", "link", "set", host, "up")
	sh(t, "ip", "-n", s.name, "addr", "add", s.addr+"/30", "dev", inner)
	for _, a := range extra {
		sh(t, "ip", "-n", s.name, "addr", "add", a+"/32", "dev", inner)
		sh(t, "ip", "route", "add", a+"/32", "via", s.addr)
	}
	sh(t, "ip", "-n", s.name, "link", "set", inner, "up")
	sh(t, "ip", "-n", s.name, "link", "set", "lo", "up")
	sh(t, "ip", "-n", s.name, "route", "add", "default", "via", hostIP)
	return s
}

// listen starts a TCP listener inside the namespace on addr and counts
// accepted connections.
func (s *serviceNetns) listen(t *testing.T, addr string) *atomic.Int32 {
	t.Helper()
	ln, err := netns.Listen(s.path, "tcp4", addr)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	accepted := new(atomic.Int32)
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
	return accepted
}

// reach reports whether instance id can open a TCP connection to ip:port.
func (env *testEnv) reach(t *testing.T, id, ip string, port int) bool {
	t.Helper()
	start := time.Now()
	_, _, code := env.run(t, id, "sh", "-c", fmt.Sprintf("nc -w 3 %s %d </dev/null", ip, port))
	t.Logf("%s -> %s:%d: exit %d after %v", id, ip, port, code, time.Since(start).Round(time.Millisecond))
	return code == 0
}

func (env *testEnv) addr(t *testing.T, id string) string {
	t.Helper()
	st, err := env.rt.Status(context.Background(), id)
	require.NoError(t, err)
	require.NotEmpty(t, st.Address)
	return st.Address
}

// listenIn starts `nc -ll` on port inside instance id and returns once it
// accepts a connection from inside the instance (a fixed 0.3 s was too
// short under load: the node's dial was refused). Whether others reach the
// port is what the callers test.
func (env *testEnv) listenIn(t *testing.T, id string, port int) {
	t.Helper()
	script := fmt.Sprintf(`(nc -ll -p %[1]d -e true </dev/null >/dev/null 2>&1 &)
i=0
until nc 127.0.0.1 %[1]d </dev/null >/dev/null 2>&1; do
  i=$((i+1)); [ $i -lt 600 ] || { echo "nothing listens on %[1]d after 30 s" >&2; exit 1; }
  sleep 0.05
done`, port)
	_, stderr, code := env.run(t, id, "sh", "-c", script)
	require.Equal(t, 0, code, stderr)
}

func TestRootNetworkIsolation(t *testing.T) {
	t.Parallel()
	svc := newServiceNetns(t, "169.254.77.2")
	// A second service stands for a cluster endpoint (say PostgreSQL): in
	// the node's Deny list by host:port.
	cluster := newServiceNetns(t)
	env := newTestEnvNet(t, NetworkConfig{Subnet: freeSubnet(t), Deny: []string{cluster.addr + ":5432"}})
	ctx := context.Background()
	svcAccepted := svc.listen(t, svc.addr+":8080")
	llAccepted := svc.listen(t, "169.254.77.2:8080")
	clusterAccepted := cluster.listen(t, cluster.addr+":5432")
	clusterOther := cluster.listen(t, cluster.addr+":5433")

	allowSvc, err := ParseEgress("allow:" + svc.addr + ",169.254.77.2," + cluster.addr)
	require.NoError(t, err)
	none, _ := ParseEgress("none")
	env.create(t, InstanceSpec{ID: "a1", Network: NetworkPolicy{Group: "A"}})
	env.create(t, InstanceSpec{ID: "a2", Network: NetworkPolicy{Group: "A"}})
	env.create(t, InstanceSpec{ID: "b1", Network: NetworkPolicy{Group: "B", Egress: allowSvc}})
	env.create(t, InstanceSpec{ID: "c1", Network: NetworkPolicy{Group: "C", Isolated: true, Egress: none}})
	env.create(t, InstanceSpec{ID: "c2", Network: NetworkPolicy{Group: "C", Isolated: true, Egress: none}})
	for _, id := range []string{"a1", "a2", "b1", "c1", "c2"} {
		env.listenIn(t, id, 7000)
	}
	a1, a2, b1, c1, c2 := env.addr(t, "a1"), env.addr(t, "a2"), env.addr(t, "b1"), env.addr(t, "c1"), env.addr(t, "c2")

	t.Run("same project connects", func(t *testing.T) {
		assert.True(t, env.reach(t, "a1", a2, 7000))
		assert.True(t, env.reach(t, "a2", a1, 7000))
	})
	t.Run("other projects do not", func(t *testing.T) {
		assert.False(t, env.reach(t, "a1", b1, 7000))
		assert.False(t, env.reach(t, "b1", a1, 7000))
		assert.False(t, env.reach(t, "c1", a1, 7000))
		assert.False(t, env.reach(t, "a1", c1, 7000))
	})
	t.Run("isolated project's instances do not", func(t *testing.T) {
		assert.False(t, env.reach(t, "c1", c2, 7000))
		assert.False(t, env.reach(t, "c2", c1, 7000))
	})
	t.Run("the host does", func(t *testing.T) {
		for _, ip := range []string{a1, b1, c1} {
			c, err := net.DialTimeout("tcp", net.JoinHostPort(ip, "7000"), 3*time.Second)
			if assert.NoError(t, err, "host -> %s", ip) {
				c.Close()
			}
		}
	})
	t.Run("open egress drops private ranges and link-local", func(t *testing.T) {
		assert.False(t, env.reach(t, "a1", svc.addr, 8080))
		assert.False(t, env.reach(t, "a1", "169.254.77.2", 8080))
	})
	t.Run("allow list reaches what it names, never link-local or cluster endpoints", func(t *testing.T) {
		assert.True(t, env.reach(t, "b1", svc.addr, 8080))
		assert.False(t, env.reach(t, "b1", "169.254.77.2", 8080))
		assert.False(t, env.reach(t, "b1", cluster.addr, 5432))
		assert.True(t, env.reach(t, "b1", cluster.addr, 5433), "only the denied port of the cluster host is closed")
	})
	t.Run("none reaches nothing and has no DNS server", func(t *testing.T) {
		assert.False(t, env.reach(t, "c1", svc.addr, 8080))
		resolv, _, _ := env.run(t, "c1", "cat", "/etc/resolv.conf")
		assert.NotContains(t, resolv, "nameserver")
	})
	t.Run("host services are unreachable", func(t *testing.T) {
		anyPort, anyAccepted := listenTCP(t, "0.0.0.0:0")
		gw := env.rt.net.gateway.String()
		for _, id := range []string{"a1", "b1"} {
			assert.False(t, env.reach(t, id, gw, anyPort))
			assert.False(t, env.reach(t, id, svc.hostAddr, anyPort), "the host's end of the service link")
		}
		assert.Zero(t, anyAccepted.Load())
	})
	t.Run("IPv6 is off on the instance interface", func(t *testing.T) {
		out, _, code := env.run(t, "a1", "cat", "/proc/sys/net/ipv6/conf/eth0/disable_ipv6")
		if code == 0 {
			assert.Equal(t, "1\n", out)
		}
		out, _, _ = env.run(t, "a1", "ip", "-6", "addr", "show", "dev", "eth0")
		assert.NotContains(t, out, "inet6")
	})
	t.Run("policy survives stop and start", func(t *testing.T) {
		for _, id := range []string{"a1", "b1"} {
			require.NoError(t, env.rt.Stop(ctx, id))
			require.NoError(t, env.rt.Start(ctx, id))
		}
		assert.True(t, env.reach(t, "b1", svc.addr, 8080))
		assert.False(t, env.reach(t, "a1", svc.addr, 8080))
		env.listenIn(t, "a1", 7000)
		a1 = env.addr(t, "a1")
		assert.True(t, env.reach(t, "a2", a1, 7000), "a restarted instance is back in its group")
		assert.False(t, env.reach(t, "b1", a1, 7000))
	})
	t.Run("a policy change applies to a running instance", func(t *testing.T) {
		require.NoError(t, env.rt.SetNetworkPolicy(ctx, "a2", NetworkPolicy{Group: "A", Egress: allowSvc}))
		assert.True(t, env.reach(t, "a2", svc.addr, 8080))
		require.NoError(t, env.rt.SetNetworkPolicy(ctx, "a2", NetworkPolicy{Group: "A", Egress: none}))
		assert.False(t, env.reach(t, "a2", svc.addr, 8080))
		resolv, _, _ := env.run(t, "a2", "cat", "/etc/resolv.conf")
		assert.NotContains(t, resolv, "nameserver")
		assert.True(t, env.reach(t, "a2", a1, 7000), "none still reaches its own project")
	})
	assert.Positive(t, svcAccepted.Load())
	assert.Zero(t, llAccepted.Load(), "link-local reached")
	assert.Zero(t, clusterAccepted.Load(), "cluster endpoint reached")
	assert.Positive(t, clusterOther.Load())

	t.Run("rules are removed with the instance and rebuilt idempotently", func(t *testing.T) {
		require.NoError(t, env.rt.Remove(ctx, "c2"))
		out, err := exec.Command("iptables", "-S", env.rt.net.fw.chain("EG")).Output()
		require.NoError(t, err)
		assert.NotContains(t, string(out), c2+"/32")
		// A second runtime start on the same state dir (an envd restart)
		// keeps running instances' rules.
		require.NoError(t, env.rt.net.fw.ensureBase())
		require.NoError(t, env.rt.net.fw.ensureBase())
		assert.True(t, env.reach(t, "a1", a2, 7000))
		assert.False(t, env.reach(t, "a1", b1, 7000))
		fwd := ownForwardRules(t, env.rt.net.fw)
		require.GreaterOrEqual(t, len(fwd), 2)
		assert.Contains(t, fwd[0], env.rt.net.fw.chain("FW"))
		assert.Contains(t, fwd[1], env.rt.net.fw.chain("FW"))
		_, err = os.Stat(filepath.Join(env.rt.net.fw.stateDir, "c2.json"))
		assert.ErrorIs(t, err, os.ErrNotExist)
	})
}

// TestRootNetworkRulesFirst: an ACCEPT that other software puts at the top
// of FORWARD (as the CNI firewall plugin does) does not open a way between
// projects, once the runtime has re-checked its place (at each start).
func TestRootNetworkRulesFirst(t *testing.T) {
	env := newTestEnv(t, freeSubnet(t))
	env.create(t, InstanceSpec{ID: "x1", Network: NetworkPolicy{Group: "X"}})
	br := env.rt.net.cfg.Bridge
	sh(t, "iptables", "-I", "FORWARD", "1", "-i", br, "-j", "ACCEPT")
	t.Cleanup(func() { _ = exec.Command("iptables", "-D", "FORWARD", "-i", br, "-j", "ACCEPT").Run() })
	env.create(t, InstanceSpec{ID: "y1", Network: NetworkPolicy{Group: "Y"}})
	env.listenIn(t, "x1", 7000)
	assert.False(t, env.reach(t, "y1", env.addr(t, "x1"), 7000))
	fwd := ownForwardRules(t, env.rt.net.fw)
	require.NotEmpty(t, fwd)
	assert.Contains(t, fwd[0], env.rt.net.fw.chain("FW"))
}

// ownForwardRules is FORWARD without the leading jumps of other envd
// runtimes on the machine (other test processes), which may precede ours.
func ownForwardRules(t *testing.T, f *firewall) []string {
	t.Helper()
	fwd, err := listRules("iptables", "FORWARD")
	require.NoError(t, err)
	for len(fwd) > 0 && otherRuntimeJump.MatchString(fwd[0]) && !strings.Contains(fwd[0], f.prefix) {
		fwd = fwd[1:]
	}
	return fwd
}
