package egress

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCA: a generated CA reads back, issues per-host certificates that
// verify against it for that host only (and are kept), and a key that is
// not the certificate's, or a certificate that is not a CA's, is refused.
func TestCA(t *testing.T) {
	t.Parallel()
	cert, key, err := GenerateCA("test CA")
	require.NoError(t, err)
	ca, err := ParseCA(append(append([]byte{}, key...), cert...))
	require.NoError(t, err, "key first, one slice")
	assert.Equal(t, cert, ca.CertPEM())
	assert.NotContains(t, string(ca.CertPEM()), "PRIVATE KEY")

	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(ca.CertPEM()))
	leaf, err := ca.Certificate("api.example.test")
	require.NoError(t, err)
	_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.example.test", Roots: roots})
	assert.NoError(t, err)
	_, err = leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "other.example.test", Roots: roots})
	assert.Error(t, err, "a certificate is for its host only")
	again, err := ca.Certificate("api.example.test")
	require.NoError(t, err)
	assert.Same(t, leaf, again, "issued once, then kept")

	otherCert, otherKey, err := GenerateCA("other CA")
	require.NoError(t, err)
	_, err = ParseCA(cert, otherKey)
	assert.ErrorContains(t, err, "does not match")
	_, err = ParseCA(otherCert)
	assert.ErrorContains(t, err, "want a CERTIFICATE and a PRIVATE KEY")
	leafCA, err := ParseCA(leafPEM(t, leaf.Certificate[0]), key)
	assert.Nil(t, leafCA)
	assert.Error(t, err, "a leaf is not a CA")
}

func leafPEM(t *testing.T, der []byte) []byte {
	t.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// BenchmarkCertificate: what a TLS connection to a bound host costs the
// proxy in certificates: issuing one for a new host, and taking the kept
// one.
func BenchmarkCertificate(b *testing.B) {
	cert, key, err := GenerateCA("bench CA")
	require.NoError(b, err)
	ca, err := ParseCA(cert, key)
	require.NoError(b, err)
	b.Run("issue", func(b *testing.B) {
		i := 0
		for b.Loop() {
			i++
			if _, err := ca.Certificate(fmt.Sprintf("h%d.example.test", i)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kept", func(b *testing.B) {
		_, _ = ca.Certificate("kept.example.test")
		for b.Loop() {
			if _, err := ca.Certificate("kept.example.test"); err != nil {
				b.Fatal(err)
			}
		}
	})
}
