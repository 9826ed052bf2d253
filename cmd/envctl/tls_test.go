package main

import (
	"encoding/pem"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
)

// An https server is trusted through the data dir's tls/cert.pem when the
// URL comes from the data dir, else through --ca-cert or ENVD_CA_CERT;
// without any, envctl fails with a certificate error.
func TestServerOverTLS(t *testing.T) {
	t.Parallel()
	h, err := api.New(apitest.New().Parts(), api.WithEventPollInterval(5*time.Millisecond))
	require.NoError(t, err)
	srv := httptest.NewTLSServer(h)
	t.Cleanup(srv.Close)
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "envd.url"), []byte(srv.URL+"\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "admin.token"), []byte(apitest.Token+"\n"), 0o600))
	noCert := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(noCert, "envd.url"), []byte(srv.URL+"\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(noCert, "admin.token"), []byte(apitest.Token+"\n"), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "tls"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tls", "cert.pem"), cert, 0o600))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(caFile, cert, 0o600))

	byURL := []string{"ENVD_URL=" + srv.URL, "ENVD_TOKEN=" + apitest.Token}
	tests := []struct {
		name string
		env  []string
		args []string
		ok   bool
	}{
		{name: "data dir with the node's certificate", args: []string{"--data-dir", dir}, ok: true},
		{name: "data dir without it", args: []string{"--data-dir", noCert}},
		{name: "ENVD_URL alone", env: byURL},
		{name: "ENVD_CA_CERT", env: append([]string{"ENVD_CA_CERT=" + caFile}, byURL...), ok: true},
		{name: "--ca-cert", env: byURL, args: []string{"--ca-cert", caFile}, ok: true},
		{name: "--ca-cert over the data dir's", args: []string{"--data-dir", noCert, "--ca-cert", caFile}, ok: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := envctl(t, tt.env, nil, append(tt.args, "-o", "json", "info")...)
			if tt.ok {
				require.Equal(t, 0, r.code, r.stderr)
				assert.Contains(t, r.stdout, `"node": "node-1"`)
				return
			}
			assert.Equal(t, 1, r.code)
			assert.Contains(t, r.stderr, "certificate")
		})
	}
}
