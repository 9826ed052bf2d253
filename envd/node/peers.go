package node

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/envd-dev/envd/errdefs"
)

// How a node reaches the other nodes' APIs when it forwards a request
// about an instance they run (api.WithPeerTransport, api.PreviewHosts).
//
// Every node records the certificate its API serves in the node table when
// it joins (and again when an operator's certificate is renewed on disk):
// envd.ClusterConfig.TLSCertificate. Over https, the transport to node N
// trusts exactly the certificate N recorded: it is the only root of the
// verification (no system roots), the certificate must name the host of
// N's URL, and the leaf presented must be that certificate byte for byte
// (a certificate it signed is not enough). So the default self-signed
// certificates of a cluster's nodes work without a shared CA, and a
// server at N's address that presents any other certificate is refused.
// A node that recorded no certificate (plain HTTP, or a node of an
// earlier version) is reached with the system roots, as before.

// peerTransports hands out one transport per recorded certificate.
type peerTransports struct {
	certs func(ctx context.Context, node string) ([]byte, error)

	mu     sync.Mutex
	pinned map[[sha256.Size]byte]*http.Transport
	system *http.Transport
}

// maxPinned bounds the transports kept: certificates change rarely, and a
// dropped one is made again at the next request.
const maxPinned = 256

func newPeerTransports(certs func(ctx context.Context, node string) ([]byte, error)) *peerTransports {
	return &peerTransports{certs: certs, pinned: map[[sha256.Size]byte]*http.Transport{},
		system: http.DefaultTransport.(*http.Transport).Clone()}
}

// transport is the api.PeerTransport of the node.
func (p *peerTransports) transport(ctx context.Context, node string) (http.RoundTripper, error) {
	der, err := p.certs(ctx, node)
	if err != nil {
		return nil, err
	}
	if len(der) == 0 {
		return p.system, nil
	}
	sum := sha256.Sum256(der)
	p.mu.Lock()
	defer p.mu.Unlock()
	if t, ok := p.pinned[sum]; ok {
		return pinnedTransport{t, node, Fingerprint(der)}, nil
	}
	cfg, err := pinnedTLS(der)
	if err != nil {
		return nil, fmt.Errorf("the TLS certificate node %q recorded: %v: %w", node, err, errdefs.ErrUnavailable)
	}
	if len(p.pinned) >= maxPinned {
		for k, t := range p.pinned {
			t.CloseIdleConnections()
			delete(p.pinned, k)
		}
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = cfg
	t.ForceAttemptHTTP2 = false // the API offers HTTP/1.1 only
	p.pinned[sum] = t
	return pinnedTransport{t, node, Fingerprint(der)}, nil
}

// pinnedTLS trusts the certificate der and nothing else.
func pinnedTLS(der []byte) (*tls.Config, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    roots,
		NextProtos: []string{"http/1.1"}, // exec and port-forward are WebSocket upgrades
		// After the chain to the pinned root verified: the leaf must be
		// the pinned certificate itself.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 || !cs.PeerCertificates[0].Equal(cert) {
				return errNotPinned
			}
			return nil
		},
	}, nil
}

var errNotPinned = errors.New("the certificate presented is not the one the node recorded")

// pinnedTransport names the node and the certificate it should have
// presented when the handshake refuses the one it did.
type pinnedTransport struct {
	t           *http.Transport
	node        string
	fingerprint string
}

func (p pinnedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := p.t.RoundTrip(r)
	var verr *tls.CertificateVerificationError
	if err != nil && (errors.As(err, &verr) || errors.Is(err, errNotPinned)) {
		return nil, fmt.Errorf("node %q presented a TLS certificate other than the one it recorded (SHA-256 %s): refused: %w", p.node, p.fingerprint, err)
	}
	return resp, err
}
