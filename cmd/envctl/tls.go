package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/envd-dev/envd/client"
)

// tlsOptions are the client options that make envctl trust the server's
// certificate: --ca-cert or ENVD_CA_CERT (only that CA), else, when the
// URL came from the data dir (dataDir != ""), the node's self-signed
// certificate there besides the system's roots (so a node that serves a
// public certificate after a self-signed one still works).
func (a *app) tlsOptions(url, dataDir string) ([]client.Option, error) {
	if !strings.HasPrefix(url, "https://") {
		return nil, nil
	}
	caFile := a.caCert
	if caFile == "" {
		caFile = os.Getenv("ENVD_CA_CERT")
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("CA certificate: %w", err)
		}
		return []client.Option{client.WithCACert(pem)}, nil
	}
	if dataDir == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(filepath.Join(dataDir, "tls", "cert.pem"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("the node's certificate: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("the node's certificate %s: no PEM certificate found", filepath.Join(dataDir, "tls", "cert.pem"))
	}
	return []client.Option{client.WithTLSConfig(&tls.Config{RootCAs: pool})}, nil
}
