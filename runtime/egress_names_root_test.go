package runtime

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/internal/dnstest"
	"github.com/envd-dev/envd/internal/netns"
	"github.com/envd-dev/envd/runtime/egress"
)

// selfSigned is a TLS certificate for any name (clients here skip
// verification: the test is about which names pass, not about trust).
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egress test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// serveHTTP serves, inside the service namespace on addr, a page that
// echoes the request's Host and X-Api-Key; with tlsOn over TLS.
func (s *serviceNetns) serveHTTP(t *testing.T, addr string, tlsOn bool) {
	t.Helper()
	ln, err := netns.Listen(s.path, "tcp4", addr)
	require.NoError(t, err)
	if tlsOn {
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{selfSigned(t)}})
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host=%s key=%s\n", r.Host, r.Header.Get("X-Api-Key"))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// denials collects a gateway's denials.
type denials struct {
	mu  sync.Mutex
	all []egress.Denial
}

func (d *denials) add(x egress.Denial) { d.mu.Lock(); d.all = append(d.all, x); d.mu.Unlock() }
func (d *denials) has(kind, name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range d.all {
		if x.Kind == kind && x.Name == name {
			return true
		}
	}
	return false
}

// TestRootEgressByName: an instance allowed only *.allowed.test resolves
// and reaches names below allowed.test over HTTP and HTTPS, and nothing
// else: other names are not resolved, an allowed name sent to another
// name's address is refused, other ports are refused, and each refusal is
// reported. The names are served by a resolver the test runs on loopback,
// the gateway's upstream; the server is on an address the test made.
func TestRootEgressByName(t *testing.T) {
	t.Parallel()
	svc := newServiceNetns(t)
	other := newServiceNetns(t)
	svc.serveHTTP(t, svc.addr+":80", false)
	svc.serveHTTP(t, svc.addr+":443", true)
	other.serveHTTP(t, other.addr+":80", false)
	svcOther := svc.listen(t, svc.addr+":8080")
	dns := dnstest.Start(t, map[string]string{
		"ok.allowed.test":     svc.addr,
		"other.test":          svc.addr,
		"sneaky.allowed.test": other.addr,
	})
	var denied denials
	var keyMu sync.Mutex
	key := "k-one"
	gw, err := egress.New(egress.Config{Upstream: []string{dns.Addr}, OnDeny: denied.add,
		Headers: func(_ context.Context, owner, scheme, host string) ([]egress.Header, error) {
			keyMu.Lock()
			defer keyMu.Unlock()
			if owner != "project:1" || scheme != "http" || host != "ok.allowed.test" || key == "" {
				return nil, nil
			}
			return []egress.Header{{Name: "X-Api-Key", Value: key}}, nil
		}})
	require.NoError(t, err)
	env := newTestEnvNet(t, NetworkConfig{Subnet: freeSubnet(t), Names: gw})
	t.Cleanup(func() { _ = gw.Close() })

	allow, err := ParseEgress("allow:*.allowed.test")
	require.NoError(t, err)
	env.create(t, InstanceSpec{ID: "names", Network: NetworkPolicy{Group: "project:1", Egress: allow}})
	require.NoError(t, env.rt.Start(context.Background(), "names"))

	// busybox's wget crashes in the test image (static glibc) and its
	// ssl_client speaks too few ciphers, so HTTP is written by hand (nslookup
	// for the name, nc for the request) and HTTPS is a Go client dialing
	// from the instance's network namespace (its address, its rules).
	lookup := func(name string) string {
		out, _, code := env.run(t, "names", "nslookup", name)
		if code != 0 {
			return ""
		}
		addr := ""
		for _, l := range strings.Split(out, "\n") {
			if a, ok := strings.CutPrefix(strings.TrimSpace(l), "Address:"); ok {
				addr = strings.TrimSpace(a)
			}
		}
		return addr
	}
	// request returns the status line and body of GET / with host at addr.
	request := func(host, addr string, tlsOn bool) (string, string) {
		var out string
		if tlsOn {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := netns.Dial(ctx, env.rt.net.nsPath("names"), "tcp4", addr+":443")
			require.NoError(t, err)
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			tc := tls.Client(conn, &tls.Config{ServerName: host, InsecureSkipVerify: true})
			if err := tc.Handshake(); err != nil {
				t.Logf("TLS %s at %s: %v", host, addr, err)
				return "", ""
			}
			fmt.Fprintf(tc, "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", host)
			b, _ := io.ReadAll(tc)
			out = string(b)
		} else {
			script := fmt.Sprintf(`printf 'GET / HTTP/1.0\r\nHost: %s\r\n\r\n' | nc -w 5 %s 80`, host, addr)
			var code int
			out, _, code = env.run(t, "names", "sh", "-c", script)
			t.Logf("GET %s at %s: exit %d", host, addr, code)
		}
		head, body, _ := strings.Cut(out, "\r\n\r\n")
		status, _, _ := strings.Cut(head, "\r\n")
		return status, body
	}
	body := func(status, body string) string {
		if status != "HTTP/1.1 200 OK" && status != "HTTP/1.0 200 OK" {
			return ""
		}
		return body
	}
	get := func(host string, tlsOn bool) string {
		addr := lookup(host)
		if addr == "" {
			return ""
		}
		return body(request(host, addr, tlsOn))
	}

	out, _, code := env.run(t, "names", "nslookup", "ok.allowed.test")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, svc.addr)
	_, _, code = env.run(t, "names", "nslookup", "other.test")
	assert.NotEqual(t, 0, code, "a name outside the policy is not resolved")
	assert.True(t, denied.has("dns", "other.test"))

	assert.Equal(t, "host=ok.allowed.test key=k-one\n", get("ok.allowed.test", false), "the bound header is added on the way")
	assert.Equal(t, "host=ok.allowed.test key=\n", get("ok.allowed.test", true), "TLS passes through untouched")

	// Rotation and revocation apply to the next request.
	keyMu.Lock()
	key = "k-two"
	keyMu.Unlock()
	assert.Equal(t, "host=ok.allowed.test key=k-two\n", get("ok.allowed.test", false))
	keyMu.Lock()
	key = ""
	keyMu.Unlock()
	assert.Equal(t, "host=ok.allowed.test key=\n", get("ok.allowed.test", false))

	// Names smuggled by the Host header or the SNI to an address: other.test
	// is not allowed; sneaky.allowed.test is, but resolves elsewhere. HTTP
	// gets a 403 that says why; TLS is cut.
	status, text := request("other.test", svc.addr, false)
	assert.Equal(t, "HTTP/1.1 403 Forbidden", status)
	assert.Contains(t, text, "name not allowed")
	assert.True(t, denied.has("http", "other.test"))
	status, text = request("sneaky.allowed.test", svc.addr, false)
	assert.Equal(t, "HTTP/1.1 403 Forbidden", status)
	assert.Contains(t, text, "does not resolve to the destination")
	assert.True(t, denied.has("http", "sneaky.allowed.test"))
	status, _ = request("sneaky.allowed.test", svc.addr, true)
	assert.Empty(t, status)
	assert.True(t, denied.has("tls", "sneaky.allowed.test"))
	status, _ = request("other.test", svc.addr, true)
	assert.Empty(t, status)
	assert.True(t, denied.has("tls", "other.test"))
	// The node is no destination, whatever the name says.
	dns.Set("node.allowed.test", svc.hostAddr)
	status, text = request("node.allowed.test", svc.hostAddr, false)
	assert.Equal(t, "HTTP/1.1 403 Forbidden", status)
	assert.Contains(t, text, "the node")

	assert.False(t, env.reach(t, "names", svc.addr, 8080), "names open ports 80 and 443 only")
	assert.Zero(t, svcOther.Load())

	// The header never was in the instance.
	out, _, code = env.run(t, "names", "sh", "-c", "env; cat /proc/1/environ")
	require.Equal(t, 0, code)
	assert.NotContains(t, out, "k-one")
	assert.NotContains(t, out, "k-two")
	grep := exec.Command("grep", "-r", "-l", "k-one", upperDir(t, env.rt, "names"))
	gout, _ := grep.CombinedOutput()
	assert.Empty(t, strings.TrimSpace(string(gout)), "a header value in the instance's files")

	// An envd restart: a new gateway, on new ports, takes the running
	// instance back.
	require.NoError(t, env.rt.Close())
	require.NoError(t, gw.Close())
	gw2, err := egress.New(egress.Config{Upstream: []string{dns.Addr}, OnDeny: denied.add})
	require.NoError(t, err)
	t.Cleanup(func() { _ = gw2.Close() })
	cfg := env.rt.cfg
	cfg.Network.Names = gw2
	rt2, err := New(context.Background(), cfg)
	require.NoError(t, err)
	env.rt = rt2
	assert.Equal(t, "host=ok.allowed.test key=\n", get("ok.allowed.test", false), "reattached after a restart")
	status, _ = request("other.test", svc.addr, false)
	assert.Equal(t, "HTTP/1.1 403 Forbidden", status)

	// Back to addresses only: the redirect goes with the names.
	open, err := ParseEgress("allow:" + svc.addr)
	require.NoError(t, err)
	require.NoError(t, env.rt.SetNetworkPolicy(context.Background(), "names", NetworkPolicy{Group: "project:1", Egress: open}))
	assert.Equal(t, "host=ok.allowed.test key=\n", body(request("ok.allowed.test", svc.addr, false)))
}
