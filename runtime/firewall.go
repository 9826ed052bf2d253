package runtime

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime/egress"
)

// firewall keeps instances apart and away from the node with iptables
// rules in chains of their own, all named PREFIX+suffix where PREFIX is
// "ENVD-" + 8 hex digits of a hash of the bridge name, so two runtimes on one
// machine never share one. How traffic reaches the rules:
//
//   - Every bridge port is isolated (brport/isolated), and the bridge
//     answers ARP for the whole subnet itself (proxy_arp_pvlan): instances
//     cannot exchange frames directly, so instance-to-instance traffic is
//     routed by the host and passes FORWARD like any other, whether or not
//     br_netfilter is loaded.
//   - INPUT -i BRIDGE -> IN: replies to the host's own connections only; the
//     node's every address (the gateway too) is unreachable.
//   - FORWARD -i BRIDGE / -o BRIDGE -> FW (kept the first FORWARD rules):
//     replies pass; new connections from an instance go to EG, which jumps
//     by source address to the instance's chain I-<hash>; anything else
//     (new connections into an instance from outside, unknown sources) is
//     refused.
//   - I-<hash>: to another instance -> the group's chain G-<hash> (members
//     accepted, the rest refused) or refused; then DENY (link-local, the
//     cluster's endpoints, then PEERS: every port of the other nodes'
//     addresses, replaced as nodes join and leave, setPeers); then the DNS
//     servers; then the egress policy.
//
// IPv6 is off inside instances (disable_ipv6 on their interface); the
// bridge's IPv6 traffic is dropped in INPUT and FORWARD as a second wall.
type firewall struct {
	bridge   string
	prefix   string
	stateDir string
	deny     []denyRule
	localNS  []net.IP // nameservers that are the node's own addresses
	ipv6     bool     // the host has IPv6: ip6tables rules are required
	// names is the egress gateway (nil: none), serving on gateway, the
	// bridge's address in subnet; see egress_names.go.
	names   *egress.Gateway
	gateway net.IP
	subnet  string

	mu     sync.Mutex
	groups map[string]bool // group chains known to exist, with their final REJECT
	peers  []string        // the PEERS chain's addresses (setPeers)
	// peersSet: setPeers has written PEERS since the start (before, the
	// chain holds what the previous process left).
	peersSet bool
}

// denyRule is a destination instances never reach: an address range, and
// optionally one TCP/UDP port of it.
type denyRule struct {
	net  *net.IPNet
	port int // 0 = every port
}

// rejectArgs refuses with an ICMP error, so a connection fails at once
// instead of timing out.
const rejectArgs = "-j REJECT --reject-with icmp-admin-prohibited"

func newFirewall(bridge, stateDir string, deny []string, nameservers []net.IP) (*firewall, error) {
	sum := sha256.Sum256([]byte(bridge))
	f := &firewall{
		bridge:   bridge,
		prefix:   "ENVD-" + hex.EncodeToString(sum[:4]) + "-",
		stateDir: stateDir,
		groups:   map[string]bool{},
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("iptables not found: %w", errdefs.ErrUnavailable)
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		return nil, fmt.Errorf("iptables-restore not found: %w", errdefs.ErrUnavailable)
	}
	f.ipv6 = hostHasIPv6()
	if f.ipv6 {
		if _, err := exec.LookPath("ip6tables"); err != nil {
			return nil, fmt.Errorf("ip6tables not found while the host has IPv6 enabled (install ip6tables, or disable IPv6): %w", errdefs.ErrUnavailable)
		}
	}
	for _, d := range deny {
		rules, err := parseDeny(d)
		if err != nil {
			return nil, err
		}
		f.deny = append(f.deny, rules...)
	}
	local := localAddrs()
	for _, ns := range nameservers {
		if slices.ContainsFunc(local, ns.Equal) {
			f.localNS = append(f.localNS, ns)
		}
	}
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("firewall state dir: %w", err)
	}
	return f, nil
}

// hostHasIPv6 reports whether the kernel has IPv6 and it is not disabled.
func hostHasIPv6() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
	return err == nil && strings.TrimSpace(string(b)) == "0"
}

func localAddrs() []net.IP {
	addrs, _ := net.InterfaceAddrs()
	var out []net.IP
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			out = append(out, ipn.IP)
		}
	}
	return out
}

// parseDeny reads one NetworkConfig.Deny entry: CIDR, IP, HOST, IP:PORT or
// HOST:PORT (host names resolved now). IPv6 destinations are skipped:
// instances have no IPv6.
func parseDeny(s string) ([]denyRule, error) {
	bad := func() error {
		return fmt.Errorf("deny entry %q: want CIDR, IP, HOST, IP:PORT or HOST:PORT: %w", s, errdefs.ErrInvalidArgument)
	}
	if _, ipnet, err := net.ParseCIDR(s); err == nil {
		if ipnet.IP.To4() == nil {
			return nil, nil
		}
		return []denyRule{{net: ipnet}}, nil
	}
	host, port := s, 0
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return nil, bad()
		}
		host, port = h, n
	}
	var ips []net.IP
	if ip := net.ParseIP(host); ip != nil {
		ips = []net.IP{ip}
	} else {
		if host == "" || !hostnameRE.MatchString(host) {
			return nil, bad()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if ips, err = net.DefaultResolver.LookupIP(ctx, "ip4", host); err != nil {
			return nil, fmt.Errorf("deny entry %q: resolve %s: %w", s, host, errdefs.ErrUnavailable)
		}
	}
	var out []denyRule
	for _, ip := range ips {
		if ip4 := ip.To4(); ip4 != nil && !ip4.IsLoopback() {
			out = append(out, denyRule{net: &net.IPNet{IP: ip4, Mask: net.CIDRMask(32, 32)}, port: port})
		}
	}
	return out, nil
}

func (f *firewall) chain(suffix string) string { return f.prefix + suffix }

// hashChain names a per-instance or per-group chain: at most 28 bytes.
func (f *firewall) hashChain(kind, key string) string {
	sum := sha256.Sum256([]byte(f.bridge + "\x00" + kind + "\x00" + key))
	return f.prefix + kind + "-" + hex.EncodeToString(sum[:6])
}

func ipt(bin string, args ...string) error {
	out, err := exec.Command(bin, append([]string{"-w", "5"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", bin, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// restore applies a batch of filter-table lines atomically: all or none.
func restore(bin string, lines []string) error {
	script := "*filter\n" + strings.Join(lines, "\n") + "\nCOMMIT\n"
	cmd := exec.Command(bin, "-w", "5", "--noflush")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s\n%s", bin, err, bytes.TrimSpace(out), script)
	}
	return nil
}

// ensureBase (re)builds the static chains and puts the jumps to them first
// in INPUT and FORWARD. Idempotent; the chains of running instances (EG's
// jumps, I-*, G-*) are kept, so it is safe while instances run.
func (f *firewall) ensureBase() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer hostLock()()
	in, fw, eg, deny, peers := f.chain("IN"), f.chain("FW"), f.chain("EG"), f.chain("DENY"), f.chain("PEERS")
	_ = ipt("iptables", "-N", eg) // kept if it exists: it holds running instances' jumps
	// Kept too: after a restart the other nodes stay denied until the
	// service's first membership round replaces the list.
	_ = ipt("iptables", "-N", peers)
	lines := []string{":" + in + " - [0:0]", ":" + fw + " - [0:0]", ":" + deny + " - [0:0]",
		"-A " + in + " -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
	}
	for _, ns := range f.localNS {
		if ns.To4() != nil {
			for _, proto := range []string{"udp", "tcp"} {
				lines = append(lines, fmt.Sprintf("-A %s -d %s/32 -p %s --dport 53 -j ACCEPT", in, ns, proto))
			}
		}
	}
	lines = append(lines, f.baseNameLines(in)...)
	lines = append(lines,
		"-A "+in+" -j DROP",
		"-A "+fw+" -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
		"-A "+fw+" -i "+f.bridge+" -j "+eg,
		"-A "+fw+" -i "+f.bridge+" "+rejectArgs,
		"-A "+fw+" -j DROP",
		"-A "+deny+" -d 169.254.0.0/16 "+rejectArgs,
		"-A "+deny+" -j "+peers,
	)
	for _, d := range f.deny {
		if d.port == 0 {
			lines = append(lines, fmt.Sprintf("-A %s -d %s %s", deny, d.net, rejectArgs))
			continue
		}
		for _, proto := range []string{"tcp", "udp"} {
			lines = append(lines, fmt.Sprintf("-A %s -d %s -p %s --dport %d %s", deny, d.net, proto, d.port, rejectArgs))
		}
	}
	if err := restore("iptables-restore", lines); err != nil {
		return err
	}
	if err := f.ensureJumps("iptables"); err != nil {
		return err
	}
	if err := f.ensureNameChain(); err != nil {
		return err
	}
	if !f.ipv6 {
		return nil
	}
	if err := restore("ip6tables-restore", []string{":" + in + " - [0:0]", ":" + fw + " - [0:0]",
		"-A " + in + " -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT",
		"-A " + in + " -j DROP", "-A " + fw + " -j DROP"}); err != nil {
		return err
	}
	return f.ensureJumps("ip6tables")
}

// setPeers replaces the PEERS chain with a refusal of every port of each
// of addrs (IPv4 addresses), in one batch: no moment without the rules of
// the nodes that stay.
func (f *firewall) setPeers(addrs []string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.peersSet && slices.Equal(addrs, f.peers) {
		return nil
	}
	defer hostLock()()
	ch := f.chain("PEERS")
	lines := []string{":" + ch + " - [0:0]"}
	for _, a := range addrs {
		lines = append(lines, fmt.Sprintf("-A %s -d %s/32 %s", ch, a, rejectArgs))
	}
	if err := restore("iptables-restore", lines); err != nil {
		return fmt.Errorf("firewall rules of the cluster's nodes: %w", err)
	}
	f.peers, f.peersSet = slices.Clone(addrs), true
	return nil
}

// ensureJumps makes the jumps to IN and FW the first rules of INPUT and
// FORWARD: other software (the CNI firewall plugin, container engines)
// inserts ACCEPT rules at the top, and a rule of ours behind them would
// not be reached. The old jumps are deleted and the new ones inserted in one
// iptables-restore batch, so there is no moment without them.
//
// Rules are deleted by their specification, never by number: other
// runtimes on the machine change INPUT and FORWARD concurrently (with the
// nf_tables backend -w serializes nothing), and a number read a moment ago
// may by now name another runtime's rule. A batch that no longer matches
// (a rule listed is gone) fails as a whole and is retried on a new listing.
func (f *firewall) ensureJumps(bin string) error {
	want := map[string][]string{
		"INPUT":   {"-A INPUT -i " + f.bridge + " -j " + f.chain("IN")},
		"FORWARD": {"-A FORWARD -i " + f.bridge + " -j " + f.chain("FW"), "-A FORWARD -o " + f.bridge + " -j " + f.chain("FW")},
	}
	for _, parent := range []string{"INPUT", "FORWARD"} {
		w := want[parent]
		var err error
		for range 3 {
			var rules []string
			if rules, err = listRules(bin, parent); err != nil {
				return err
			}
			// Other envd runtimes' jumps (other bridges) may come first.
			lead := 0
			for lead < len(rules) && otherRuntimeJump.MatchString(rules[lead]) && !slices.Contains(w, rules[lead]) {
				lead++
			}
			if rest := rules[lead:]; len(rest) >= len(w) && slices.Equal(rest[:len(w)], w) &&
				!slices.ContainsFunc(rest[len(w):], func(r string) bool { return slices.Contains(w, r) }) {
				break
			}
			var lines []string
			for _, r := range rules {
				if slices.Contains(w, r) {
					lines = append(lines, "-D"+strings.TrimPrefix(r, "-A"))
				}
			}
			for i := len(w) - 1; i >= 0; i-- {
				lines = append(lines, "-I "+parent+" 1"+strings.TrimPrefix(w[i], "-A "+parent))
			}
			if err = restore(bin+"-restore", lines); err == nil {
				break
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// hostLockPath serializes the firewall changes of every envd runtime on the
// machine. iptables' own -w does not: with the nf_tables backend (Debian's
// default) it waits for nothing, and an iptables-restore --noflush that
// declares and fills a chain while another process changes FORWARD can
// drop that process's rule (seen with iptables 1.8.9: a concurrent
// runtime's jump vanished). Software other than envd is not covered.
const hostLockPath = "/run/envd-firewall.lock"

// hostLock takes the machine-wide firewall lock and returns its release. If
// the lock file cannot be opened (no /run) it proceeds unlocked: the lock
// only narrows a race between runtimes, it guards no invariant of one.
func hostLock() func() {
	fd, err := unix.Open(hostLockPath, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return func() {}
	}
	for unix.Flock(fd, unix.LOCK_EX) == unix.EINTR {
	}
	return func() { _ = unix.Close(fd) }
}

// otherRuntimeJump matches the INPUT/FORWARD jumps of any envd runtime.
var otherRuntimeJump = regexp.MustCompile(`^-A (INPUT|FORWARD) -[io] \S+ -j ENVD-[0-9a-f]{8}-(IN|FW)$`)

// listRules returns a chain's rules as `iptables -S` prints them; the i-th
// is rule number i+1.
func listRules(bin, chain string) ([]string, error) {
	out, err := exec.Command(bin, "-w", "5", "-S", chain).Output()
	if err != nil {
		return nil, fmt.Errorf("%s -S %s: %w", bin, chain, err)
	}
	var rules []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, "-A ") {
			rules = append(rules, l)
		}
	}
	return rules, nil
}

// attachment is what apply added for one instance, kept in a file so a
// restarted envd removes exactly that.
type attachment struct {
	IP    string `json:"ip"`
	Chain string `json:"chain"`
	Group string `json:"group_chain,omitempty"` // "" = not a member of a group chain
	// Nat are the egress-by-name DNAT rules (egress_names.go), as added;
	// Key and Egress the policy they were made for (reattachNames).
	Nat    []string `json:"nat,omitempty"`
	Key    string   `json:"key,omitempty"`
	Egress string   `json:"egress,omitempty"`
}

func (f *firewall) statePath(id string) string { return filepath.Join(f.stateDir, id+".json") }

// apply installs the rules of instance id at ip under pol, replacing any it
// had. nameservers are the DNS servers its resolv.conf names.
func (f *firewall) apply(ctx context.Context, id string, ip net.IP, pol NetworkPolicy, nameservers []net.IP) error {
	allow, err := resolveAllow(ctx, pol.Egress)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	defer hostLock()()
	if err := f.removeLocked(id); err != nil {
		return err
	}
	if err := f.ensureJumps("iptables"); err != nil {
		return err
	}
	a := attachment{IP: ip.String(), Chain: f.hashChain("I", id)}
	ch := a.Chain
	lines := []string{":" + ch + " - [0:0]"}
	if pol.Group != "" && !pol.Isolated {
		a.Group = f.hashChain("G", pol.Group)
		if err := f.ensureGroup(a.Group); err != nil {
			return err
		}
		lines = append(lines, "-A "+ch+" -o "+f.bridge+" -j "+a.Group)
	} else {
		lines = append(lines, "-A "+ch+" -o "+f.bridge+" "+rejectArgs)
	}
	lines = append(lines, "-A "+ch+" -j "+f.chain("DENY"))
	if pol.Egress.Mode != EgressNone {
		for _, ns := range nameservers {
			if ns.To4() != nil {
				for _, proto := range []string{"udp", "tcp"} {
					lines = append(lines, fmt.Sprintf("-A %s -d %s/32 -p %s --dport 53 -j ACCEPT", ch, ns, proto))
				}
			}
		}
	}
	switch pol.Egress.Mode {
	case EgressNone:
	case EgressAllow:
		for _, n := range allow {
			lines = append(lines, fmt.Sprintf("-A %s -d %s -j ACCEPT", ch, n))
		}
	default:
		for _, r := range PrivateRanges {
			lines = append(lines, fmt.Sprintf("-A %s -d %s %s", ch, r, rejectArgs))
		}
		lines = append(lines, "-A "+ch+" -j ACCEPT")
	}
	lines = append(lines, "-A "+ch+" "+rejectArgs)
	if a.Group != "" {
		lines = append(lines, fmt.Sprintf("-I %s 1 -d %s/32 -j ACCEPT", a.Group, ip))
	}
	lines = append(lines, fmt.Sprintf("-A %s -s %s/32 -j %s", f.chain("EG"), ip, ch))
	if pol.byName() {
		if f.names == nil {
			return fmt.Errorf("egress of %q names hosts, but this node runs no egress gateway: %w", id, errdefs.ErrUnavailable)
		}
		a.Nat, a.Key, a.Egress = f.nameRules(ip, pol), pol.Group, pol.Egress.String()
	}
	// The record first: a crash after the batch must not leave rules
	// that nothing removes.
	b, _ := json.Marshal(a)
	if err := os.WriteFile(f.statePath(id), b, 0o600); err != nil {
		return fmt.Errorf("firewall state of %q: %w", id, err)
	}
	if err := restore("iptables-restore", lines); err != nil {
		return fmt.Errorf("firewall rules of %q: %w", id, err)
	}
	return f.applyNames(id, ip, pol, a)
}

// ensureGroup creates a group chain ending in REJECT if it does not exist.
// Members are inserted before the REJECT.
func (f *firewall) ensureGroup(chain string) error {
	if f.groups[chain] {
		return nil
	}
	_ = ipt("iptables", "-N", chain)
	rej := append([]string{chain}, strings.Fields(rejectArgs)...)
	if ipt("iptables", append([]string{"-C"}, rej...)...) != nil {
		if err := ipt("iptables", append([]string{"-A"}, rej...)...); err != nil {
			return err
		}
	}
	f.groups[chain] = true
	return nil
}

// resolveAllow turns an allow list's addresses and CIDRs into CIDRs. Host
// names are not resolved into rules: the egress gateway enforces them
// (egress_names.go).
func resolveAllow(_ context.Context, e Egress) ([]string, error) {
	if e.Mode != EgressAllow {
		return nil, nil
	}
	var out []string
	for _, entry := range e.Allow {
		if _, n, err := net.ParseCIDR(entry); err == nil {
			out = append(out, n.String())
		} else if ip := net.ParseIP(entry); ip != nil {
			out = append(out, ip.String()+"/32")
		}
	}
	return out, nil
}

// attached returns the address the rules of id were installed for, nil
// when it has none (not started, or stopped).
func (f *firewall) attached(id string) net.IP {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.statePath(id))
	if err != nil {
		return nil
	}
	var a attachment
	if json.Unmarshal(b, &a) != nil {
		return nil
	}
	return net.ParseIP(a.IP)
}

// remove deletes what apply added for id. Idempotent.
func (f *firewall) remove(id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer hostLock()()
	return f.removeLocked(id)
}

func (f *firewall) removeLocked(id string) error {
	b, err := os.ReadFile(f.statePath(id))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("firewall state of %q: %w", id, err)
	}
	var a attachment
	if err := json.Unmarshal(b, &a); err == nil && a.Chain != "" {
		f.removeNames(a)
		lines := []string{fmt.Sprintf("-D %s -s %s/32 -j %s", f.chain("EG"), a.IP, a.Chain)}
		if a.Group != "" {
			lines = append(lines, fmt.Sprintf("-D %s -d %s/32 -j ACCEPT", a.Group, a.IP))
		}
		lines = append(lines, "-F "+a.Chain, "-X "+a.Chain)
		if restore("iptables-restore", lines) != nil {
			// Some of it is already gone (a crash half way): remove the rest
			// one by one.
			for _, l := range lines {
				_ = ipt("iptables", strings.Fields(l)...)
			}
		}
	}
	if err := os.Remove(f.statePath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("firewall state of %q: %w", id, err)
	}
	return nil
}

// destroy removes every rule and chain of this firewall (and those of the
// runtime's earlier single-chain layout).
func (f *firewall) destroy() {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer hostLock()()
	bins := []string{"iptables"}
	if _, err := exec.LookPath("ip6tables"); err == nil {
		bins = append(bins, "ip6tables")
	}
	legacy := "ENVD-IN-" + f.bridge
	for _, bin := range bins {
		// By specification, not number (see ensureJumps): other runtimes
		// change INPUT and FORWARD meanwhile.
		for _, parent := range []string{"INPUT", "FORWARD"} {
			rules, _ := listRules(bin, parent)
			for _, r := range rules {
				if strings.Contains(r, "-j "+f.prefix) || strings.HasSuffix(r, "-j "+legacy) {
					_ = ipt(bin, strings.Fields("-D"+strings.TrimPrefix(r, "-A"))...)
				}
			}
		}
		out, _ := exec.Command(bin, "-w", "5", "-S").Output()
		var chains []string
		for _, l := range strings.Split(string(out), "\n") {
			if name, ok := strings.CutPrefix(l, "-N "); ok && (strings.HasPrefix(name, f.prefix) || name == legacy) {
				chains = append(chains, name)
			}
		}
		for _, c := range chains {
			_ = ipt(bin, "-F", c)
		}
		for _, c := range chains {
			_ = ipt(bin, "-X", c)
		}
	}
	f.destroyNames()
	f.groups = map[string]bool{}
	entries, _ := os.ReadDir(f.stateDir)
	for _, e := range entries {
		_ = os.Remove(filepath.Join(f.stateDir, e.Name()))
	}
}
