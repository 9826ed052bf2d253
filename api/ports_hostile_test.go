package api_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/api/execproto"
	"github.com/envd-dev/envd/internal/limiter"
)

var clusterKey = []byte("0123456789abcdef0123456789abcdef")

// headerRecorder is an instance's dev server that keeps the headers of
// every request it gets and accepts WebSockets, choosing "chat" when
// offered.
type headerRecorder struct {
	mu   sync.Mutex
	seen []http.Header
}

func (h *headerRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.seen = append(h.seen, r.Header.Clone())
	h.mu.Unlock()
	if r.URL.Path != "/ws" {
		w.WriteHeader(http.StatusTeapot)
		return
	}
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"chat"}})
	if err != nil {
		return
	}
	defer c.CloseNow()
	_, msg, err := c.Read(r.Context())
	if err == nil {
		_ = c.Write(r.Context(), websocket.MessageText, msg)
	}
}

func (h *headerRecorder) last(t *testing.T) http.Header {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	require.NotEmpty(t, h.seen, "the instance got no request")
	return h.seen[len(h.seen)-1]
}

// hostileServer is the API with the host form (preview.test) and the
// cluster key, over a fake core whose instances' ports are rec.
func hostileServer(t *testing.T, rec http.Handler) (*httptest.Server, *apitest.Fakes) {
	t.Helper()
	backend := httptest.NewServer(rec)
	t.Cleanup(backend.Close)
	core := apitest.New()
	core.Ports.DialInstanceFunc = func(ctx context.Context, id string, port int) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", backend.Listener.Addr().String())
	}
	h, err := api.New(core.Parts(), api.WithPreviewDomain("preview.test"), api.WithForwardKey(clusterKey))
	require.NoError(t, err)
	srv := httptest.NewServer(api.PreviewHosts(core.Parts(), "preview.test", h, clusterKey, nil))
	t.Cleanup(srv.Close)
	return srv, core
}

// assertNoCredentials checks that h carries neither the API token (in any
// header) nor a node's forwarding signature.
func assertNoCredentials(t *testing.T, h http.Header) {
	t.Helper()
	for name, vals := range h {
		for _, v := range vals {
			assert.NotContains(t, v, apitest.Token, "header %s", name)
			assert.NotContains(t, v, execproto.BearerPrefix, "header %s", name)
		}
	}
	assert.Empty(t, h.Get(api.ForwardedHeader), "the forwarding signature reached the instance")
	assert.Empty(t, h.Get("X-Envd-Placement"))
}

// A WebSocket through the path form authenticated by the bearer
// subprotocol, as browsers do it, and forwarded by another node: the
// instance sees the client's other subprotocols, and neither the token nor
// the forwarding signature.
func TestPortProxyWebSocketCredentialsStayOut(t *testing.T) {
	rec := &headerRecorder{}
	srv, _ := hostileServer(t, rec)
	bearer := execproto.BearerSubprotocol(apitest.Token)
	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/instances/web-1/ports/5173/ws"

	for name, tc := range map[string]struct {
		offer        []string
		forwarded    bool
		wantInstance string // Sec-WebSocket-Protocol the instance saw
		wantChosen   string // the subprotocol the client got
	}{
		"with another subprotocol":          {offer: []string{"chat", bearer}, wantInstance: "chat", wantChosen: "chat"},
		"bearer first":                      {offer: []string{bearer, "chat"}, wantInstance: "chat", wantChosen: "chat"},
		"bearer alone":                      {offer: []string{bearer}, wantInstance: "", wantChosen: bearer},
		"forwarded by a node":               {offer: []string{"chat", bearer}, forwarded: true, wantInstance: "chat", wantChosen: "chat"},
		"forwarded by a node, bearer alone": {offer: []string{bearer}, forwarded: true, wantInstance: "", wantChosen: bearer},
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			hdr := http.Header{}
			if tc.forwarded {
				req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/instances/web-1/ports/5173/ws", nil)
				req.Header.Set("X-Envd-Placement", "placed on b")
				api.SignForwarded(clusterKey, req)
				hdr = req.Header
			}
			c, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{Subprotocols: tc.offer, HTTPHeader: hdr})
			require.NoError(t, err)
			defer c.CloseNow()
			assert.Equal(t, tc.wantChosen, c.Subprotocol())
			require.NoError(t, c.Write(ctx, websocket.MessageText, []byte("hi")))
			_, got, err := c.Read(ctx)
			require.NoError(t, err)
			assert.Equal(t, "hi", string(got))

			h := rec.last(t)
			if tc.forwarded {
				require.NotEmpty(t, hdr.Get(api.ForwardedHeader), "the test request was not signed")
			}
			assertNoCredentials(t, h)
			assert.Equal(t, tc.wantInstance, strings.Join(h.Values("Sec-WebSocket-Protocol"), ", "))
		})
	}
}

// A request a node forwarded to the host form reaches the instance
// without the node's signature.
func TestPortProxyHostFormForwardedSignatureStaysOut(t *testing.T) {
	rec := &headerRecorder{}
	srv, _ := hostileServer(t, rec)
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/page", nil)
	req.Host = "8443-web-1.preview.test" // public in the fake
	api.SignForwarded(clusterKey, req)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusTeapot, resp.StatusCode)
	assertNoCredentials(t, rec.last(t))
}

// rawGet sends target as the request line's target, byte for byte, with
// host as Host, and returns the answer.
func rawGet(t *testing.T, srv *httptest.Server, host, target string) *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	_, err = fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target, host)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	resp.Body.Close()
	return resp
}

// The preview redirect that drops the token from the URL only ever sends
// the browser to a path of the same host, whatever the path looks like.
func TestPreviewRedirectStaysOnHost(t *testing.T) {
	srv, _ := hostileServer(t, &headerRecorder{})
	const host = "5173-web-1.preview.test"
	token := "preview-web-1-5173" // the fake's valid token
	q := "?envd_preview_token=" + token
	for name, tc := range map[string]struct{ target, want string }{
		"plain":                    {"/app?a=1&envd_preview_token=" + token, "/app?a=1"},
		"two slashes":              {"//evil.example/x" + q, "/evil.example/x"},
		"three slashes":            {"///evil.example/x" + q, "/evil.example/x"},
		"slash backslash":          {`/\evil.example` + q, "/%5Cevil.example"},
		"backslash slash":          {`/\/evil.example` + q, "/%5C/evil.example"},
		"two backslashes":          {`/\\evil.example` + q, "/%5C%5Cevil.example"},
		"encoded slashes":          {"/%2F%2Fevil.example" + q, "/%2F%2Fevil.example"},
		"encoded backslash":        {"/%5Cevil.example" + q, "/%5Cevil.example"},
		"slash then encoded slash": {"//%2Fevil.example" + q, "/%2Fevil.example"},
		"scheme":                   {"https:evil" + q, "/"},
		"scheme and slashes":       {"https://evil.example/x" + q, ""}, // absolute form: another Host, so the API answers
		"encoded tab":              {"/%09/evil.example" + q, "/%09/evil.example"},
	} {
		t.Run(name, func(t *testing.T) {
			resp := rawGet(t, srv, host, tc.target)
			loc := resp.Header.Get("Location")
			if tc.want == "" {
				assert.NotEqual(t, http.StatusSeeOther, resp.StatusCode)
				assert.Empty(t, loc)
				return
			}
			require.Equal(t, http.StatusSeeOther, resp.StatusCode, "target %q", tc.target)
			assert.Equal(t, tc.want, loc)
			// As a browser reads it: backslashes are slashes, the result
			// is on the preview host.
			base, _ := url.Parse("http://" + host + "/some/page")
			ref, err := url.Parse(strings.ReplaceAll(loc, `\`, "/"))
			require.NoError(t, err)
			assert.Equal(t, host, base.ResolveReference(ref).Host, "Location %q leaves the host", loc)
			assert.NotContains(t, loc, token)
		})
	}
}

// A refused dial in the host form answers 429 with Retry-After, as the
// API does.
func TestPreviewHostFormRetryAfter(t *testing.T) {
	srv, core := hostileServer(t, &headerRecorder{})
	core.Ports.DialInstanceFunc = func(ctx context.Context, id string, port int) (net.Conn, error) {
		return nil, &limiter.ExhaustedError{Tenant: "t1", Kind: "dials", Limit: 32, Wait: 3 * time.Second}
	}
	resp := rawGet(t, srv, "8443-web-1.preview.test", "/")
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "3", resp.Header.Get("Retry-After"))
}
