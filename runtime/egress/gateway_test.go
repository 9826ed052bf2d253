package egress

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/internal/dnstest"
)

func TestMatch(t *testing.T) {
	t.Parallel()
	pats := []string{"*.allowed.test", "exact.test"}
	for name, want := range map[string]bool{
		"a.allowed.test": true, "x.y.allowed.test": true, "A.Allowed.TEST.": true,
		"allowed.test": false, "notallowed.test": false, "evilallowed.test": false,
		"exact.test": true, "sub.exact.test": false, "": false,
	} {
		assert.Equal(t, want, Match(pats, name), name)
	}
}

// TestResolver: the resolver answers attached clients' allowed names from
// the upstream, refuses their other names (a denial each), and refuses
// every name to an address that is not attached.
func TestResolver(t *testing.T) {
	t.Parallel()
	up := dnstest.Start(t, map[string]string{"a.allowed.test": "192.0.2.10", "other.test": "192.0.2.11"})
	var mu sync.Mutex
	var denials []Denial
	g, err := New(Config{Upstream: []string{up.Addr}, OnDeny: func(d Denial) { mu.Lock(); denials = append(denials, d); mu.Unlock() }})
	require.NoError(t, err)
	require.NoError(t, g.Listen(net.IPv4(127, 0, 0, 1)))
	t.Cleanup(func() { _ = g.Close() })
	g.Attach(net.IPv4(127, 0, 0, 1), Client{Instance: "i1", Key: "project:1", Names: []string{"*.allowed.test"}})

	resolver := func(src string) *net.Resolver {
		return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			d := net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(src)}}
			if network == "tcp" {
				d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
			}
			return d.DialContext(ctx, network, "127.0.0.1:"+strconv.Itoa(g.DNSPort))
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ips, err := resolver("127.0.0.1").LookupIP(ctx, "ip4", "a.allowed.test")
	require.NoError(t, err)
	assert.Equal(t, "192.0.2.10", ips[0].String())
	_, err = resolver("127.0.0.1").LookupIP(ctx, "ip4", "other.test")
	assert.Error(t, err, "a name outside the patterns")
	_, err = resolver("127.0.0.2").LookupIP(ctx, "ip4", "a.allowed.test")
	assert.Error(t, err, "an address that is not attached")
	assert.NotContains(t, up.Asked(), "other.test", "a refused name never reaches the upstream")

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, denials)
	assert.Equal(t, "dns", denials[0].Kind)
	assert.Equal(t, "other.test", denials[0].Name)
	assert.Equal(t, "i1", denials[0].Instance)
}

// BenchmarkResolve compares an A query answered through the gateway
// (allowed name, forwarded to the upstream) with the same query asked of
// the upstream directly, both on loopback.
func BenchmarkResolve(b *testing.B) {
	up, err := dnstest.Listen(map[string]string{"a.allowed.test": "192.0.2.10"})
	require.NoError(b, err)
	defer up.Close()
	g, err := New(Config{Upstream: []string{up.Addr}})
	require.NoError(b, err)
	require.NoError(b, g.Listen(net.IPv4(127, 0, 0, 1)))
	defer g.Close()
	g.Attach(net.IPv4(127, 0, 0, 1), Client{Names: []string{"*.allowed.test"}})
	for _, bc := range []struct{ name, server string }{
		{"gateway", "127.0.0.1:" + strconv.Itoa(g.DNSPort)},
		{"upstream", up.Addr},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, bc.server)
			}}
			for b.Loop() {
				if _, err := r.LookupIP(context.Background(), "ip4", "a.allowed.test"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
