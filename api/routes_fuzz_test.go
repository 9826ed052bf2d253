package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/api/types"
)

// FuzzRoutes sends arbitrary methods, paths, headers and bodies through the
// router and handlers (with the fake core): nothing answers 5xx, and every
// error is the JSON error body with a code.
func FuzzRoutes(f *testing.F) {
	for _, s := range []struct{ method, path, key, body string }{
		{"POST", "/v1/projects", "", `{"name":"p","base":"b"}`},
		{"POST", "/v1/projects/p/instances", "k", `{"ttl":"-1h"}`},
		{"POST", "/v1/instances/i-1/exec", "", `{"args":["sh"],"timeout":"x"}`},
		{"POST", "/v1/instances/i-1/save", "k", `{"expected_current":-1}`},
		{"POST", "/v1/projects/p/builds", "", `{"manager":"apt","packages":["$(id)"]}`},
		{"POST", "/v1/projects/p/migrations", "", `{"base":"../x"}`},
		{"PUT", "/v1/admin/tenants/t/quota", "", `{"max_instances":-5}`},
		{"PUT", "/v1/projects/p/retention", "", `{"keep_newer_than":"forever"}`},
		{"GET", "/v1/projects/p/versions/-1", "", ``},
		{"GET", "/v1/projects/p/versions/99999999999999999999", "", ``},
		{"GET", "/v1/operations/op-1/events?after=-1", "", ``},
		{"POST", "/v1/images?name=x", "", `not a tar`},
		{"PATCH", "/v1/projects", "", `{}`},
		{"GET", "/v1/../../etc/passwd", "", ``},
		{"DELETE", "/v1/projects/p/versions/1/pin", "", ``},
	} {
		f.Add(s.method, s.path, s.key, []byte(s.body))
	}
	core := apitest.New()
	h, err := api.New(core.Parts(), api.WithErrorLog(io.Discard))
	require.NoError(f, err)
	f.Fuzz(func(t *testing.T, method, target, key string, body []byte) {
		u, err := url.ParseRequestURI(target)
		if err != nil || !validMethod(method) {
			return // not a request an HTTP server would hand to the handler
		}
		req := &http.Request{Method: method, URL: u, RequestURI: target, Header: http.Header{},
			Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1}
		req.Header.Set("Authorization", "Bearer "+apitest.Token)
		if key != "" {
			req.Header.Set(api.IdempotencyKeyHeader, key)
		}
		// A stream (an operation's events) ends at the deadline instead of
		// hanging the fuzz worker while the fake's operation never finishes.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		req = req.WithContext(ctx)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Less(t, rec.Code, 500, "%s %s: %s", method, target, rec.Body)
		if rec.Code >= 400 {
			var e types.ErrorBody
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), "%s %s: %s", method, target, rec.Body)
			require.NotEmpty(t, e.Error.Code)
		}
	})
}

// validMethod is net/http's token check of a request method.
func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for i := 0; i < len(m); i++ {
		c := m[i]
		if c <= ' ' || c >= 0x7f || bytes.IndexByte([]byte(`()<>@,;:\"/[]?={}`), c) >= 0 {
			return false
		}
	}
	return true
}
