package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
)

// WithCACert trusts the PEM certificates in pem, and only them, as the
// server's certificate authorities: the node's self-signed certificate
// (DATA_DIR/tls/cert.pem) or a private CA. Default: the system's roots.
// TLS 1.2 is the minimum either way.
func WithCACert(pem []byte) Option {
	return func(o *options) error {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return errors.New("CA certificate: no PEM certificate found")
		}
		o.tls = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		return nil
	}
}

// WithTLSConfig sets the TLS configuration of https connections (a copy
// is kept; a MinVersion below TLS 1.2 is raised to it). Default: the
// system's roots, TLS 1.2 minimum. It applies to the transport of
// WithHTTPClient's client too, which must then be an *http.Transport (or
// nil).
func WithTLSConfig(cfg *tls.Config) Option {
	return func(o *options) error {
		if cfg == nil {
			return errors.New("tls config is nil")
		}
		o.tls = cfg.Clone()
		if o.tls.MinVersion < tls.VersionTLS12 {
			o.tls.MinVersion = tls.VersionTLS12
		}
		return nil
	}
}

// withTLS gives hc a transport that uses cfg; hc itself is not changed.
func withTLS(hc *http.Client, cfg *tls.Config) (*http.Client, error) {
	var t *http.Transport
	switch rt := hc.Transport.(type) {
	case nil:
		t = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		t = rt.Clone()
	default:
		return nil, errors.New("a TLS option needs the http client's transport to be an *http.Transport")
	}
	t.TLSClientConfig = cfg
	c := *hc
	c.Transport = t
	return &c, nil
}
