package client_test

import (
	"crypto/tls"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/client"
)

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// The TLS options validate their input, and a server certificate is
// trusted through them, also with the caller's own http client (whose
// transport they do not change).
func TestTLSOptions(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opts []client.Option
		want string
	}{
		"no PEM":     {[]client.Option{client.WithCACert([]byte("not a certificate"))}, "client: CA certificate: no PEM certificate found"},
		"nil config": {[]client.Option{client.WithTLSConfig(nil)}, "client: tls config is nil"},
		"foreign transport": {[]client.Option{
			client.WithHTTPClient(&http.Client{Transport: roundTripperFunc(http.DefaultTransport.RoundTrip)}),
			client.WithTLSConfig(&tls.Config{}),
		}, "client: a TLS option needs the http client's transport to be an *http.Transport"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := client.New("https://127.0.0.1:1", "t", tc.opts...)
			assert.Nil(t, c)
			assert.EqualError(t, err, tc.want)
		})
	}

	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"ok"}`))
	}))
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	own := &http.Client{Transport: &http.Transport{}}
	c, err := client.New(srv.URL, "t", client.WithHTTPClient(own), client.WithCACert(ca))
	require.NoError(t, err)
	require.NoError(t, c.Healthz(t.Context()))
	_, err = own.Get(srv.URL)
	assert.ErrorContains(t, err, "certificate", "the caller's client does not trust the CA")

	c, err = client.New(srv.URL, "t", client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS10}))
	require.NoError(t, err)
	require.NoError(t, c.Healthz(t.Context()))

	c, err = client.New(srv.URL, "t")
	require.NoError(t, err)
	assert.ErrorContains(t, c.Healthz(t.Context()), "certificate")
}
