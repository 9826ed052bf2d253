package api_test

import (
	"archive/tar"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/limiter"
)

// Archive downloads and uploads in progress hold a tenant's archives
// slots: past the limit the next is 429 resource_exhausted with
// Retry-After, before anything is read; a transfer's end frees its slot.
func TestArchiveLimitPerTenant(t *testing.T) {
	t.Parallel()
	core := apitest.New()
	t.Cleanup(func() { os.RemoveAll(core.Files.Dir()) })
	lim := limiter.New(map[string]limiter.Limit{types.AdmitArchives: {Max: 1, NodeMax: 10, RetryAfter: 3 * time.Second}})
	h, err := api.New(limited(core, lim), api.WithErrorLog(io.Discard))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	// More than the socket buffers hold: a download whose client does not
	// read stays in progress.
	require.NoError(t, os.MkdirAll(filepath.Join(core.Files.Dir(), "src"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(core.Files.Dir(), "src", "big"), make([]byte, 64<<20), 0o644))

	req, err := http.NewRequest("GET", srv.URL+"/v1/instances/i-1/files/archive?path=/src", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+apitest.Token)
	stalled, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer stalled.Body.Close() // also when the test fails: srv.Close waits for the handler
	require.Equal(t, 200, stalled.StatusCode)
	eventually(t, lim, types.AdmitArchives, 1)

	exhausted := func(r response) {
		t.Helper()
		assert.Equal(t, http.StatusTooManyRequests, r.status, "body %s", r.body)
		assert.Equal(t, "resource_exhausted", errorOf(t, r).Code)
		assert.Equal(t, "3", r.header.Get("Retry-After"))
		assert.Equal(t, "archives", errorOf(t, r).Details["kind"])
	}
	exhausted(do(t, srv, "GET", "/v1/instances/i-1/files/archive?path=/src", nil, nil))
	upload := tarOf(t, map[string]string{"a": "x"})
	exhausted(do(t, srv, "POST", "/v1/instances/i-1/files/archive?path=/dst&mkdir=1", upload, nil))
	_, err = os.Stat(filepath.Join(core.Files.Dir(), "dst"))
	assert.True(t, os.IsNotExist(err), "a refused upload made nothing")

	stalled.Body.Close()
	eventually(t, lim, types.AdmitArchives, 0)
	r := do(t, srv, "POST", "/v1/instances/i-1/files/archive?path=/dst&mkdir=1", tarOf(t, map[string]string{"a": "x"}), nil)
	assert.Equal(t, 200, r.status, "body %s", r.body)
	eventually(t, lim, types.AdmitArchives, 0)
}

// tarOf is a tar of files (name -> content).
func tarOf(t *testing.T, files map[string]string) io.Reader {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, content := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(content)), Mode: 0o644}))
		_, err := tw.Write([]byte(content))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return &b
}
