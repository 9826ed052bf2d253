package apispec_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/apispec"
)

// server answers what each test scripts, behind a Validator of
// testdata/pets.yaml.
func server(t *testing.T, h http.HandlerFunc) (*apispec.Validator, *httptest.Server) {
	t.Helper()
	doc, err := apispec.LoadSpec(context.Background(), "testdata/pets.yaml")
	require.NoError(t, err)
	v, err := apispec.NewValidator(doc)
	require.NoError(t, err)
	srv := httptest.NewServer(v.Wrap(h))
	t.Cleanup(srv.Close)
	return v, srv
}

func answer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if body != "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func send(t *testing.T, srv *httptest.Server, method, path, contentType, body string) string {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func TestValidator(t *testing.T) {
	for _, tc := range []struct {
		name          string
		handler       http.HandlerFunc
		method, path  string
		contentType   string
		body          string
		wantViolation string // "" = none
	}{
		{
			name:    "valid request and answer",
			handler: answer(201, `{"name":"rex","age":3,"extra":"fields may be added"}`),
			method:  "POST", path: "/pets", contentType: "application/json", body: `{"name":"rex"}`,
		},
		{
			name:    "request the spec refuses, accepted",
			handler: answer(201, `{"name":"rex","age":3}`),
			method:  "POST", path: "/pets", contentType: "application/json", body: `{"name":"rex","colour":"red"}`,
			wantViolation: "the server accepted a request the spec refuses",
		},
		{
			name:    "request without a required body, accepted",
			handler: answer(201, `{"name":"rex","age":3}`),
			method:  "POST", path: "/pets", contentType: "application/json",
			wantViolation: "the server accepted a request the spec refuses",
		},
		{
			name:    "request the spec refuses, refused",
			handler: answer(400, `{"error":{"code":"invalid_argument"}}`),
			method:  "POST", path: "/pets", contentType: "application/json", body: `{"name":"rex","colour":"red"}`,
		},
		{
			name:    "answer without a required field",
			handler: answer(201, `{"name":"rex"}`),
			method:  "POST", path: "/pets", contentType: "application/json", body: `{"name":"rex"}`,
			wantViolation: `answer: `,
		},
		{
			name:    "undocumented status",
			handler: answer(409, `{"error":{}}`),
			method:  "POST", path: "/pets", contentType: "application/json", body: `{"name":"rex"}`,
			wantViolation: "status is not supported",
		},
		{
			name:    "route the spec lacks, served",
			handler: answer(200, `{}`),
			method:  "GET", path: "/cats",
			wantViolation: "the server answered a route the spec lacks",
		},
		{
			name:    "route the spec lacks, not found",
			handler: answer(404, `{"error":{}}`),
			method:  "GET", path: "/cats",
		},
		{
			name: "event stream: body not read, flushes pass through",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				_, _ = io.WriteString(w, "event: end\ndata: {}\n\n")
			},
			method: "GET", path: "/pets/7/events",
		},
		{
			name:    "bad path parameter, served",
			handler: answer(200, ""),
			method:  "GET", path: "/pets/seven/events",
			wantViolation: "the server accepted a request the spec refuses",
		},
		{
			name: "tar upload: body streamed to the handler unread",
			handler: func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				if string(b) != "not json at all" {
					w.WriteHeader(500)
					return
				}
				w.WriteHeader(204)
			},
			method: "POST", path: "/upload", contentType: "application/x-tar", body: "not json at all",
		},
		{
			name:    "proxied answer: any status and body, several segments deep",
			handler: answer(200, `{"not":"a pet"}`),
			method:  "GET", path: "/pets/7/site/a/b/c.js",
		},
		{
			name:    "proxied answer at the prefix's root",
			handler: answer(200, `[1,2]`),
			method:  "GET", path: "/pets/7/site/",
		},
		{
			name:    "proxied request: a body the spec does not describe",
			handler: answer(201, `{}`),
			method:  "POST", path: "/pets/7/site/form/submit", contentType: "application/json", body: `{"anything":true}`,
		},
		{
			name:    "a route of the spec beside the proxied one is checked",
			handler: answer(200, `{"not":"a token"}`),
			method:  "POST", path: "/pets/7/site/token",
			wantViolation: "answer: ",
		},
		{
			name:    "a method the proxied path lacks is not proxied",
			handler: answer(200, `{}`),
			method:  "DELETE", path: "/pets/7/site/a/b",
			wantViolation: "the server answered a route the spec lacks",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, srv := server(t, tc.handler)
			send(t, srv, tc.method, tc.path, tc.contentType, tc.body)
			got, _ := v.Violations()
			if tc.wantViolation == "" {
				assert.Empty(t, got)
				return
			}
			require.Len(t, got, 1, "%v", got)
			assert.Equal(t, tc.method, got[0].Method)
			assert.Equal(t, tc.path, got[0].Path)
			assert.Contains(t, got[0].Err, tc.wantViolation)
			assert.Contains(t, got[0].String(), tc.path)
		})
	}
}

// The handler reads the JSON body the validator read first, unchanged.
func TestValidatorPassesTheBodyOn(t *testing.T) {
	var seen string
	_, srv := server(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		seen = string(b)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = io.WriteString(w, `{"name":"rex","age":3}`)
	})
	assert.Equal(t, `{"name":"rex","age":3}`, send(t, srv, "POST", "/pets", "application/json", `{"name":"rex"}`))
	assert.Equal(t, `{"name":"rex"}`, seen)
}

func TestLoadSpecRefusesAnInvalidDocument(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	// A path parameter that is not declared.
	require.NoError(t, os.WriteFile(path, []byte(`openapi: 3.1.0
info: {title: bad, version: "1"}
paths:
  /pets/{id}:
    get:
      responses:
        "200": {description: ok}
`), 0o600))
	_, err := apispec.LoadSpec(context.Background(), path)
	require.Error(t, err)
}
