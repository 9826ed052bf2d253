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
	"github.com/containernetworking/cni/libcni"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime/egress"
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
	// Deny are the cluster's endpoints instances must never reach whatever
	// their egress policy (PostgreSQL, the registry, S3, other nodes), as
	// CIDR, IP, HOST, IP:PORT or HOST:PORT; host names are resolved when the
	// runtime starts. Link-local addresses and the node's own addresses are
	// always unreachable and need no entry.
	Deny []string
	// Names is the egress gateway that enforces allow lists naming hosts
	// (egress_names.go); the runtime makes it listen on the bridge's
	// address unless it already listens. Without it, a policy naming hosts
	// fails the instance's start with ErrUnavailable. The caller closes it
	// after the runtime.
	Names *egress.Gateway
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
	fw      *firewall
	// rulesOff attaches instances without isolated ports or firewall
	// rules: only the start-latency benchmark's baseline sets it.
	rulesOff bool
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
	_, nameservers, err := resolvConf("/etc/resolv.conf", true)
	if err != nil {
		return nil, err
	}
	if n.fw, err = newFirewall(cfg.Bridge, filepath.Join(stateDir, "firewall"), cfg.Deny, nameservers); err != nil {
		return nil, err
	}
	if cfg.Names != nil {
		if cfg.Names.DNSPort == 0 {
			if err := cfg.Names.Listen(gw); err != nil {
				return nil, err
			}
		}
		n.fw.names, n.fw.gateway, n.fw.subnet = cfg.Names, gw, ipnet.String()
		cfg.Names.RefuseAlso(n.fw.refuses)
	}
	n.removeLegacyRules()
	if err := n.fw.ensureBase(); err != nil {
		return nil, err
	}
	// An instance that cannot be reattached stays without its gateway
	// (its DNS and 80/443 go nowhere) until its policy is applied again: a
	// closed way, so the runtime still starts.
	_ = n.fw.reattachNames()
	if err := n.ensureMasquerade(); err != nil {
		n.fw.destroy()
		n.removeMasquerade()
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

// conflist is bridge (gateway; source NAT is masquerade.go's) with
// host-local IPAM. No CNI firewall plugin: the firewall (firewall.go)
// decides every forwarded packet of the bridge itself, ahead of whatever
// else is in FORWARD.
func (n *network) conflist() ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       n.name,
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      n.cfg.Bridge,
				"isGateway":   true,
				"ipMasq":      false, // masquerade.go: one rule set for the subnet
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": n.cfg.Subnet, "gateway": n.gateway.String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": filepath.Join(n.cfg.ConfDir, "ipam"),
				},
			},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// destroy removes the bridge and the firewall's rules.
func (n *network) destroy() error {
	n.fw.destroy()
	n.removeMasquerade()
	if _, err := net.InterfaceByName(n.cfg.Bridge); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "del", n.cfg.Bridge).CombinedOutput(); err != nil {
		return fmt.Errorf("delete bridge %s: %v: %s", n.cfg.Bridge, err, bytes.TrimSpace(out))
	}
	return nil
}

// removeLegacyRules deletes the single INPUT chain of the runtime's earlier
// layout, ENVD-IN-<bridge>, which the firewall's IN chain replaces.
func (n *network) removeLegacyRules() {
	chain := "ENVD-IN-" + n.cfg.Bridge
	for _, bin := range []string{"iptables", "ip6tables"} {
		if exec.Command(bin, "-w", "5", "-n", "-L", chain).Run() != nil {
			continue
		}
		for exec.Command(bin, "-w", "5", "-D", "INPUT", "-i", n.cfg.Bridge, "-j", chain).Run() == nil {
		}
		_ = exec.Command(bin, "-w", "5", "-F", chain).Run()
		_ = exec.Command(bin, "-w", "5", "-X", chain).Run()
	}
}

func (n *network) nsPath(id string) string { return filepath.Join(n.nsDir, id) }

// setup creates id's network namespace, attaches it to the bridge on an
// isolated port and installs its firewall rules for pol (nameservers are
// the DNS servers its resolv.conf names). Any leftover attachment of the
// same id (from a crash) is removed first, so the IPAM allocation is not
// leaked or refused. It returns the instance address. Nothing runs in the
// namespace until it returns, so the moments before the port is isolated
// and the rules are in place carry no traffic.
//
// With idmap (a user namespace instance, userns.go) the namespace is made
// owned by a new user namespace with that mapping, pinned at
// usernsPath(id), which the instance then joins: a process may enter a
// network namespace only with capabilities in its owner.
func (n *network) setup(ctx context.Context, id string, pol NetworkPolicy, nameservers []net.IP, idmap []specs.LinuxIDMapping) (_ net.IP, retErr error) {
	if n.leftovers(id) {
		_ = n.teardown(ctx, id)
	}
	path := n.nsPath(id)
	userns := ""
	if idmap != nil {
		userns = n.usernsPath(id)
	}
	if err := newNetNSAt(path, userns, idmap); err != nil {
		return nil, fmt.Errorf("network namespace of %q: %w", id, err)
	}
	res, err := n.cni.Setup(ctx, id, path)
	if err != nil {
		_ = netns.LoadNetNS(path).Remove()
		return nil, fmt.Errorf("attach %q to network %s: %w", id, n.name, err)
	}
	defer func() {
		if retErr != nil {
			_ = n.teardown(context.WithoutCancel(ctx), id)
		}
	}()
	var ip net.IP
	for name, cfg := range res.Interfaces {
		if cfg.Sandbox == "" && name != n.cfg.Bridge && !n.rulesOff {
			if err := isolatePort(name); err != nil {
				return nil, fmt.Errorf("isolate bridge port of %q: %w", id, err)
			}
		}
		for _, ipc := range cfg.IPConfigs {
			if ip4 := ipc.IP.To4(); ip4 != nil && ip == nil {
				ip = ip4
			}
		}
	}
	if ip == nil {
		return nil, fmt.Errorf("network %s gave %q no IPv4 address", n.name, id)
	}
	if n.rulesOff {
		return ip, nil
	}
	if err := n.routeBetweenPorts(); err != nil {
		return nil, err
	}
	if err := n.fw.apply(ctx, id, ip, pol, nameservers); err != nil {
		return nil, err
	}
	return ip, nil
}

// isolatePort makes a bridge port unable to exchange frames with the other
// isolated ports: only with the bridge itself (the host).
func isolatePort(port string) error {
	return os.WriteFile("/sys/class/net/"+port+"/brport/isolated", []byte("1\n"), 0o644)
}

// routeBetweenPorts lets instances on isolated ports still reach each other
// through the host (where the firewall decides): the bridge answers ARP for
// the other addresses of its subnet with its own MAC (proxy_arp_pvlan), at
// once (proxy_delay 0; the default delays a first connection by up to
// 0.8 s). Both are per bridge; set at each attachment since CNI creates the
// bridge at the first.
func (n *network) routeBetweenPorts() error {
	for _, kv := range [][2]string{
		{"/proc/sys/net/ipv4/conf/" + n.cfg.Bridge + "/proxy_arp_pvlan", "1"},
		{"/proc/sys/net/ipv4/neigh/" + n.cfg.Bridge + "/proxy_delay", "0"},
	} {
		if err := os.WriteFile(kv[0], []byte(kv[1]+"\n"), 0o644); err != nil {
			return fmt.Errorf("bridge %s: %w", n.cfg.Bridge, err)
		}
	}
	return nil
}

// setPolicy replaces the firewall rules of an attached instance.
func (n *network) setPolicy(ctx context.Context, id string, ip net.IP, pol NetworkPolicy, nameservers []net.IP) error {
	return n.fw.apply(ctx, id, ip, pol, nameservers)
}

// leftovers tells whether anything of an attachment of id is left: its
// network namespace file (made before the CNI ADD and removed last), its
// firewall state, or libcni's cached result (kept when a DEL failed). A
// new instance has none, and its setup skips the teardown, whose CNI DEL
// runs the plugins (about 25 ms).
func (n *network) leftovers(id string) bool {
	for _, p := range []string{n.nsPath(id), n.fw.statePath(id)} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			return true
		}
	}
	cached, err := filepath.Glob(filepath.Join(libcni.CacheDir, "results", n.name+"-"+id+"-*"))
	return err != nil || len(cached) > 0
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
	if err := n.fw.remove(id); err != nil {
		errs = append(errs, err)
	}
	if err := n.cni.Remove(ctx, id, cniPath); err != nil {
		errs = append(errs, fmt.Errorf("detach %q from network %s: %w", id, n.name, err))
	}
	if err := netns.LoadNetNS(path).Remove(); err != nil {
		errs = append(errs, fmt.Errorf("remove network namespace of %q: %w", id, err))
	}
	if err := removeNSFile(n.usernsPath(id)); err != nil {
		errs = append(errs, fmt.Errorf("remove user namespace of %q: %w", id, err))
	}
	return errors.Join(errs...)
}

// newNetNSAt creates a network namespace and keeps it alive by bind-mounting
// it onto path, the way `ip netns add` does. containerd's pkg/netns does the
// same but only under random names.
//
// With userns set, the namespace is made by a child process in a new user
// namespace with idmap instead, and that user namespace is pinned at
// userns the same way (see pinUserNS).
func newNetNSAt(path, userns string, idmap []specs.LinuxIDMapping) error {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	f.Close()
	enter := func() error { return unix.Unshare(unix.CLONE_NEWNET) }
	if userns != "" {
		if err := pinUserNS(userns, path, idmap); err != nil {
			_ = os.Remove(path)
			return err
		}
		enter = func() error {
			fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			return unix.Setns(fd, unix.CLONE_NEWNET)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Never unlocked: the thread has changed namespace, so Go discards it
		// when this goroutine ends instead of reusing it.
		goruntime.LockOSThread()
		if err = enter(); err != nil {
			return
		}
		if userns == "" {
			self := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), unix.Gettid())
			if err = unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
				return
			}
		}
		if err = instanceSysctls(); err != nil {
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
		if userns != "" {
			_ = removeNSFile(userns)
		}
	}
	return err
}

// instanceSysctls configure the calling thread's (new) network namespace:
// interfaces made from now on (the instance's eth0) get no IPv6, so IPv6
// is off for instances while loopback keeps ::1; ICMP redirects are
// ignored (traffic between instances must keep going through the host).
func instanceSysctls() error {
	for _, kv := range [][2]string{
		{"/proc/sys/net/ipv6/conf/default/disable_ipv6", "1"},
		{"/proc/sys/net/ipv4/conf/all/accept_redirects", "0"},
		{"/proc/sys/net/ipv4/conf/default/accept_redirects", "0"},
	} {
		err := os.WriteFile(kv[0], []byte(kv[1]+"\n"), 0o644)
		if err != nil && !(errors.Is(err, os.ErrNotExist) && strings.Contains(kv[0], "ipv6")) {
			return fmt.Errorf("%s: %w", kv[0], err)
		}
	}
	return nil
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
