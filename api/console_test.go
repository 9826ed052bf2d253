package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apispec"
	"github.com/envd-dev/envd/api/apitest"
)

// The console is served without a token, every answer under a policy that
// allows the node's own origin only, the page with a nonce of its own that
// the policy names; and every answer matches docs/openapi.yaml.
func TestConsoleServesTheEmbeddedPage(t *testing.T) {
	doc, err := apispec.LoadSpec(context.Background(), specPath)
	require.NoError(t, err)
	v, err := apispec.NewValidator(doc)
	require.NoError(t, err)
	h, err := api.New(apitest.New().Parts())
	require.NoError(t, err)
	srv := httptest.NewServer(v.Wrap(h))
	t.Cleanup(srv.Close)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string) (*http.Response, string) {
		t.Helper()
		resp, err := noRedirect.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}

	for _, path := range []string{"/", "/console"} {
		resp, _ := get(path)
		assert.Equal(t, http.StatusFound, resp.StatusCode, path)
		assert.Equal(t, "/console/", resp.Header.Get("Location"), path)
	}

	nonceOf := regexp.MustCompile(`<meta name="envd-style-nonce" content="([^"]+)">`)
	resp, page := get("/console/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	m := nonceOf.FindStringSubmatch(page)
	require.NotNil(t, m, "the page has no nonce: %s", page)
	csp := resp.Header.Get("Content-Security-Policy")
	assert.Contains(t, csp, "default-src 'none'")
	assert.Contains(t, csp, "script-src 'self';")
	assert.Contains(t, csp, "style-src 'self' 'nonce-"+m[1]+"'")
	assert.Contains(t, csp, "connect-src 'self'")
	assert.NotContains(t, csp, "unsafe")
	_, again := get("/console/")
	assert.NotEqual(t, m[1], nonceOf.FindStringSubmatch(again)[1], "two answers share a nonce")

	script := regexp.MustCompile(`src="(app-[A-Z0-9]+\.js)"`).FindStringSubmatch(page)
	require.NotNil(t, script, page)
	resp, body := get("/console/" + script[1])
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/javascript; charset=utf-8", resp.Header.Get("Content-Type"))
	assert.Contains(t, resp.Header.Get("Cache-Control"), "immutable")
	assert.Greater(t, len(body), 1000)

	for _, path := range []string{"/favicon.ico", "/console/favicon.svg"} {
		resp, body = get(path)
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Equal(t, "image/svg+xml", resp.Header.Get("Content-Type"), path)
		assert.True(t, strings.HasPrefix(body, "<svg"), path)
	}

	for _, path := range []string{"/console/nothing.js", "/console/..%2fweb.go", "/console/a/b"} {
		resp, body = get(path)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		assert.Contains(t, body, `"code":"not_found"`, path)
	}

	var report strings.Builder
	assert.False(t, v.Report(&report), "violations:\n%s", report.String())
}
