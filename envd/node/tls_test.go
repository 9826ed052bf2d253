package node

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/client"
)

// serveTLSAPI serves the real API (on a fake core) as serveAPI does, with
// the TLS setupTLS chooses for cfg, on a loopback port; it returns the
// node's view and the URL clients use.
func serveTLSAPI(t *testing.T, cfg Config) (*Node, string) {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	n := &Node{cfg: cfg}
	var err error
	n.tls, err = n.setupTLS()
	require.NoError(t, err)
	h, err := api.New(apitest.New().Parts())
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := n.apiURL(ln.Addr())
	if n.tls.config != nil {
		ln = tls.NewListener(ln, n.tls.config)
	}
	srv := newHTTPServer(h)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return n, url
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Off loopback without a certificate, the API serves the node's
// self-signed one: a client that trusts it (WithCACert) gets answers, one
// that does not gets a certificate error, and TLS below 1.2 is refused.
func TestSelfSignedAPI(t *testing.T) {
	dir := t.TempDir()
	n, url := serveTLSAPI(t, Config{DataDir: dir, Listen: "0.0.0.0:7443"})
	require.Equal(t, "https", url[:5], url)
	certFile := filepath.Join(dir, TLSDir, "cert.pem")
	assert.Equal(t, certFile, n.SelfSignedCert())
	certPEM, err := os.ReadFile(certFile)
	require.NoError(t, err)
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block)
	assert.Equal(t, Fingerprint(block.Bytes), n.TLSFingerprint(), "the fingerprint printed is the certificate's")
	assert.Len(t, n.TLSFingerprint(), 32*3-1)

	trusted, err := client.New(url, apitest.Token, client.WithCACert(certPEM))
	require.NoError(t, err)
	assert.NoError(t, trusted.Healthz(ctxT(t)))
	_, err = trusted.ListProjects(ctxT(t))
	assert.NoError(t, err)

	untrusted, err := client.New(url, apitest.Token)
	require.NoError(t, err)
	err = untrusted.Healthz(ctxT(t))
	var unknown x509.UnknownAuthorityError
	assert.True(t, errors.As(err, &unknown), "want a certificate error, got %v", err)

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	// The client raises MinVersion to 1.2, so offer 1.1 with a raw client.
	old := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11}}}
	_, err = old.Get(url + "/healthz")
	assert.ErrorContains(t, err, "protocol version", "TLS 1.1 is refused")
}

// The self-signed certificate names the node's addresses, lives in
// DataDir/tls (0600), is reused by later starts (same fingerprint) and
// made anew when it no longer names the listen address or nears its end.
func TestSelfSignedReused(t *testing.T) {
	dir := filepath.Join(t.TempDir(), TLSDir)
	now := time.Now()
	first, made, err := selfSigned(dir, "0.0.0.0", now)
	require.NoError(t, err)
	assert.True(t, made)
	host, _ := os.Hostname()
	for _, name := range []string{"localhost", "127.0.0.1", "::1", host} {
		assert.NoError(t, first.Leaf.VerifyHostname(name), name)
	}
	assert.Equal(t, x509.ECDSA, first.Leaf.PublicKeyAlgorithm)
	for _, f := range []string{"cert.pem", "key.pem"} {
		st, err := os.Stat(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), f)
	}

	again, made, err := selfSigned(dir, "0.0.0.0", now.Add(time.Hour))
	require.NoError(t, err)
	assert.False(t, made, "a restart reuses the certificate")
	assert.Equal(t, Fingerprint(first.Leaf.Raw), Fingerprint(again.Leaf.Raw))

	named, made, err := selfSigned(dir, "envd.example", now)
	require.NoError(t, err)
	assert.True(t, made, "a listen host the certificate does not name makes a new one")
	assert.NoError(t, named.Leaf.VerifyHostname("envd.example"))

	_, made, err = selfSigned(dir, "envd.example", now.Add(selfSignedValid-selfSignedRenew+time.Hour))
	require.NoError(t, err)
	assert.True(t, made, "a certificate near its end is renewed")
}

// Which listen addresses get TLS: the operator's certificate anywhere,
// none on loopback, the self-signed one elsewhere; a certificate without
// its key is refused at start.
func TestSetupTLS(t *testing.T) {
	dir := t.TempDir()
	certPEM, keyPEM, err := makeSelfSigned([]string{"localhost", "127.0.0.1"}, nil, time.Now())
	require.NoError(t, err)
	certFile, keyFile := filepath.Join(dir, "op.crt"), filepath.Join(dir, "op.key")
	require.NoError(t, os.WriteFile(certFile, certPEM, 0o600))
	require.NoError(t, os.WriteFile(keyFile, keyPEM, 0o600))
	block, _ := pem.Decode(certPEM)

	tests := []struct {
		name       string
		cfg        Config
		wantTLS    bool
		selfSigned bool
	}{
		{name: "loopback", cfg: Config{Listen: "127.0.0.1:0"}},
		{name: "localhost", cfg: Config{Listen: "localhost:7000"}},
		{name: "ipv6 loopback", cfg: Config{Listen: "[::1]:0"}},
		{name: "all addresses", cfg: Config{Listen: ":7443"}, wantTLS: true, selfSigned: true},
		{name: "a host name", cfg: Config{Listen: "envd.example:7443"}, wantTLS: true, selfSigned: true},
		{name: "operator's certificate on loopback", cfg: Config{Listen: "127.0.0.1:0", TLSCert: certFile, TLSKey: keyFile}, wantTLS: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.DataDir = t.TempDir()
			tt.cfg.Logger = slog.New(slog.DiscardHandler)
			n := &Node{cfg: tt.cfg}
			got, err := n.setupTLS()
			require.NoError(t, err)
			assert.Equal(t, tt.wantTLS, got.config != nil)
			assert.Equal(t, tt.selfSigned, got.selfSigned != "")
			if tt.wantTLS {
				assert.Equal(t, uint16(tls.VersionTLS12), got.config.MinVersion)
			}
			if tt.cfg.TLSCert != "" {
				assert.Equal(t, Fingerprint(block.Bytes), got.fingerprint)
			}
		})
	}

	_, err = withDefaults(Config{DataDir: t.TempDir(), TLSCert: certFile})
	assert.ErrorContains(t, err, "give both or neither")
}

// An unspecified listen address is reached at 127.0.0.1, which the
// self-signed certificate names; a listen host name over TLS stays the name.
func TestAPIURL(t *testing.T) {
	plain := &Node{}
	assert.Equal(t, "http://127.0.0.1:80", plain.apiURL(&net.TCPAddr{IP: net.IPv4zero, Port: 80}))
	assert.Equal(t, "http://127.0.0.1:80", plain.apiURL(&net.TCPAddr{IP: net.IPv6unspecified, Port: 80}))
	secure := &Node{cfg: Config{Listen: "10.1.2.3:0"}, tls: apiTLS{config: &tls.Config{}}}
	assert.Equal(t, "https://10.1.2.3:443", secure.apiURL(&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 443}))
	named := &Node{cfg: Config{Listen: "envd.example:0"}, tls: apiTLS{config: &tls.Config{}}}
	assert.Equal(t, "https://envd.example:443", named.apiURL(&net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 443}),
		"the name the certificate holds, not the address it resolved to")
}
