package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Client is what the gateway knows of one attached instance.
type Client struct {
	// Instance is the instance's id, Key its owner as the caller names it
	// (envd: the instance's network group, "project:<id>"); both are only
	// passed back in denials and to Config.Headers.
	Instance string
	Key      string
	// Names are the name patterns the instance may resolve and connect to.
	Names []string
}

// Denial is one refused query or connection.
type Denial struct {
	Time     time.Time
	Instance string
	Key      string
	// Kind is "dns" (a query), "tls" (a connection by SNI), "http" (a
	// request by Host) or "connect" (a connection without a name the
	// gateway could read).
	Kind string
	// Name is the name asked for ("" when none could be read); Dest the
	// original destination, "ip:port" ("" for queries).
	Name   string
	Dest   string
	Reason string
}

// Header is an HTTP header the proxy sets on a request.
type Header struct{ Name, Value string }

// Config configures a Gateway.
type Config struct {
	// Upstream are the resolvers queries and the proxy's checks go to, as
	// host:port. Default: the nameservers of /etc/resolv.conf, port 53.
	Upstream []string
	// Refuse reports destinations the proxy never connects to whatever
	// the name (the node's own addresses, the cluster's endpoints). Loopback,
	// link-local and unspecified addresses are always refused.
	Refuse func(ip net.IP, port int) bool
	// OnDeny receives each denial; it must not block for long. Default:
	// none.
	OnDeny func(Denial)
	// Headers returns the headers to set on a request of client key to
	// host, scheme "http" (plain HTTP) or "https" (TLS the proxy terminates,
	// see CA), looked up on every request so a change applies at once. An
	// error refuses the request (the proxy answers 502). Default: none.
	Headers func(ctx context.Context, key, scheme, host string) ([]Header, error)
	// CA, when set, lets the proxy terminate TLS for the hosts that have
	// HTTPS headers (Headers with scheme "https" returns some when the
	// connection opens): it presents a certificate for the SNI issued by CA
	// and connects upstream with TLS itself. Other hosts' TLS passes
	// through untouched. Default: none (TLS always passes through).
	CA *CA
	// UpstreamRoots are the roots the proxy verifies upstream certificates
	// against when it terminates TLS. Default: the system's roots.
	UpstreamRoots *x509.CertPool
	// Timeout bounds an upstream query and a connection to a destination.
	// Default: 5s.
	Timeout time.Duration
}

// Gateway serves the resolver and the proxy on one address.
type Gateway struct {
	cfg Config

	mu      sync.RWMutex
	clients map[string]Client // by IPv4 address
	refuse  []func(net.IP, int) bool

	closers []func() error
	wg      sync.WaitGroup
	// DNSPort and ProxyPort are the ports Listen bound (UDP and TCP for
	// DNS, TCP for the proxy).
	DNSPort, ProxyPort int
}

// New returns a gateway that serves nothing until Listen.
func New(cfg Config) (*Gateway, error) {
	if len(cfg.Upstream) == 0 {
		ups, err := resolvConfServers("/etc/resolv.conf")
		if err != nil {
			return nil, err
		}
		cfg.Upstream = ups
	}
	for i, u := range cfg.Upstream {
		if _, _, err := net.SplitHostPort(u); err != nil {
			cfg.Upstream[i] = net.JoinHostPort(u, "53")
		}
	}
	if len(cfg.Upstream) == 0 {
		return nil, errors.New("egress gateway: no upstream resolver (none in /etc/resolv.conf)")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &Gateway{cfg: cfg, clients: map[string]Client{}}, nil
}

// resolvConfServers reads the nameservers of a resolv.conf.
func resolvConfServers(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("egress gateway upstream: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "nameserver" && net.ParseIP(f[1]) != nil {
			out = append(out, net.JoinHostPort(f[1], "53"))
		}
	}
	return out, nil
}

// Listen serves the resolver (UDP and TCP) and the proxy on ip, on ports
// the kernel picks. ip need not be configured yet (the bridge that holds it
// may be made later): the sockets are bound with IP_FREEBIND.
func (g *Gateway) Listen(ip net.IP) error {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_FREEBIND, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	ctx := context.Background()
	host := ip.String()
	// One port for DNS over UDP and TCP: try a few until both are free.
	var udp net.PacketConn
	var dnsTCP net.Listener
	for range 20 {
		pc, err := lc.ListenPacket(ctx, "udp4", net.JoinHostPort(host, "0"))
		if err != nil {
			return fmt.Errorf("egress resolver on %s: %w", host, err)
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		ln, err := lc.Listen(ctx, "tcp4", net.JoinHostPort(host, fmt.Sprint(port)))
		if err != nil {
			pc.Close()
			continue
		}
		udp, dnsTCP, g.DNSPort = pc, ln, port
		break
	}
	if udp == nil {
		return fmt.Errorf("egress resolver on %s: no port free for both UDP and TCP", host)
	}
	proxy, err := lc.Listen(ctx, "tcp4", net.JoinHostPort(host, "0"))
	if err != nil {
		udp.Close()
		dnsTCP.Close()
		return fmt.Errorf("egress proxy on %s: %w", host, err)
	}
	g.ProxyPort = proxy.Addr().(*net.TCPAddr).Port
	g.closers = append(g.closers, udp.Close, dnsTCP.Close, proxy.Close)
	g.wg.Add(3)
	go func() { defer g.wg.Done(); g.serveDNSUDP(udp) }()
	go func() { defer g.wg.Done(); g.serveTCP(dnsTCP, g.serveDNSConn) }()
	go func() { defer g.wg.Done(); g.serveTCP(proxy, g.serveProxyConn) }()
	return nil
}

// Close stops serving. Open proxied connections end with their peers.
func (g *Gateway) Close() error {
	for _, c := range g.closers {
		_ = c()
	}
	g.wg.Wait()
	return nil
}

// CA is the CA the proxy issues certificates of (Config.CA), nil when it
// never terminates TLS.
func (g *Gateway) CA() *CA { return g.cfg.CA }

// RefuseAlso adds a test of destinations the proxy never connects to,
// beside Config.Refuse (the runtime adds its node's addresses and deny
// list).
func (g *Gateway) RefuseAlso(f func(ip net.IP, port int) bool) {
	g.mu.Lock()
	g.refuse = append(g.refuse, f)
	g.mu.Unlock()
}

func (g *Gateway) refused(ip net.IP, port int) bool {
	if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() || ip.IsMulticast() ||
		(g.cfg.Refuse != nil && g.cfg.Refuse(ip, port)) {
		return true
	}
	g.mu.RLock()
	fs := g.refuse
	g.mu.RUnlock()
	for _, f := range fs {
		if f(ip, port) {
			return true
		}
	}
	return false
}

// Attach makes the instance at ip a client, replacing what ip had.
func (g *Gateway) Attach(ip net.IP, c Client) {
	names := make([]string, 0, len(c.Names))
	for _, n := range c.Names {
		names = append(names, strings.ToLower(n))
	}
	c.Names = names
	g.mu.Lock()
	g.clients[ip.To4().String()] = c
	g.mu.Unlock()
}

// Detach forgets the client at ip. Idempotent.
func (g *Gateway) Detach(ip net.IP) {
	g.mu.Lock()
	delete(g.clients, ip.To4().String())
	g.mu.Unlock()
}

func (g *Gateway) client(addr net.Addr) (Client, bool) {
	var ip net.IP
	switch a := addr.(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	}
	if ip == nil || ip.To4() == nil {
		return Client{}, false
	}
	g.mu.RLock()
	defer g.mu.RUnlock()
	c, ok := g.clients[ip.To4().String()]
	return c, ok
}

func (g *Gateway) deny(c Client, kind, name, dest, reason string) {
	if g.cfg.OnDeny == nil {
		return
	}
	g.cfg.OnDeny(Denial{Time: time.Now().UTC(), Instance: c.Instance, Key: c.Key, Kind: kind,
		Name: strings.TrimSuffix(strings.ToLower(name), "."), Dest: dest, Reason: reason})
}

func (g *Gateway) serveTCP(ln net.Listener, handle func(net.Conn)) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return
		}
		go func() {
			defer conn.Close()
			handle(conn)
		}()
	}
}
