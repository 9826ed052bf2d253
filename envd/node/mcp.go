package node

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"sync"

	"github.com/envd-dev/envd/client"
)

// mcpClients returns how the /mcp endpoint (api/mcp) makes its client of
// this node's own API at *url, with a caller's token. url and n.tls are read
// at the first request, which comes after serveAPI set them. The clients
// share one transport, so their connections to the API are reused.
func (n *Node) mcpClients(url *string) func(token string) (*client.Client, error) {
	hc := sync.OnceValues(func() (*http.Client, error) {
		t := http.DefaultTransport.(*http.Transport).Clone()
		if p := n.tls.selfSigned; p != "" {
			pem, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, errors.New("node certificate: no PEM certificate found")
			}
			t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		return &http.Client{Transport: t}, nil
	})
	return func(token string) (*client.Client, error) {
		c, err := hc()
		if err != nil {
			return nil, err
		}
		return client.New(*url, token, client.WithHTTPClient(c), client.WithUserAgent("envd-mcp"))
	}
}
