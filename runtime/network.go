package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"

	"github.com/containerd/containerd/v2/pkg/netns"
	gocni "github.com/containerd/go-cni"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/internal/errdefs"
)

// NetworkConfig describes the bridge network instances are attached to. Every
// name in it is per runtime, so two runtimes (two data dirs) on one machine do
// not share a bridge, an address range, IPAM state or firewall chains.
type NetworkConfig struct {
	// Bridge is the host bridge interface (at most 15 bytes).
	// Default: "envd" + 8 hex digits of a hash of Config.StateDir.
	Bridge string
	// Subnet is the IPv4 CIDR instances get addresses from; the bridge (the
	// instances' gateway) takes the first address.
	// Default: 10.89.N.0/24 with N from the same hash; set it explicitly when
	// several runtimes share a machine.
	Subnet string
	// PluginDir holds the CNI plugin binaries. Default: /usr/lib/cni.
	PluginDir string
	// ConfDir receives the generated conflist (for inspection only; it is
	// passed to CNI directly) and host-local IPAM state lives beside it.
	// Default: StateDir/cni.
	ConfDir string
}

// network attaches instances to a CNI bridge through network namespaces that
// live at fixed paths, StateDir/netns/ID, so the container spec can name the
// path once and a later Start (or a restarted envd) finds it again.
type network struct {
	cfg     NetworkConfig
	name    string // CNI network name; also keys CNI's cache in /var/lib/cni
	nsDir   string
	gateway net.IP
	cni     gocni.CNI
}

func newNetwork(cfg NetworkConfig, scope, stateDir string) (*network, error) {
	if cfg.Bridge == "" {
		cfg.Bridge = "envd" + scope[:8]
	}
	if len(cfg.Bridge) > 15 || strings.ContainsAny(cfg.Bridge, "/: \t") {
		return nil, fmt.Errorf("bridge name %q: %w", cfg.Bridge, errdefs.ErrInvalidArgument)
	}
	if cfg.Subnet == "" {
		var err error
		if cfg.Subnet, err = defaultSubnet(scope, cfg.Bridge); err != nil {
			return nil, err
		}
	}
	ip, ipnet, err := net.ParseCIDR(cfg.Subnet)
	if err != nil || ip.To4() == nil {
		return nil, fmt.Errorf("subnet %q must be an IPv4 CIDR: %w", cfg.Subnet, errdefs.ErrInvalidArgument)
	}
	if ones, _ := ipnet.Mask.Size(); ones > 29 {
		return nil, fmt.Errorf("subnet %q is too small: %w", cfg.Subnet, errdefs.ErrInvalidArgument)
	}
	if cfg.PluginDir == "" {
		cfg.PluginDir = "/usr/lib/cni"
	}
	if cfg.ConfDir == "" {
		cfg.ConfDir = filepath.Join(stateDir, "cni")
	}
	gw := make(net.IP, 4)
	copy(gw, ipnet.IP.To4())
	gw[3]++

	n := &network{
		cfg:     cfg,
		name:    "envd-" + scope[:12],
		nsDir:   filepath.Join(stateDir, "netns"),
		gateway: gw,
	}
	conf, err := n.conflist()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.ConfDir, 0o700); err != nil {
		return nil, fmt.Errorf("cni conf dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(cfg.ConfDir, n.name+".conflist"), conf, 0o600); err != nil {
		return nil, fmt.Errorf("cni conflist: %w", err)
	}
	n.cni, err = gocni.New(
		gocni.WithPluginDir([]string{cfg.PluginDir}),
		gocni.WithPluginConfDir(cfg.ConfDir),
		gocni.WithMinNetworkCount(1),
		gocni.WithConfListBytes(conf),
	)
	if err != nil {
		return nil, fmt.Errorf("cni: %w", err)
	}
	if err := os.MkdirAll(n.nsDir, 0o711); err != nil {
		return nil, fmt.Errorf("netns dir: %w", err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644); err != nil {
		return nil, fmt.Errorf("enable ip forwarding: %w", err)
	}
	if err := n.isolateHost(); err != nil {
		return nil, err
	}
	return n, nil
}

// defaultSubnet picks 10.89.N.0/24, N from scope, skipping subnets that an
// interface other than bridge already has an address in; the choice is
// stable for a scope as long as the machine's other addresses are.
func defaultSubnet(scope, bridge string) (string, error) {
	var n int
	fmt.Sscanf(scope[:2], "%02x", &n)
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("list interfaces: %w", err)
	}
	for i := range 256 {
		cand := &net.IPNet{IP: net.IPv4(10, 89, byte((n+i)%256), 0).To4(), Mask: net.CIDRMask(24, 32)}
		if !subnetInUse(ifaces, cand, bridge) {
			return cand.String(), nil
		}
	}
	return "", fmt.Errorf("no free subnet in 10.89.0.0/16 for bridge %s: %w", bridge, errdefs.ErrUnavailable)
}

func subnetInUse(ifaces []net.Interface, subnet *net.IPNet, except string) bool {
	for _, ifc := range ifaces {
		if ifc.Name == except {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && (subnet.Contains(ipn.IP) || ipn.Contains(subnet.IP)) {
				return true
			}
		}
	}
	return false
}

// conflist is bridge (gateway + NAT) with host-local IPAM, then the firewall
// plugin, which accepts forwarded traffic to and from the instance even where
// the FORWARD policy is DROP.
func (n *network) conflist() ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.name,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      n.cfg.Bridge,
				"isGateway":   true,
				"ipMasq":      true,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": n.cfg.Subnet, "gateway": n.gateway.String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": filepath.Join(n.cfg.ConfDir, "ipam"),
				},
			},
			map[string]any{"type": "firewall", "backend": "iptables"},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// isolateHost makes every address of the host unreachable from instances:
// packets that arrive on the bridge for the host itself (the gateway address,
// the host's other addresses) are dropped in INPUT, except replies to
// connections the host opened. Forwarded (NATed) traffic is not affected.
// Host loopback services are unreachable anyway, since 127.0.0.1 inside an
// instance is the instance's own loopback. No DNS exception is needed as long
// as the host's resolver is not on the host (resolvConf drops loopback
// nameservers). The rules live in a chain of their own, rebuilt on every
// call, so this is idempotent; IPv6 gets the same rules (link-local addresses
// on the bridge would otherwise reach the host).
func (n *network) isolateHost() error {
	chain := "ENVD-IN-" + n.cfg.Bridge
	for _, bin := range []string{"iptables", "ip6tables"} {
		if _, err := exec.LookPath(bin); err != nil {
			if bin == "iptables" {
				return fmt.Errorf("iptables not found: %w", errdefs.ErrUnavailable)
			}
			continue
		}
		ipt := func(args ...string) error {
			out, err := exec.Command(bin, append([]string{"-w", "5"}, args...)...).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%s %s: %v: %s", bin, strings.Join(args, " "), err, bytes.TrimSpace(out))
			}
			return nil
		}
		if ipt("-n", "-L", chain) != nil {
			if err := ipt("-N", chain); err != nil {
				return err
			}
		}
		steps := [][]string{
			{"-F", chain},
			{"-A", chain, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
			{"-A", chain, "-j", "DROP"},
		}
		for _, s := range steps {
			if err := ipt(s...); err != nil {
				return err
			}
		}
		if ipt("-C", "INPUT", "-i", n.cfg.Bridge, "-j", chain) != nil {
			if err := ipt("-I", "INPUT", "-i", n.cfg.Bridge, "-j", chain); err != nil {
				return err
			}
		}
	}
	return nil
}

// destroy removes the bridge and the rules isolateHost added.
func (n *network) destroy() error {
	n.removeHostRules()
	if _, err := net.InterfaceByName(n.cfg.Bridge); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "del", n.cfg.Bridge).CombinedOutput(); err != nil {
		return fmt.Errorf("delete bridge %s: %v: %s", n.cfg.Bridge, err, bytes.TrimSpace(out))
	}
	return nil
}

// removeHostRules deletes what isolateHost added.
func (n *network) removeHostRules() {
	chain := "ENVD-IN-" + n.cfg.Bridge
	for _, bin := range []string{"iptables", "ip6tables"} {
		for exec.Command(bin, "-w", "5", "-D", "INPUT", "-i", n.cfg.Bridge, "-j", chain).Run() == nil {
		}
		_ = exec.Command(bin, "-w", "5", "-F", chain).Run()
		_ = exec.Command(bin, "-w", "5", "-X", chain).Run()
	}
}

func (n *network) nsPath(id string) string { return filepath.Join(n.nsDir, id) }

// setup creates id's network namespace and attaches it to the bridge. Any
// leftover attachment of the same id (from a crash) is removed first, so the
// IPAM allocation is not leaked or refused. It returns the instance address.
func (n *network) setup(ctx context.Context, id string) (net.IP, error) {
	_ = n.teardown(ctx, id)
	path := n.nsPath(id)
	if err := newNetNSAt(path); err != nil {
		return nil, fmt.Errorf("network namespace of %q: %w", id, err)
	}
	res, err := n.cni.Setup(ctx, id, path)
	if err != nil {
		_ = netns.LoadNetNS(path).Remove()
		return nil, fmt.Errorf("attach %q to network %s: %w", id, n.name, err)
	}
	for _, cfg := range res.Interfaces {
		for _, ipc := range cfg.IPConfigs {
			if ip := ipc.IP.To4(); ip != nil {
				return ip, nil
			}
		}
	}
	_ = n.teardown(ctx, id)
	return nil, fmt.Errorf("network %s gave %q no IPv4 address", n.name, id)
}

// teardown detaches id from the bridge (releasing its address) and removes its
// network namespace. Idempotent.
func (n *network) teardown(ctx context.Context, id string) error {
	path := n.nsPath(id)
	cniPath := path
	if _, err := os.Stat(path); err != nil {
		// CNI does best-effort cleanup (IPAM, iptables) without a namespace.
		cniPath = ""
	}
	var errs []error
	if err := n.cni.Remove(ctx, id, cniPath); err != nil {
		errs = append(errs, fmt.Errorf("detach %q from network %s: %w", id, n.name, err))
	}
	if err := netns.LoadNetNS(path).Remove(); err != nil {
		errs = append(errs, fmt.Errorf("remove network namespace of %q: %w", id, err))
	}
	return errors.Join(errs...)
}

// newNetNSAt creates a network namespace and keeps it alive by bind-mounting
// it onto path, the way `ip netns add` does. containerd's pkg/netns does the
// same but only under random names.
func newNetNSAt(path string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Never unlocked: the thread has changed namespace, so Go discards it
		// when this goroutine ends instead of reusing it.
		goruntime.LockOSThread()
		if err = unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return
		}
		self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
		if err = unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
			return
		}
		// Bring up loopback inside the namespace (CNI's loopback plugin
		// would do the same).
		err = setLoopbackUp()
	}()
	wg.Wait()
	if err != nil {
		_ = unix.Unmount(path, unix.MNT_DETACH)
		_ = os.Remove(path)
	}
	return err
}

func setLoopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
