package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// How the API is served:
//   - Config.TLSCert and TLSKey given: TLS with them, re-read when the
//     files change (a renewed certificate needs no restart).
//   - none given, Listen on loopback (127.0.0.0/8, ::1, localhost): plain
//     HTTP. Only processes of this machine reach it, and TLS would protect
//     nothing they cannot read anyway (the admin token is a file).
//   - none given, any other Listen: TLS with the node's own self-signed
//     certificate, made once in DataDir/tls (cert.pem, key.pem, 0600) and
//     kept while it names the node's addresses and is valid for more than
//     selfSignedRenew. envctl trusts it when it finds the node through the
//     data dir; other clients are given it (--ca-cert, ENVD_CA_CERT) or
//     check its SHA-256 fingerprint, which `envd up` prints.
//
// TLS 1.2 is the minimum, and only HTTP/1.1 is offered: exec and
// port-forward are WebSocket upgrades, which HTTP/2 does not carry.

const (
	// TLSDir is the directory of the node's self-signed certificate
	// (TLSDir/cert.pem) and its key (TLSDir/key.pem) under the data dir.
	TLSDir = "tls"
	// selfSignedValid is how long a self-signed certificate is valid;
	// selfSignedRenew how long before its end a start makes a new one.
	selfSignedValid = 365 * 24 * time.Hour
	selfSignedRenew = 30 * 24 * time.Hour
)

// apiTLS is how the API serves TLS; its zero value is plain HTTP.
type apiTLS struct {
	config      *tls.Config
	fingerprint string // of the certificate at start
	selfSigned  string // path of the node's self-signed certificate; "" for the operator's
	// leaf is the certificate (DER) served now, which the node records
	// for the other nodes to trust; nil for plain HTTP.
	leaf func() []byte
}

// certificate is the certificate (DER) the API serves now; nil for plain
// HTTP (before the API is served too).
func (t apiTLS) certificate() []byte {
	if t.leaf == nil {
		return nil
	}
	return t.leaf()
}

// TLSFingerprint is the SHA-256 fingerprint of the certificate the API
// serves (AB:CD:... form, as `openssl x509 -fingerprint -sha256` shows
// it); "" when the API is plain HTTP.
func (n *Node) TLSFingerprint() string { return n.tls.fingerprint }

// SelfSignedCert is the path of the self-signed certificate the API
// serves (clients trust it as their CA); "" when it serves the operator's
// certificate or plain HTTP.
func (n *Node) SelfSignedCert() string { return n.tls.selfSigned }

// setupTLS decides how the API on Config.Listen is served (see above).
func (n *Node) setupTLS() (apiTLS, error) {
	cfg := n.cfg
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	if cfg.TLSCert != "" {
		kp := &keyPairFiles{cert: cfg.TLSCert, key: cfg.TLSKey}
		c, err := kp.get(nil)
		if err != nil {
			return apiTLS{}, err
		}
		base.GetCertificate = kp.get
		leaf := func() []byte {
			if c, err := kp.get(nil); err == nil {
				return c.Leaf.Raw
			}
			return nil
		}
		return apiTLS{config: base, fingerprint: Fingerprint(c.Leaf.Raw), leaf: leaf}, nil
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return apiTLS{}, fmt.Errorf("listen address %q: %w", cfg.Listen, err)
	}
	if isLoopback(host) {
		return apiTLS{}, nil
	}
	dir := filepath.Join(cfg.DataDir, TLSDir)
	c, made, err := selfSigned(dir, host, time.Now())
	if err != nil {
		return apiTLS{}, fmt.Errorf("self-signed certificate in %s: %w", dir, err)
	}
	if made {
		cfg.Logger.Info("made a self-signed certificate for the API", "cert", filepath.Join(dir, "cert.pem"), "names", strings.Join(certNames(c.Leaf), ","))
	}
	base.Certificates = []tls.Certificate{c}
	return apiTLS{config: base, fingerprint: Fingerprint(c.Leaf.Raw), selfSigned: filepath.Join(dir, "cert.pem"),
		leaf: func() []byte { return c.Leaf.Raw }}, nil
}

// apiURL is the URL clients of this machine reach the API at, through
// addr, where it listens: an unspecified address (0.0.0.0, ::) is reached
// at 127.0.0.1, which the self-signed certificate names, and with TLS a
// listen host name stays the name (the certificate names it, not
// necessarily the address it resolved to).
func (n *Node) apiURL(addr net.Addr) string {
	scheme := "http"
	if n.tls.config != nil {
		scheme = "https"
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return scheme + "://" + addr.String()
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	if listenHost, _, err := net.SplitHostPort(n.cfg.Listen); err == nil && n.tls.config != nil &&
		listenHost != "" && net.ParseIP(listenHost) == nil {
		host = listenHost
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// Fingerprint is the SHA-256 fingerprint of a DER certificate, as
// uppercase hex pairs joined by colons.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	parts := make([]string, len(sum))
	for i, b := range sum {
		parts[i] = fmt.Sprintf("%02X", b)
	}
	return strings.Join(parts, ":")
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// selfSigned returns the certificate in dir when it names every address
// the node needs (requiredNames) and stays valid past now+selfSignedRenew,
// else makes a new one (made).
func selfSigned(dir, listenHost string, now time.Time) (c tls.Certificate, made bool, err error) {
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	need := requiredNames(listenHost)
	if c, err := tls.LoadX509KeyPair(certFile, keyFile); err == nil && covers(c.Leaf, need, now) {
		return c, false, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return c, false, err
	}
	certPEM, keyPEM, err := makeSelfSigned(need, extraNames(listenHost), now)
	if err != nil {
		return c, false, err
	}
	// The key first: a crash between the two leaves a pair that does not
	// load, and the next start makes a new one.
	if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return c, false, err
	}
	if err := writeFileAtomic(certFile, certPEM, 0o600); err != nil {
		return c, false, err
	}
	c, err = tls.X509KeyPair(certPEM, keyPEM)
	return c, true, err
}

// requiredNames are what the self-signed certificate must name: the
// listen host (unless it is unspecified), the machine's host name,
// localhost and the loopback addresses.
func requiredNames(listenHost string) []string {
	names := []string{"localhost", "127.0.0.1", "::1"}
	if h, err := os.Hostname(); err == nil && h != "" {
		names = append(names, h)
	}
	if ip := net.ParseIP(listenHost); listenHost != "" && (ip == nil || !ip.IsUnspecified()) {
		names = append(names, listenHost)
	}
	return names
}

// extraNames are named too when the certificate is made, without being
// required later: the machine's unicast addresses when the API listens on
// all of them (they change with networks coming and going, which should
// not change the certificate at every start).
func extraNames(listenHost string) []string {
	if ip := net.ParseIP(listenHost); listenHost != "" && (ip == nil || !ip.IsUnspecified()) {
		return nil
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []string
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.IsGlobalUnicast() {
			out = append(out, ipn.IP.String())
		}
	}
	return out
}

// covers reports whether cert names every host of names and is valid
// from now until past now+selfSignedRenew.
func covers(cert *x509.Certificate, names []string, now time.Time) bool {
	if cert == nil || now.Before(cert.NotBefore) || now.Add(selfSignedRenew).After(cert.NotAfter) {
		return false
	}
	for _, n := range names {
		if cert.VerifyHostname(n) != nil {
			return false
		}
	}
	return true
}

// makeSelfSigned makes an ECDSA P-256 certificate for names, its own
// issuer: a CA certificate so that clients can trust it as their root.
func makeSelfSigned(names, extra []string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	ski := sha256.Sum256(pub)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"envd"}, CommonName: "envd node " + names[len(names)-1]},
		NotBefore:             now.Add(-time.Hour), // clocks of clients differ
		NotAfter:              now.Add(selfSignedValid),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          ski[:20],
		AuthorityKeyId:        ski[:20],
	}
	seen := map[string]bool{}
	for _, n := range append(append([]string{}, names...), extra...) {
		if seen[n] {
			continue
		}
		seen[n] = true
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// certNames are the host names and addresses cert names.
func certNames(cert *x509.Certificate) []string {
	out := append([]string{}, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		out = append(out, ip.String())
	}
	return out
}

// keyPairFiles is the operator's certificate and key, read again when
// either file's modification time changes; a pair that no longer loads
// keeps the last good one in service (and get reports nothing: the
// handshake must not fail for a half-written renewal).
type keyPairFiles struct {
	cert, key string

	mu      sync.Mutex
	loaded  *tls.Certificate
	modTime [2]time.Time
}

func (k *keyPairFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	var mt [2]time.Time
	for i, f := range []string{k.cert, k.key} {
		if st, err := os.Stat(f); err == nil {
			mt[i] = st.ModTime()
		} else if k.loaded == nil {
			return nil, fmt.Errorf("tls: %w", err)
		}
	}
	if k.loaded != nil && mt == k.modTime {
		return k.loaded, nil
	}
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		if k.loaded != nil {
			return k.loaded, nil
		}
		return nil, fmt.Errorf("tls certificate %s and key %s: %w", k.cert, k.key, err)
	}
	if c.Leaf == nil {
		return nil, errors.New("tls: certificate without a leaf")
	}
	k.loaded, k.modTime = &c, mt
	return k.loaded, nil
}
