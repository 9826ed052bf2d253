package egress

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// A CA issues the certificates the proxy presents to instances for the
// hosts it terminates TLS for (hosts with an HTTPS secret binding). Its
// private key stays in the node's process and its key file; instances get
// its certificate only (CertPEM), to trust.
type CA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // by host name
}

// leafLife is how long an issued certificate is valid; it is issued again
// when less than leafRenew of it is left.
const (
	leafLife  = 24 * time.Hour
	leafRenew = time.Hour
)

// GenerateCA makes a new CA (ECDSA P-256, valid ten years) and returns its
// certificate and private key in PEM.
func GenerateCA(commonName string) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName, Organization: []string{"envd"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}), nil
}

// ParseCA reads a CA from PEM: one CERTIFICATE block (a CA certificate)
// and one PRIVATE KEY block (PKCS#8, or EC/RSA PRIVATE KEY) that matches it,
// in any order, in one or two byte slices.
func ParseCA(pemBytes ...[]byte) (*CA, error) {
	var certDER, keyDER []byte
	var keyType string
	for _, b := range pemBytes {
		for {
			var blk *pem.Block
			blk, b = pem.Decode(b)
			if blk == nil {
				break
			}
			switch blk.Type {
			case "CERTIFICATE":
				if certDER == nil {
					certDER = blk.Bytes
				}
			case "PRIVATE KEY", "EC PRIVATE KEY", "RSA PRIVATE KEY":
				keyDER, keyType = blk.Bytes, blk.Type
			}
		}
	}
	if certDER == nil || keyDER == nil {
		return nil, errors.New("egress CA: want a CERTIFICATE and a PRIVATE KEY in PEM")
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("egress CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("egress CA: the certificate is not a CA's")
	}
	var k any
	switch keyType {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(keyDER)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(keyDER)
	default:
		k, err = x509.ParsePKCS1PrivateKey(keyDER)
	}
	if err != nil {
		return nil, fmt.Errorf("egress CA key: %w", err)
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("egress CA key: not a signing key")
	}
	if pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("egress CA: the key does not match the certificate")
	}
	return &CA{cert: cert, key: signer, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: certDER}),
		leaves: map[string]*tls.Certificate{}}, nil
}

// Subject is the CA certificate's subject, for display.
func (ca *CA) Subject() string { return ca.cert.Subject.String() }

// CertPEM is the CA's certificate, what instances trust. Never the key.
func (ca *CA) CertPEM() []byte { return ca.certPEM }

// Certificate returns a certificate for host signed by the CA, issued on
// first use and kept until near its end.
func (ca *CA) Certificate(host string) (*tls.Certificate, error) {
	now := time.Now()
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok && now.Add(leafRenew).Before(c.Leaf.NotAfter) {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}
	if len(ca.leaves) > 4096 { // bound the cache: hosts are few, but names are cheap
		clear(ca.leaves)
	}
	ca.leaves[host] = c
	return c, nil
}
