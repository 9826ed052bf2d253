package api_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apispec"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/api/types"
)

// The file routes on the fake core, which serves a directory of the test
// process as every instance's root; every request and answer is checked
// against docs/openapi.yaml.
func TestFileRoutes(t *testing.T) {
	doc, err := apispec.LoadSpec(context.Background(), specPath)
	require.NoError(t, err)
	v, err := apispec.NewValidator(doc)
	require.NoError(t, err)
	core := apitest.New()
	t.Cleanup(func() { os.RemoveAll(core.Files.Dir()) })
	h, err := api.New(core.Parts(), api.WithKeepAlive(50*time.Millisecond))
	require.NoError(t, err)
	srv := httptest.NewServer(v.Wrap(h))
	t.Cleanup(srv.Close)

	do := func(method, path string, body io.Reader, header ...string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apitest.Token)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	readAll := func(resp *http.Response) string {
		t.Helper()
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(b)
	}
	code := func(resp *http.Response) string {
		t.Helper()
		var body types.ErrorBody
		require.NoError(t, json.Unmarshal([]byte(readAll(resp)), &body))
		return body.Error.Code
	}

	content := bytes.Repeat([]byte("0123456789"), 1000) // 10000 bytes of text
	resp := do("PUT", "/v1/instances/i-1/files?path=/src/notes.txt&mkdir=1&mode=0600", bytes.NewReader(content),
		"Content-Type", "application/octet-stream")
	body := readAll(resp)
	require.Equal(t, 200, resp.StatusCode, body)
	var fi types.FileInfo
	require.NoError(t, json.Unmarshal([]byte(body), &fi))
	assert.Equal(t, "0600", fi.Mode)
	assert.Equal(t, int64(10000), fi.Size)

	t.Run("whole file", func(t *testing.T) {
		resp := do("GET", "/v1/instances/i-1/files?path=/src/notes.txt", nil)
		assert.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "bytes", resp.Header.Get("Accept-Ranges"))
		assert.Equal(t, "10000", resp.Header.Get("Content-Length"))
		assert.Equal(t, "text/plain; charset=utf-8", resp.Header.Get("Content-Type"))
		assert.Equal(t, string(content), readAll(resp))
	})
	t.Run("range", func(t *testing.T) {
		resp := do("GET", "/v1/instances/i-1/files?path=/src/notes.txt", nil, "Range", "bytes=9995-")
		assert.Equal(t, 206, resp.StatusCode)
		assert.Equal(t, "bytes 9995-9999/10000", resp.Header.Get("Content-Range"))
		assert.Equal(t, "56789", readAll(resp))
		resp = do("GET", "/v1/instances/i-1/files?path=/src/notes.txt", nil, "Range", "bytes=20000-")
		assert.Equal(t, 416, resp.StatusCode)
		readAll(resp)
	})
	t.Run("sniffed type", func(t *testing.T) {
		png := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 64)...)
		resp := do("PUT", "/v1/instances/i-1/files?path=/src/image", bytes.NewReader(png))
		require.Equal(t, 200, resp.StatusCode, readAll(resp))
		resp = do("GET", "/v1/instances/i-1/files?path=/src/image", nil)
		assert.Equal(t, "image/png", resp.Header.Get("Content-Type"))
		readAll(resp)
	})
	t.Run("listing", func(t *testing.T) {
		resp := do("GET", "/v1/instances/i-1/files?path=/src", nil)
		require.Equal(t, 200, resp.StatusCode)
		var l types.FileList
		require.NoError(t, json.Unmarshal([]byte(readAll(resp)), &l))
		require.Len(t, l.Entries, 2)
		assert.Equal(t, "image", l.Entries[0].Name)
		assert.Equal(t, "/src/notes.txt", l.Entries[1].Path)
	})
	t.Run("listing in pages", func(t *testing.T) {
		require.NoError(t, os.MkdirAll(filepath.Join(core.Files.Dir(), "many"), 0o755))
		for i := range 25 {
			require.NoError(t, os.WriteFile(filepath.Join(core.Files.Dir(), "many", fmt.Sprintf("f%02d", i)), nil, 0o644))
		}
		var names []string
		next := "/v1/instances/i-1/files?path=/many&limit=10"
		for pages := 0; next != ""; pages++ {
			require.Less(t, pages, 3)
			resp := do("GET", next, nil)
			require.Equal(t, 200, resp.StatusCode)
			link := resp.Header.Get("Link")
			var l types.FileList
			require.NoError(t, json.Unmarshal([]byte(readAll(resp)), &l))
			assert.LessOrEqual(t, len(l.Entries), 10)
			for _, e := range l.Entries {
				names = append(names, e.Name)
			}
			next = ""
			if l.NextPageToken != "" {
				assert.Contains(t, link, "page_token="+url.QueryEscape(l.NextPageToken))
				next = "/v1/instances/i-1/files?path=/many&limit=10&page_token=" + url.QueryEscape(l.NextPageToken)
			} else {
				assert.Empty(t, link, "the last page has no Link")
			}
		}
		require.Len(t, names, 25)
		assert.True(t, sort.StringsAreSorted(names))
		for _, q := range []string{"limit=0", "limit=1001", "page_token=nope"} {
			resp := do("GET", "/v1/instances/i-1/files?path=/many&"+q, nil)
			assert.Equal(t, 400, resp.StatusCode, q)
			assert.Equal(t, "invalid_argument", code(resp))
		}
	})
	t.Run("too large", func(t *testing.T) {
		resp := do("PUT", "/v1/instances/i-1/files?path=/big", bytes.NewReader(make([]byte, 2<<20)))
		assert.Equal(t, 413, resp.StatusCode)
		assert.Equal(t, "too_large", code(resp))
		_, err := os.Stat(filepath.Join(core.Files.Dir(), "big"))
		assert.True(t, os.IsNotExist(err))
	})
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			method, path string
			status       int
			code         string
		}{
			{"GET", "/v1/instances/i-1/files?path=src", 400, "invalid_argument"},
			{"GET", "/v1/instances/i-1/files?path=/src/../etc", 400, "invalid_argument"},
			{"GET", "/v1/instances/i-1/files?path=/nope", 404, "not_found"},
			{"PUT", "/v1/instances/i-1/files?path=/nope/x", 404, "not_found"},
			{"PUT", "/v1/instances/i-1/files?path=/src", 409, "failed_precondition"},
			{"DELETE", "/v1/instances/i-1/files?path=/src", 409, "failed_precondition"},
			{"GET", "/v1/instances/i-missing/files?path=/", 404, "not_found"},
			{"GET", "/v1/instances/i-1/files?path=/&uid=-1", 400, "invalid_argument"},
		} {
			resp := do(tc.method, tc.path, strings.NewReader(""))
			assert.Equal(t, tc.status, resp.StatusCode, tc.method+" "+tc.path)
			assert.Equal(t, tc.code, code(resp), tc.method+" "+tc.path)
		}
	})
	t.Run("mkdir move copy delete", func(t *testing.T) {
		resp := do("POST", "/v1/instances/i-1/files/mkdir", strings.NewReader(`{"path":"/a/b","parents":true}`), "Content-Type", "application/json")
		assert.Equal(t, 200, resp.StatusCode, readAll(resp))
		resp = do("POST", "/v1/instances/i-1/files/copy", strings.NewReader(`{"from":"/src","to":"/a/b/src"}`), "Content-Type", "application/json")
		assert.Equal(t, 200, resp.StatusCode, readAll(resp))
		resp = do("POST", "/v1/instances/i-1/files/move", strings.NewReader(`{"from":"/a/b/src/notes.txt","to":"/a/n.txt"}`), "Content-Type", "application/json")
		assert.Equal(t, 200, resp.StatusCode, readAll(resp))
		b, err := os.ReadFile(filepath.Join(core.Files.Dir(), "a/n.txt"))
		require.NoError(t, err)
		assert.Equal(t, content, b)
		resp = do("DELETE", "/v1/instances/i-1/files?path=/a&recursive=1", nil)
		assert.Equal(t, 204, resp.StatusCode)
		readAll(resp)
	})
	t.Run("archive out and in", func(t *testing.T) {
		resp := do("GET", "/v1/instances/i-1/files/archive?path=/src", nil)
		require.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "application/x-tar", resp.Header.Get("Content-Type"))
		tarball := readAll(resp)
		var names []string
		tr := tar.NewReader(strings.NewReader(tarball))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			names = append(names, h.Name)
		}
		assert.ElementsMatch(t, []string{"image", "notes.txt"}, names)
		resp = do("POST", "/v1/instances/i-1/files/archive?path=/restored&mkdir=1", strings.NewReader(tarball), "Content-Type", "application/x-tar")
		require.Equal(t, 200, resp.StatusCode)
		var res types.FileArchiveResult
		require.NoError(t, json.Unmarshal([]byte(readAll(resp)), &res))
		assert.Equal(t, 2, res.Entries)

		var evil bytes.Buffer
		tw := tar.NewWriter(&evil)
		require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "../../escape", Size: 1}))
		_, _ = tw.Write([]byte("x"))
		require.NoError(t, tw.Close())
		resp = do("POST", "/v1/instances/i-1/files/archive?path=/restored", &evil, "Content-Type", "application/x-tar")
		assert.Equal(t, 400, resp.StatusCode)
		assert.Equal(t, "invalid_argument", code(resp))
	})
	t.Run("watch", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/instances/i-1/files/watch?path=/src", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+apitest.Token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
		require.NoError(t, os.WriteFile(filepath.Join(core.Files.Dir(), "src", "new"), []byte("x"), 0o644))
		sc := bufio.NewScanner(resp.Body)
		var lines []string
		for sc.Scan() && len(lines) < 4 {
			if l := sc.Text(); strings.HasPrefix(l, "event: ") || strings.HasPrefix(l, ": keep-alive") {
				lines = append(lines, l)
			}
		}
		assert.Contains(t, lines, "event: create")
		assert.Contains(t, lines, "event: modify")
	})

	var report strings.Builder
	assert.False(t, v.Report(&report), "violations:\n%s", report.String())
}
