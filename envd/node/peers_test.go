package node

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// selfSignedPair is a node's default certificate for 127.0.0.1.
func selfSignedPair(t *testing.T) tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := makeSelfSigned([]string{"localhost", "127.0.0.1"}, nil, time.Now())
	require.NoError(t, err)
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	return c
}

// issuedBy is a certificate for 127.0.0.1 that the self-signed
// certificate ca signed (it is a CA: clients may trust it as a root).
func issuedBy(t *testing.T, ca tls.Certificate) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "impostor"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Leaf, &key.PublicKey, ca.PrivateKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	c, err := tls.X509KeyPair(append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Leaf.Raw})...),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	require.NoError(t, err)
	return c
}

// A node forwards to another over https trusting exactly the certificate
// that node recorded: its own self-signed certificate is accepted, any
// other (another self-signed one, one the recorded certificate signed) is
// refused with an error that says so, and a node that recorded none is
// reached with the system roots, which know no self-signed certificate.
func TestPeerTransportTrustsTheRecordedCertificate(t *testing.T) {
	recorded := selfSignedPair(t)
	other := selfSignedPair(t)
	tests := []struct {
		name    string
		serves  tls.Certificate
		records []byte
		wantErr string // "" = answered
	}{
		{"the recorded certificate", recorded, recorded.Leaf.Raw, ""},
		{"another self-signed certificate", other, recorded.Leaf.Raw, "presented a TLS certificate other than the one it recorded"},
		{"a certificate the recorded one signed", issuedBy(t, recorded), recorded.Leaf.Raw, "presented a TLS certificate other than the one it recorded"},
		{"none recorded: system roots", recorded, nil, "certificate signed by unknown authority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "node-b")
			}))
			srv.TLS = &tls.Config{Certificates: []tls.Certificate{tt.serves}, NextProtos: []string{"http/1.1"}}
			srv.StartTLS()
			defer srv.Close()

			var asked string
			peers := newPeerTransports(func(_ context.Context, node string) ([]byte, error) {
				asked = node
				return tt.records, nil
			})
			rt, err := peers.transport(context.Background(), "node-b")
			require.NoError(t, err)
			assert.Equal(t, "node-b", asked)
			req, err := http.NewRequest(http.MethodGet, srv.URL+"/healthz", nil)
			require.NoError(t, err)
			resp, err := rt.RoundTrip(req)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				if tt.records != nil {
					assert.Contains(t, err.Error(), Fingerprint(tt.records), "names the certificate it expected")
				}
				return
			}
			require.NoError(t, err)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			assert.Equal(t, "node-b", string(b))
		})
	}
}
