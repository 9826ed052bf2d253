package e2e

import (
	"crypto/rand"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/envd-dev/envd/internal/netns"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// privateService is a network namespace the test makes to stand for a
// service on a private address: a veth pair, the host end 10.X.Y.1/30, the
// namespace end 10.X.Y.2/30 (plus extra addresses), routed from the host.
type privateService struct {
	name, addr, hostAddr string
}

func runCmd(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	require.NoError(t, err, "%v: %s", args, out)
}

func newPrivateService(t *testing.T, extra ...string) *privateService {
	t.Helper()
	ifaces, err := net.Interfaces()
	require.NoError(t, err)
	var x, y byte
	found := false
	for range 100 {
		b := make([]byte, 2)
		_, _ = rand.Read(b)
		x, y = 240+b[0]%8, b[1]
		_, cand, _ := net.ParseCIDR(fmt.Sprintf("10.%d.%d.0/24", x, y))
		if !inUse(ifaces, cand) {
			found = true
			break
		}
	}
	require.True(t, found, "no free subnet for the private service")
	tag := fmt.Sprintf("%02x%02x", x, y)
	s := &privateService{name: "envde2e-" + tag, addr: fmt.Sprintf("10.%d.%d.2", x, y), hostAddr: fmt.Sprintf("10.%d.%d.1", x, y)}
	host, inner := "veh"+tag, "ven"+tag
	runCmd(t, "ip", "netns", "add", s.name)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", host).Run()
		_ = exec.Command("ip", "netns", "del", s.name).Run()
	})
	runCmd(t, "ip", "link", "add", host, "type", "veth", "peer", "name", inner)
	runCmd(t, "ip", "link", "set", inner, "netns", s.name)
	runCmd(t, "ip", "addr", "add", s.hostAddr+"/30", "dev", host)
	runCmd(t, "ip", "link", "set", host, "up")
	runCmd(t, "ip", "-n", s.name, "addr", "add", s.addr+"/30", "dev", inner)
	for _, a := range extra {
		runCmd(t, "ip", "-n", s.name, "addr", "add", a+"/32", "dev", inner)
		runCmd(t, "ip", "route", "add", a+"/32", "via", s.addr)
		t.Cleanup(func() { _ = exec.Command("ip", "route", "del", a+"/32").Run() })
	}
	runCmd(t, "ip", "-n", s.name, "link", "set", inner, "up")
	runCmd(t, "ip", "-n", s.name, "route", "add", "default", "via", s.hostAddr)
	return s
}

func inUse(ifaces []net.Interface, subnet *net.IPNet) bool {
	for _, ifc := range ifaces {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && (subnet.Contains(ipn.IP) || ipn.Contains(subnet.IP)) {
				return true
			}
		}
	}
	return false
}

// listen starts a TCP listener inside the namespace and counts accepted
// connections.
func (s *privateService) listen(t *testing.T, addr string) *atomic.Int32 {
	t.Helper()
	ln, err := netns.Listen("/run/netns/"+s.name, "tcp4", addr)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return countAccepts(ln)
}

func countAccepts(ln net.Listener) *atomic.Int32 {
	n := new(atomic.Int32)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return n
}

// connects reports whether instance id opens a TCP connection to ip:port.
func connects(t *testing.T, id, ip string, port int) bool {
	t.Helper()
	res := sh(t, id, fmt.Sprintf("nc -w 3 %s %d </dev/null", ip, port))
	t.Logf("%s -> %s:%d: exit %d", id, ip, port, res.ExitCode)
	return res.ExitCode == 0
}

func serveIn(t *testing.T, id string, port int) {
	t.Helper()
	mustSh(t, id, fmt.Sprintf("(nc -ll -p %d -e true </dev/null >/dev/null 2>&1 &) ; sleep 0.3", port))
}

func projectWithNetwork(t *testing.T, prefix, egress string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d", prefix, projectSeq.Add(1))
	p, err := env.c.CreateProject(ctx(t), types.CreateProjectRequest{Name: name, Base: fixtureBase, Egress: egress})
	require.NoError(t, err)
	want := egress
	if want == "" {
		want = "open"
	}
	assert.Equal(t, want, p.Egress)
	return name
}

// TestHostileNetwork: a tenant's instance tries to reach other projects'
// instances, the node and private or link-local services. Traffic goes only
// to the test's own instances, its own network namespace and the node's
// bridge.
func TestHostileNetwork(t *testing.T) {
	svc := newPrivateService(t, "169.254.78.2")
	svcHits := svc.listen(t, svc.addr+":8080")
	llHits := svc.listen(t, "169.254.78.2:8080")
	hostLn, err := net.Listen("tcp4", "0.0.0.0:0") // like the API or registry bound to every address
	require.NoError(t, err)
	t.Cleanup(func() { hostLn.Close() })
	hostHits := countAccepts(hostLn)
	hostPort := hostLn.Addr().(*net.TCPAddr).Port

	pa := projectWithNetwork(t, "neta", "")
	pb := projectWithNetwork(t, "netb", "")
	pAllow := projectWithNetwork(t, "netallow", "allow:"+svc.addr+",169.254.78.2")
	pNone := projectWithNetwork(t, "netnone", "none")
	_, err = env.c.CreateProject(ctx(t), types.CreateProjectRequest{Name: "netbad", Base: fixtureBase, Egress: "allow:$(reboot)"})
	require.Error(t, err, "a bad egress policy is refused")
	assert.Contains(t, err.Error(), "invalid_argument")

	a1, a2, b1, n1 := up(t, pa, 0), up(t, pa, 0), up(t, pb, 0), up(t, pNone, 0)
	al, err := env.c.CreateInstance(ctx(t), pAllow, types.CreateInstanceRequest{Retain: true})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(ctx(t), al.ID) })
	for _, in := range []types.Instance{a1, a2, b1, n1, al} {
		serveIn(t, in.ID, 7000)
	}
	addr := func(in types.Instance) string {
		got, err := env.c.GetInstance(ctx(t), in.ID)
		require.NoError(t, err)
		require.NotEmpty(t, got.Address)
		return got.Address
	}
	gw := strings.Fields(mustSh(t, a1.ID, "ip route | grep default"))[2]

	t.Run("same project connects, other projects do not", func(t *testing.T) {
		assert.True(t, connects(t, a1.ID, addr(a2), 7000))
		assert.False(t, connects(t, a1.ID, addr(b1), 7000))
		assert.False(t, connects(t, b1.ID, addr(a2), 7000))
		assert.False(t, connects(t, n1.ID, addr(a1), 7000))
		assert.False(t, connects(t, al.ID, addr(b1), 7000))
	})
	t.Run("the node is unreachable", func(t *testing.T) {
		apiPort := env.node.URL[strings.LastIndex(env.node.URL, ":")+1:]
		regPort := env.node.RegistryAddr()[strings.LastIndex(env.node.RegistryAddr(), ":")+1:]
		for _, in := range []types.Instance{a1, al} {
			assert.False(t, connects(t, in.ID, gw, hostPort), "a listener on all host addresses, through the gateway")
			assert.False(t, connects(t, in.ID, svc.hostAddr, hostPort), "the host's address on another link")
			for _, p := range []string{apiPort, regPort, "22", "53"} {
				res := sh(t, in.ID, "nc -w 3 "+gw+" "+p+" </dev/null")
				assert.NotEqual(t, 0, res.ExitCode, "gateway port %s", p)
			}
		}
		assert.Zero(t, hostHits.Load())
	})
	t.Run("link-local is unreachable even when allowed", func(t *testing.T) {
		assert.False(t, connects(t, a1.ID, "169.254.78.2", 8080))
		assert.False(t, connects(t, al.ID, "169.254.78.2", 8080))
		assert.Zero(t, llHits.Load())
	})
	t.Run("a private service only under an allow list naming it", func(t *testing.T) {
		assert.False(t, connects(t, a1.ID, svc.addr, 8080), "open drops private ranges")
		assert.False(t, connects(t, n1.ID, svc.addr, 8080), "none")
		before := svcHits.Load()
		assert.True(t, connects(t, al.ID, svc.addr, 8080), "allow list")
		assert.Greater(t, svcHits.Load(), before)
	})
	t.Run("none has no DNS server and reaches nothing", func(t *testing.T) {
		assert.NotContains(t, mustSh(t, n1.ID, "cat /etc/resolv.conf"), "nameserver")
		assert.False(t, connects(t, n1.ID, svc.hostAddr, hostPort))
		assert.False(t, connects(t, n1.ID, gw, hostPort))
	})
	t.Run("the policy survives stop and start", func(t *testing.T) {
		_, err := env.c.StopInstance(ctx(t), al.ID)
		require.NoError(t, err)
		_, err = env.c.StartInstance(ctx(t), al.ID)
		require.NoError(t, err)
		assert.True(t, connects(t, al.ID, svc.addr, 8080))
		assert.False(t, connects(t, al.ID, "169.254.78.2", 8080))
		assert.False(t, connects(t, al.ID, addr(a1), 7000))
	})
	t.Run("a changed policy applies to running instances", func(t *testing.T) {
		p, err := env.c.SetProjectNetwork(ctx(t), pa, types.ProjectNetwork{Egress: "allow:" + svc.addr})
		require.NoError(t, err)
		assert.Equal(t, "allow:"+svc.addr, p.Egress)
		got, err := env.c.GetProject(ctx(t), pa)
		require.NoError(t, err)
		assert.Equal(t, "allow:"+svc.addr, got.Egress)
		assert.True(t, connects(t, a1.ID, svc.addr, 8080))
		assert.True(t, connects(t, a1.ID, addr(a2), 7000), "its own project still")

		_, err = env.c.SetProjectNetwork(ctx(t), pa, types.ProjectNetwork{Egress: "none", IsolateInstances: true})
		require.NoError(t, err)
		assert.False(t, connects(t, a1.ID, svc.addr, 8080))
		assert.False(t, connects(t, a1.ID, addr(a2), 7000), "isolated instances")
	})
}

// TestRootBuildUnderEgressNone: the build container of a project whose
// instances reach nothing still installs from the package mirror (the
// node's build egress), and the project's instances then cannot.
func TestRootBuildUnderEgressNone(t *testing.T) {
	t.Parallel()
	base := importDebian(t)
	p := fmt.Sprintf("buildnone-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(ctx(t), types.CreateProjectRequest{Name: p, Base: base, Egress: "none"})
	require.NoError(t, err)
	res := runBuild(t, p, types.BuildRequest{Manager: "apt", Packages: []string{"tree"}, Validate: [][]string{{"tree", "--version"}}, Switch: true})
	assert.True(t, res.Current)
	in := up(t, p, 0)
	assert.Contains(t, mustSh(t, in.ID, "tree --version"), "tree v")
	assert.NotContains(t, mustSh(t, in.ID, "cat /etc/resolv.conf"), "nameserver")
	// apt-get update exits 0 when it fetched nothing; what it says is the
	// check.
	r := sh(t, in.ID, "apt-get update 2>&1")
	assert.Contains(t, r.Stdout, "Temporary failure resolving", "an instance under none reaches no mirror")
	assert.NotContains(t, r.Stdout, "Hit:")
	assert.NotContains(t, r.Stdout, "Get:")
}
