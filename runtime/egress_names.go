package runtime

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/envd-dev/envd/runtime/egress"
)

// Egress by name. An instance whose allow list names hosts (or *.wildcards)
// is attached to the node's egress gateway (NetworkConfig.Names):
//
//   - its resolv.conf names the bridge gateway, and its DNS traffic to any
//     address (UDP and TCP port 53) is DNATed to the gateway's resolver,
//     which answers only the allowed names;
//   - its TCP connections to ports 80 and 443 are DNATed to the gateway's
//     proxy, which connects to the original destination only when the SNI
//     or Host is allowed and resolves to that destination; connections to
//     the allow list's CIDRs and to the node's instances are not redirected;
//   - other ports to a name are refused: only CIDRs and addresses of the
//     allow list open every port (names are not resolved into firewall
//     rules, so a name's addresses are not reachable beyond the proxy).
//
// The DNAT rules live in the nat chain PREFIX-NM (PREROUTING -i BRIDGE),
// one set per instance, recorded in the instance's attachment; the filter
// chain IN accepts the gateway's ports from the bridge (the gateway itself
// refuses addresses that are not attached).

// refuses reports destinations the gateway's proxy must not connect to
// for an instance: the node's own addresses, the deny list and the other
// nodes, which the firewall refuses to the instance itself.
func (f *firewall) refuses(ip net.IP, port int) bool {
	if slices.ContainsFunc(localAddrs(), ip.Equal) {
		return true
	}
	for _, d := range f.deny {
		if d.net.Contains(ip) && (d.port == 0 || d.port == port) {
			return true
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.peers, ip.String())
}

// nameChain is the nat chain of the per-instance DNAT rules.
func (f *firewall) nameChain() string { return f.chain("NM") }

// names reports the host-name entries of an allow list (names and
// wildcards), nil when it has none.
func (e Egress) names() []string {
	if e.Mode != EgressAllow {
		return nil
	}
	var out []string
	for _, a := range e.Allow {
		if net.ParseIP(a) == nil && !strings.Contains(a, "/") {
			out = append(out, a)
		}
	}
	return out
}

// byName reports whether pol needs the egress gateway.
func (pol NetworkPolicy) byName() bool { return len(pol.Egress.names()) > 0 }

func restoreTable(bin, table string, lines []string) error {
	script := "*" + table + "\n" + strings.Join(lines, "\n") + "\nCOMMIT\n"
	cmd := exec.Command(bin, "-w", "5", "--noflush")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s (%s): %v: %s\n%s", bin, table, err, bytes.TrimSpace(out), script)
	}
	return nil
}

// baseNameLines are the IN rules that let instances reach the gateway,
// and ensureNameChain makes the nat chain and its PREROUTING jump. Both
// are no-ops without a gateway. Called with hostLock held.
func (f *firewall) baseNameLines(in string) []string {
	if f.names == nil {
		return nil
	}
	return []string{
		fmt.Sprintf("-A %s -d %s/32 -p udp --dport %d -j ACCEPT", in, f.gateway, f.names.DNSPort),
		fmt.Sprintf("-A %s -d %s/32 -p tcp --dport %d -j ACCEPT", in, f.gateway, f.names.DNSPort),
		fmt.Sprintf("-A %s -d %s/32 -p tcp --dport %d -j ACCEPT", in, f.gateway, f.names.ProxyPort),
	}
}

func (f *firewall) ensureNameChain() error {
	if f.names == nil {
		return nil
	}
	c := f.nameChain()
	_ = ipt("iptables", "-t", "nat", "-N", c) // kept if it exists: running instances' rules
	jump := []string{"PREROUTING", "-i", f.bridge, "-j", c}
	if ipt("iptables", append([]string{"-t", "nat", "-C"}, jump...)...) == nil {
		return nil
	}
	return ipt("iptables", append([]string{"-t", "nat", "-I"}, jump...)...)
}

// nameRules are the nat rules of instance ip under pol: CIDRs of the allow
// list and the node's subnet go direct, DNS and ports 80/443 go to the
// gateway.
func (f *firewall) nameRules(ip net.IP, pol NetworkPolicy) []string {
	c := f.nameChain()
	src := "-A " + c + " -s " + ip.String() + "/32"
	lines := []string{src + " -d " + f.subnet + " -p tcp -m multiport --dports 80,443 -j RETURN"}
	for _, a := range pol.Egress.Allow {
		if _, n, err := net.ParseCIDR(a); err == nil {
			lines = append(lines, src+" -d "+n.String()+" -p tcp -m multiport --dports 80,443 -j RETURN")
		} else if net.ParseIP(a) != nil {
			lines = append(lines, src+" -d "+a+"/32 -p tcp -m multiport --dports 80,443 -j RETURN")
		}
	}
	dns := fmt.Sprintf("%s:%d", f.gateway, f.names.DNSPort)
	return append(lines,
		src+" -p udp --dport 53 -j DNAT --to-destination "+dns,
		src+" -p tcp --dport 53 -j DNAT --to-destination "+dns,
		fmt.Sprintf("%s -p tcp -m multiport --dports 80,443 -j DNAT --to-destination %s:%d", src, f.gateway, f.names.ProxyPort))
}

// applyNames installs the nat rules a records (nameRules) and attaches
// the instance to the gateway. Called with f.mu and hostLock held, after
// the filter rules.
func (f *firewall) applyNames(id string, ip net.IP, pol NetworkPolicy, a attachment) error {
	if len(a.Nat) == 0 {
		return nil
	}
	if err := f.ensureNameChain(); err != nil {
		return err
	}
	if err := restoreTable("iptables-restore", "nat", a.Nat); err != nil {
		return fmt.Errorf("egress redirect of %q: %w", id, err)
	}
	f.names.Attach(ip, egress.Client{Instance: id, Key: pol.Group, Names: pol.Egress.names()})
	return nil
}

// removeNames undoes applyNames for the attachment a.
func (f *firewall) removeNames(a attachment) {
	if f.names != nil {
		if ip := net.ParseIP(a.IP); ip != nil {
			f.names.Detach(ip)
		}
	}
	if len(a.Nat) == 0 {
		return
	}
	var del []string
	for _, l := range a.Nat {
		del = append(del, "-D"+strings.TrimPrefix(l, "-A"))
	}
	if restoreTable("iptables-restore", "nat", del) != nil {
		for _, l := range del {
			_ = ipt("iptables", append([]string{"-t", "nat"}, strings.Fields(l)...)...)
		}
	}
}

// reattachNames gives the instances attached by an earlier process (an
// envd restart) back to this process's gateway: their DNAT rules are
// remade for the gateway's new ports and their policy registered again.
// Done at the runtime's start, after ensureBase; an instance that fails is
// named in the error and the others still go.
func (f *firewall) reattachNames() error {
	if f.names == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	defer hostLock()()
	entries, err := os.ReadDir(f.stateDir)
	if err != nil {
		return fmt.Errorf("firewall state: %w", err)
	}
	var errs []error
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		b, err := os.ReadFile(f.statePath(id))
		var a attachment
		if err != nil || json.Unmarshal(b, &a) != nil || len(a.Nat) == 0 {
			continue
		}
		ip := net.ParseIP(a.IP)
		eg, err := ParseEgress(a.Egress)
		if ip == nil || err != nil {
			errs = append(errs, fmt.Errorf("egress by name of %q: bad record", id))
			continue
		}
		f.removeNames(a)
		pol := NetworkPolicy{Group: a.Key, Egress: eg}
		a.Nat = f.nameRules(ip, pol)
		b, _ = json.Marshal(a)
		if err := os.WriteFile(f.statePath(id), b, 0o600); err != nil {
			errs = append(errs, fmt.Errorf("firewall state of %q: %w", id, err))
			continue
		}
		if err := f.applyNames(id, ip, pol, a); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// destroyNames removes the nat chain and its jump.
func (f *firewall) destroyNames() {
	c := f.nameChain()
	for ipt("iptables", "-t", "nat", "-D", "PREROUTING", "-i", f.bridge, "-j", c) == nil {
	}
	_ = ipt("iptables", "-t", "nat", "-F", c)
	_ = ipt("iptables", "-t", "nat", "-X", c)
}

// instanceResolv is the resolv.conf of an instance under pol and the
// nameservers the firewall lets it reach: the gateway's resolver when the
// policy names hosts, else the host's (none under egress none).
func (r *Runtime) instanceResolv(pol NetworkPolicy) (string, []net.IP, error) {
	if pol.byName() && r.net.fw.names != nil {
		return "nameserver " + r.net.fw.gateway.String() + "\noptions ndots:1\n", nil, nil
	}
	return resolvConf("/etc/resolv.conf", pol.Egress.Mode != EgressNone)
}

// EgressCADir is where an instance attached to the egress gateway finds the
// certificate of the node's egress CA (ca.crt) and a bundle of the node's
// system roots with it (bundle.crt), read-only. The proxy presents
// certificates of that CA for the hosts it terminates TLS for (HTTPS
// secret bindings); the CA's key never enters an instance. /run is never
// part of a save.
const EgressCADir = "/run/envd/egress-ca"

// egressCAEnv points the usual TLS clients at the bundle: OpenSSL and so
// curl, Python's ssl, git and Go read SSL_CERT_FILE; the curl tool
// CURL_CA_BUNDLE; Python requests REQUESTS_CA_BUNDLE; Node adds
// NODE_EXTRA_CA_CERTS to its own roots.
var egressCAEnv = []string{
	"SSL_CERT_FILE=" + EgressCADir + "/bundle.crt",
	"CURL_CA_BUNDLE=" + EgressCADir + "/bundle.crt",
	"REQUESTS_CA_BUNDLE=" + EgressCADir + "/bundle.crt",
	"NODE_EXTRA_CA_CERTS=" + EgressCADir + "/ca.crt",
}

// systemBundles are where distributions keep their PEM bundle of roots
// (the list of Go's crypto/x509).
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// egressCA returns the mount and environment that make an instance of
// policy pol trust the egress CA: none when the instance does not use the
// gateway or the gateway has no CA. The files are written under StateDir
// when their content changed (a new CA file, new system roots).
func (r *Runtime) egressCA(pol NetworkPolicy) ([]specs.Mount, []string, error) {
	if r.net == nil || r.net.fw == nil || r.net.fw.names == nil || !pol.byName() {
		return nil, nil, nil
	}
	ca := r.net.fw.names.CA()
	if ca == nil {
		return nil, nil, nil
	}
	dir := filepath.Join(r.cfg.StateDir, "egress-ca")
	bundle := []byte{}
	for _, p := range systemBundles {
		if b, err := os.ReadFile(p); err == nil {
			bundle = append(b, '\n')
			break
		}
	}
	bundle = append(bundle, ca.CertPEM()...)
	r.egressCAMu.Lock()
	defer r.egressCAMu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("egress CA dir: %w", err)
	}
	for name, b := range map[string][]byte{"ca.crt": ca.CertPEM(), "bundle.crt": bundle} {
		p := filepath.Join(dir, name)
		if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, b) {
			continue
		}
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return nil, nil, fmt.Errorf("egress CA file: %w", err)
		}
		if err := os.Rename(tmp, p); err != nil {
			return nil, nil, fmt.Errorf("egress CA file: %w", err)
		}
	}
	return []specs.Mount{bindMount(dir, EgressCADir, true)}, egressCAEnv, nil
}
