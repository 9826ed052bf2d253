package api_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/api/types"
)

// seen is what the instance's server saw of a proxied request.
type seen struct {
	Method, Path, RawQuery, Host, Auth, Cookie, Prefix, ForwardedHost, ForwardedProto string
	Body                                                                              string
}

// portsServer is the API with the host form for domain "preview.test",
// over a fake core whose instances' ports are all the one httptest server
// (an HTTP server that answers what it saw, and a WebSocket echo at /ws).
func portsServer(t *testing.T) (*httptest.Server, *apitest.Fakes) {
	t.Helper()
	sawFirst := make(chan struct{})
	sawFirstOnce = func() { close(sawFirst) }
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/events" {
			// One event, then nothing until the client says it saw it:
			// a proxy that buffered would never pass it on.
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: first\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-sawFirst:
			case <-r.Context().Done():
				return
			}
			_, _ = io.WriteString(w, "data: second\n\n")
			return
		}
		if r.URL.Path == "/ws" {
			c, err := websocket.Accept(w, r, nil)
			if err != nil {
				return
			}
			defer c.CloseNow()
			for {
				typ, msg, err := c.Read(r.Context())
				if err != nil {
					return
				}
				if err := c.Write(r.Context(), typ, append([]byte("echo:"), msg...)); err != nil {
					return
				}
			}
		}
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTeapot)
		_ = json.NewEncoder(w).Encode(seen{Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Host: r.Host,
			Auth: r.Header.Get("Authorization"), Cookie: r.Header.Get("Cookie"), Prefix: r.Header.Get("X-Forwarded-Prefix"),
			ForwardedHost: r.Header.Get("X-Forwarded-Host"), ForwardedProto: r.Header.Get("X-Forwarded-Proto"), Body: string(b)})
	}))
	t.Cleanup(backend.Close)
	core := apitest.New()
	core.Ports.DialInstanceFunc = func(ctx context.Context, id string, port int) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", backend.Listener.Addr().String())
	}
	h, err := api.New(core.Parts(), api.WithPreviewDomain("preview.test"))
	require.NoError(t, err)
	srv := httptest.NewServer(api.PreviewHosts(core.Parts(), "preview.test", h, nil, nil))
	t.Cleanup(srv.Close)
	return srv, core
}

// sawFirstOnce tells portsServer's /events that the client saw its first
// event.
var sawFirstOnce func()

// Streams pass through as they come: an event stream's first event
// reaches the client while the instance still holds the answer open.
func TestPortProxyStreams(t *testing.T) {
	srv, _ := portsServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/instances/web-1/ports/5173/events", nil)
	req.Header.Set("Authorization", "Bearer "+apitest.Token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	line, err := r.ReadString('\n')
	require.NoError(t, err, "the first event did not come through before the stream ended")
	assert.Equal(t, "data: first\n", line)
	sawFirstOnce()
	rest, err := io.ReadAll(r)
	require.NoError(t, err)
	assert.Equal(t, "\ndata: second\n\n", string(rest))
}

func noRedirects() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func doReq(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := noRedirects().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

func TestPortProxyPathForm(t *testing.T) {
	srv, core := portsServer(t)
	req, _ := http.NewRequest("POST", srv.URL+"/v1/instances/web-1/ports/5173/src/a%2Fb.js?x=1&y=2", strings.NewReader("payload"))
	req.Header.Set("Authorization", "Bearer "+apitest.Token)
	req.Header.Set("Cookie", "theirs=1; envd_preview=secret; other=2")
	resp, body := doReq(t, req)
	require.Equal(t, http.StatusTeapot, resp.StatusCode, body)
	var s seen
	require.NoError(t, json.Unmarshal([]byte(body), &s))
	assert.Equal(t, "POST", s.Method)
	assert.Equal(t, "/src/a%2Fb.js", s.Path, "prefix stripped, escaping kept")
	assert.Equal(t, "x=1&y=2", s.RawQuery)
	assert.Equal(t, "payload", s.Body)
	assert.Equal(t, "localhost:5173", s.Host)
	assert.Empty(t, s.Auth, "the API token must not reach the instance")
	assert.Equal(t, "theirs=1; other=2", s.Cookie)
	assert.Equal(t, "/v1/instances/web-1/ports/5173", s.Prefix)
	assert.Equal(t, "http", s.ForwardedProto)
	assert.NotEmpty(t, s.ForwardedHost)

	t.Run("without a bearer token", func(t *testing.T) {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/instances/web-1/ports/5173/", nil)
		resp, body := doReq(t, req)
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, body)
		assert.Contains(t, body, `"unauthenticated"`)
	})
	t.Run("the port's root redirects to the slash form", func(t *testing.T) {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/instances/web-1/ports/5173?a=b", nil)
		req.Header.Set("Authorization", "Bearer "+apitest.Token)
		resp, _ := doReq(t, req)
		assert.Equal(t, http.StatusPermanentRedirect, resp.StatusCode)
		assert.Equal(t, "/v1/instances/web-1/ports/5173/?a=b", resp.Header.Get("Location"))
	})
	t.Run("bad port", func(t *testing.T) {
		for _, p := range []string{"0", "65536", "http", "080"} {
			req, _ := http.NewRequest("GET", srv.URL+"/v1/instances/web-1/ports/"+p+"/", nil)
			req.Header.Set("Authorization", "Bearer "+apitest.Token)
			resp, body := doReq(t, req)
			assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "port %s: %s", p, body)
		}
	})
	t.Run("a stopped instance is woken", func(t *testing.T) {
		_, woken := core.LastCall("WakeInstance")
		require.False(t, woken)
		req, _ := http.NewRequest("GET", srv.URL+"/v1/instances/sleepy/ports/5173/", nil)
		req.Header.Set("Authorization", "Bearer "+apitest.Token)
		resp, body := doReq(t, req)
		assert.Equal(t, http.StatusTeapot, resp.StatusCode, body)
		call, woken := core.LastCall("WakeInstance")
		require.True(t, woken)
		assert.Equal(t, []any{"sleepy"}, call.Args)
	})
	t.Run("unknown instance", func(t *testing.T) {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/instances/gone/ports/5173/", nil)
		req.Header.Set("Authorization", "Bearer "+apitest.Token)
		resp, body := doReq(t, req)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, body)
	})
}

func TestPortProxyPortUnreachable(t *testing.T) {
	core := apitest.New() // its DialInstance answers port_unreachable
	h, err := api.New(core.Parts())
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("GET", srv.URL+"/v1/instances/web-1/ports/5173/", nil)
	req.Header.Set("Authorization", "Bearer "+apitest.Token)
	resp, body := doReq(t, req)
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Contains(t, body, `"code":"port_unreachable"`)
}

func TestPortProxyWebSocket(t *testing.T) {
	srv, _ := portsServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, u := range map[string]struct {
		url  string
		host string
		auth string
	}{
		"path form": {url: "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/instances/web-1/ports/5173/ws", auth: "Bearer " + apitest.Token},
		"host form": {url: "ws" + strings.TrimPrefix(srv.URL, "http") + "/ws", host: "8443-web-1.preview.test"},
	} {
		t.Run(name, func(t *testing.T) {
			h := http.Header{}
			if u.auth != "" {
				h.Set("Authorization", u.auth)
			}
			opts := &websocket.DialOptions{HTTPHeader: h, Host: u.host}
			c, resp, err := websocket.Dial(ctx, u.url, opts)
			require.NoError(t, err)
			defer c.CloseNow()
			assert.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
			require.NoError(t, c.Write(ctx, websocket.MessageText, []byte("hot reload")))
			_, msg, err := c.Read(ctx)
			require.NoError(t, err)
			assert.Equal(t, "echo:hot reload", string(msg))
			c.Close(websocket.StatusNormalClosure, "")
		})
	}
}

func TestPortProxyHostForm(t *testing.T) {
	srv, core := portsServer(t)
	send := func(host, path string, cookie *http.Cookie) (*http.Response, string) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Host = host
		if cookie != nil {
			req.AddCookie(cookie)
		}
		return doReq(t, req)
	}
	const host = "5173-web-1.preview.test"

	resp, body := send(host, "/", nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Contains(t, body, "unauthenticated")
	assert.NotContains(t, body, "<")

	resp, _ = send(host, "/?envd_preview_token=wrong", nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	// The API issues the token and the URL.
	req, _ := http.NewRequest("POST", srv.URL+"/v1/instances/web-1/ports/5173/token", strings.NewReader(`{"ttl":"10m"}`))
	req.Header.Set("Authorization", "Bearer "+apitest.Token)
	resp, body = doReq(t, req)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	var tok types.PreviewToken
	require.NoError(t, json.Unmarshal([]byte(body), &tok))
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	assert.Equal(t, "http://"+host+":"+port+"/?envd_preview_token="+tok.Token, tok.URL)
	assert.Equal(t, host, tok.Host)
	call, ok := core.LastCall("PreviewToken")
	require.True(t, ok)
	assert.Equal(t, types.PreviewTokenRequest{TTL: "10m"}, call.Args[2])

	// The token in the URL: a cookie for this host, and a redirect without it.
	resp, _ = send(host+":"+port, "/app/page?q=1&envd_preview_token="+url.QueryEscape(tok.Token), nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/app/page?q=1", resp.Header.Get("Location"))
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == api.PreviewCookie {
			ck = c
		}
	}
	require.NotNil(t, ck, "no preview cookie set")
	assert.Equal(t, tok.Token, ck.Value)
	assert.True(t, ck.HttpOnly)
	assert.False(t, ck.Secure, "plain HTTP: not Secure")
	assert.Equal(t, http.SameSiteLaxMode, ck.SameSite)
	assert.Empty(t, ck.Domain, "host-only cookie")
	assert.Equal(t, "/", ck.Path)

	// With the cookie: proxied, Host kept, the cookie not passed on.
	resp, body = send(host+":"+port, "/app/page?q=1", &http.Cookie{Name: api.PreviewCookie, Value: tok.Token})
	require.Equal(t, http.StatusTeapot, resp.StatusCode, body)
	var s seen
	require.NoError(t, json.Unmarshal([]byte(body), &s))
	assert.Equal(t, "/app/page", s.Path)
	assert.Equal(t, "q=1", s.RawQuery)
	assert.Equal(t, host+":"+port, s.Host)
	assert.Empty(t, s.Cookie)
	assert.Empty(t, s.Prefix)

	// The fake's port 8443 is public: no token needed.
	resp, _ = send("8443-web-1.preview.test", "/", nil)
	assert.Equal(t, http.StatusTeapot, resp.StatusCode)

	// Not a preview host: the API.
	resp, _ = send("api.example", "/healthz", nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	// A malformed preview host.
	resp, _ = send("x.5173-web-1.preview.test", "/", nil)
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}

func TestPortTunnel(t *testing.T) {
	// The instance's port: reads all, then answers it reversed and closes.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c) // until the client's half-close
				for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
					b[i], b[j] = b[j], b[i]
				}
				_, _ = c.Write(b)
			}()
		}
	}()
	core := apitest.New()
	core.Ports.DialInstanceFunc = func(ctx context.Context, id string, port int) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	}
	h, err := api.New(core.Parts())
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/instances/web-1/tcp/5432", &websocket.DialOptions{
		HTTPHeader: http.Header{"Authorization": {"Bearer " + apitest.Token}}, Subprotocols: []string{api.TunnelSubprotocol}})
	require.NoError(t, err)
	defer c.CloseNow()
	assert.Equal(t, api.TunnelSubprotocol, c.Subprotocol())
	require.NoError(t, c.Write(ctx, websocket.MessageBinary, []byte("hello ")))
	require.NoError(t, c.Write(ctx, websocket.MessageBinary, []byte("world")))
	require.NoError(t, c.Write(ctx, websocket.MessageBinary, nil)) // half-close
	var got []byte
	for {
		_, msg, err := c.Read(ctx)
		require.NoError(t, err)
		if len(msg) == 0 {
			break // the port's EOF
		}
		got = append(got, msg...)
	}
	assert.Equal(t, "dlrow olleh", string(got))
	_, _, err = c.Read(ctx)
	assert.Equal(t, websocket.StatusNormalClosure, websocket.CloseStatus(err))
	_, ok := core.LastCall("TouchInstance")
	assert.True(t, ok)
	_, ok = core.LastCall("HoldInstance")
	assert.True(t, ok, "an open tunnel holds the instance")
	assert.Eventually(t, func() bool { _, ok := core.LastCall("ReleaseInstance"); return ok }, 5*time.Second, 10*time.Millisecond,
		"and releases it when it ends")

	t.Run("not an upgrade", func(t *testing.T) {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/instances/web-1/tcp/5432", nil)
		req.Header.Set("Authorization", "Bearer "+apitest.Token)
		resp, _ := doReq(t, req)
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	})
}
