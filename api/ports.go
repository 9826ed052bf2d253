package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/coder/websocket"
	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/api/execproto"
	"github.com/envd-dev/envd/envd/preview"
	"github.com/envd-dev/envd/errdefs"
)

// The port proxy (docs/api.md, "Ports and preview URLs"): HTTP and
// WebSocket to a port of an instance, reached inside the instance's
// network namespace (its 127.0.0.1) through PortCore.DialInstance.
//
//   - path form: /v1/instances/{i}/ports/{port}/{path...} with the API's
//     bearer token. The prefix up to the port is stripped (the instance
//     sees /{path...}) and sent as X-Forwarded-Prefix; the Authorization
//     header and the preview cookie are not passed on. POST .../token is
//     envd's own (a preview token), not proxied.
//   - in both forms, envd's credentials never reach the instance: the
//     bearer entry of Sec-WebSocket-Protocol (other subprotocols are
//     kept) and the node-to-node forwarding headers are removed.
//   - host form: {port}-{instance}.{preview domain}, served by
//     PreviewHosts before the API's routes, authenticated by a preview
//     token (query parameter envd_preview_token once, then the
//     envd_preview cookie) or public when the project says so.
//   - TCP tunnel: GET /v1/instances/{i}/tcp/{port}, a WebSocket whose
//     binary messages carry the connection's bytes both ways; an empty
//     message is the end of the sender's direction (half-close).
//
// Every proxied request and tunnelled connection counts as activity
// (TouchInstance). A new connection to an instance that is not running
// wakes it (WakeInstance) first. The proxy keeps connections to instances
// alive per tenant, instance and port: only a new one is checked against
// the tenant (DialInstance does), so a request over a kept one costs no
// lookup, and a connection is only ever reused for its own tenant.

// PortCore is what the port proxy needs of the core.
type PortCore interface {
	// DialInstance connects to port as a process in the instance would
	// reach 127.0.0.1:port; ErrPortUnreachable when nothing listens.
	DialInstance(ctx context.Context, p types.Principal, id string, port int) (net.Conn, error)
	// WakeInstance returns the instance once it is Running, starting it
	// when it was stopped.
	WakeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
	// TouchInstance records activity on the instance.
	TouchInstance(id string)
	// HoldInstance keeps the instance from being idle until release is
	// called (an open port-forward tunnel is use, traffic or not).
	HoldInstance(id string) (release func())
	ListPorts(ctx context.Context, p types.Principal, id string) ([]types.ListeningPort, error)
	PreviewToken(ctx context.Context, p types.Principal, id string, port int, req types.PreviewTokenRequest) (types.PreviewToken, error)
	// PreviewAccess admits a host-form request for port of instance id
	// with token ("" = none): the principal to act as and the token's
	// expiry (zero for a public port), or ErrUnauthenticated.
	PreviewAccess(ctx context.Context, id string, port int, token string) (types.Principal, time.Time, error)
	GetProjectPorts(ctx context.Context, p types.Principal, project string) (types.ProjectPorts, error)
	SetProjectPorts(ctx context.Context, p types.Principal, project string, req types.ProjectPorts) (types.ProjectPorts, error)
}

const (
	// PreviewTokenParam is the query parameter that carries a preview
	// token in a preview URL; PreviewCookie the cookie it is exchanged for.
	PreviewTokenParam = "envd_preview_token"
	PreviewCookie     = "envd_preview"
	// TunnelSubprotocol is the WebSocket subprotocol of the TCP tunnel.
	TunnelSubprotocol = "v1.tcp.envd.dev"
	// tunnelMessage is the largest tunnel message accepted.
	tunnelMessage = 1 << 20
)

// proxiedMethods are the methods the path form passes on.
var proxiedMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions}

type ports struct {
	core   PortCore
	domain string // the preview domain; "" = no host form
	proxy  *portProxy
}

func newPorts(core PortCore, domain string) ports {
	return ports{core: core, domain: domain, proxy: newPortProxy(core)}
}

func (g ports) routes() []route {
	rs := []route{
		{http.MethodGet, "/instances/:i/ports", handle(http.StatusOK, func(r in, _ none) (types.PortList, error) {
			ls, err := items(g.core.ListPorts(r.ctx, r.p, r.param("i")))
			if err != nil {
				return types.PortList{}, err
			}
			if g.domain != "" {
				for i := range ls {
					ls[i].URL = previewURL(r.c.Request, g.domain, ls[i].Port, r.param("i"), "")
				}
			}
			return types.PortList{Ports: ls}, nil
		})},
		{http.MethodGet, "/instances/:i/tcp/:port", g.tunnel},
		{http.MethodGet, "/projects/:p/ports", handle(http.StatusOK, func(r in, _ none) (types.ProjectPorts, error) {
			return g.core.GetProjectPorts(r.ctx, r.p, r.param("p"))
		})},
		{http.MethodPut, "/projects/:p/ports", handle(http.StatusOK, func(r in, req types.ProjectPorts) (types.ProjectPorts, error) {
			return g.core.SetProjectPorts(r.ctx, r.p, r.param("p"), req)
		})},
	}
	for _, m := range proxiedMethods {
		rs = append(rs, route{m, "/instances/:i/ports/:port", g.portRoot}, route{m, "/instances/:i/ports/:port/*path", g.pathForm})
	}
	return rs
}

// token answers POST /v1/instances/{i}/ports/{port}/token.
func (g ports) token(c *gin.Context, port int) {
	handle(http.StatusOK, func(r in, req types.PreviewTokenRequest) (types.PreviewToken, error) {
		t, err := g.core.PreviewToken(r.ctx, r.p, r.param("i"), port, req)
		if err != nil {
			return t, err
		}
		if g.domain != "" {
			t.Host = preview.Host(port, r.param("i"), g.domain)
			t.URL = previewURL(r.c.Request, g.domain, port, r.param("i"), t.Token)
		}
		return t, nil
	})(c)
}

// previewURL is the preview URL of port of instance id: the API's scheme
// and listening port (the node serves the host form on the API's
// listener), with token in the query when given.
func previewURL(r *http.Request, domain string, port int, id, token string) string {
	u := url.URL{Scheme: "http", Host: preview.Host(port, id, domain), Path: "/"}
	if r.TLS != nil {
		u.Scheme = "https"
	}
	if _, p, err := net.SplitHostPort(r.Host); err == nil && p != "" {
		u.Host = net.JoinHostPort(u.Host, p)
	}
	if token != "" {
		u.RawQuery = url.Values{PreviewTokenParam: {token}}.Encode()
	}
	return u.String()
}

func portParam(c *gin.Context) (int, error) {
	s := c.Param("port")
	port, err := strconv.Atoi(s)
	if err != nil || port < 1 || port > 65535 || strconv.Itoa(port) != s {
		return 0, invalidArgument("port %q in the path: must be a number from 1 to 65535", s)
	}
	return port, nil
}

// portRoot answers /v1/instances/{i}/ports/{port} without the trailing
// slash: a browser is sent to the slash form, so that relative links of
// the page resolve under the prefix; other methods are proxied to "/".
func (g ports) portRoot(c *gin.Context) {
	if c.Request.Method == http.MethodGet || c.Request.Method == http.MethodHead {
		if _, err := portParam(c); err != nil {
			writeError(c, err)
			return
		}
		u := *c.Request.URL
		u.Path, u.RawPath = u.Path+"/", ""
		c.Redirect(http.StatusPermanentRedirect, u.RequestURI())
		return
	}
	g.pathForm(c)
}

// pathForm proxies /v1/instances/{i}/ports/{port}/{path...}.
func (g ports) pathForm(c *gin.Context) {
	port, err := portParam(c)
	if err != nil {
		writeError(c, err)
		return
	}
	if c.Request.Method == http.MethodPost && c.Param("path") == "/token" {
		g.token(c, port)
		return
	}
	id, p := c.Param("i"), principal(c)
	// The escaped path after /v1/instances/{i}/ports/{port}: the instance
	// gets the client's bytes, not a decoded and re-encoded copy.
	rest := "/"
	if parts := strings.SplitN(c.Request.URL.EscapedPath(), "/", 7); len(parts) == 7 {
		rest += parts[6]
	}
	g.core.TouchInstance(id)
	g.proxy.serve(c.Writer, c.Request, proxyTarget{
		p: p, id: id, port: port, path: rest,
		prefix:    "/v1/instances/" + id + "/ports/" + strconv.Itoa(port),
		localHost: true,
		fail:      func(err error) { writeError(c, err) },
	})
}

// proxyTarget is one proxied request's destination and how it is sent.
type proxyTarget struct {
	p    types.Principal
	id   string
	port int
	path string // escaped, from "/"
	// prefix is stripped from the client's path (X-Forwarded-Prefix); ""
	// in the host form.
	prefix string
	// localHost sends Host: localhost:PORT (the path form: the client's
	// host is the API's); otherwise the client's Host is kept.
	localHost bool
	fail      func(error) // answers an error of the proxy itself
	// bearerProtocol is the bearer subprotocol the client offered, if any
	// (set by serve).
	bearerProtocol string
}

// poolKey names a target's connections in the transport's pool: one
// tenant's connections are never reused for another's request.
func (t proxyTarget) poolKey() string {
	return fmt.Sprintf("%s.%d.%x.envd.invalid", t.id, t.port, t.p.Tenant)
}

type targetKey struct{}

// portProxy is the reverse proxy of both forms: one transport, whose
// connections to instances are kept alive and reused per tenant, instance
// and port.
type portProxy struct {
	rp *httputil.ReverseProxy
}

func newPortProxy(core PortCore) *portProxy {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			t, ok := ctx.Value(targetKey{}).(proxyTarget)
			if !ok || net.JoinHostPort(t.poolKey(), "80") != addr {
				return nil, fmt.Errorf("port proxy: dial %s without its target", addr)
			}
			return dialWaking(ctx, core, t.p, t.id, t.port)
		},
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
	rp := &httputil.ReverseProxy{
		Transport: tr,
		// FlushInterval 0: answers of unknown length (chunked, streams) and
		// server-sent events are still passed on at once (ReverseProxy
		// flushes those after every write); known lengths go through the
		// server's buffer, which a download's throughput needs.
		BufferPool: copyBuffers,
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(proxyTarget)
			pr.SetXForwarded()
			pr.Out.URL.Scheme, pr.Out.URL.Host = "http", t.poolKey()
			pr.Out.URL.RawPath = t.path
			pr.Out.URL.Path, _ = url.PathUnescape(t.path)
			if pr.Out.URL.EscapedPath() != t.path {
				pr.Out.URL.RawPath = ""
			}
			if t.localHost {
				pr.Out.Host = "localhost:" + strconv.Itoa(t.port)
				pr.Out.Header.Del("Authorization")
			} else {
				pr.Out.Host = pr.In.Host
			}
			if t.prefix != "" {
				pr.Out.Header.Set("X-Forwarded-Prefix", t.prefix)
			}
			dropCookie(pr.Out.Header, PreviewCookie)
			pr.Out.Header.Del(ForwardedHeader)
			pr.Out.Header.Del(PlacementHeader)
			dropBearerSubprotocol(pr.Out.Header)
		},
		ModifyResponse: func(resp *http.Response) error {
			// A browser that offered only the bearer subprotocol fails the
			// handshake unless one it offered is chosen; the instance never
			// saw it, so the proxy chooses it when the instance chose none.
			t := resp.Request.Context().Value(targetKey{}).(proxyTarget)
			if resp.StatusCode == http.StatusSwitchingProtocols && t.bearerProtocol != "" && resp.Header.Get("Sec-WebSocket-Protocol") == "" {
				resp.Header.Set("Sec-WebSocket-Protocol", t.bearerProtocol)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t := r.Context().Value(targetKey{}).(proxyTarget)
			if !hasKind(err) {
				err = fmt.Errorf("proxy to port %d of instance %q: %v: %w", t.port, t.id, err, errdefs.ErrUnavailable)
			}
			t.fail(err)
		},
	}
	return &portProxy{rp: rp}
}

// dialWaking connects to port of instance id, starting the instance first
// when it is not running (stopped, idle-stopped, hibernated).
func dialWaking(ctx context.Context, core PortCore, p types.Principal, id string, port int) (net.Conn, error) {
	conn, err := core.DialInstance(ctx, p, id, port)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		return conn, err
	}
	if _, werr := core.WakeInstance(ctx, p, id); werr != nil {
		return nil, werr
	}
	return core.DialInstance(ctx, p, id, port)
}

// copyBuffers are the proxy's copy buffers, larger than ReverseProxy's
// 32 KiB: fewer system calls per byte on downloads.
var copyBuffers = &bufferPool{sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}}

type bufferPool struct{ p sync.Pool }

func (bp *bufferPool) Get() []byte  { return *bp.p.Get().(*[]byte) }
func (bp *bufferPool) Put(b []byte) { bp.p.Put(&b) }

// hasKind reports whether err carries one of errdefs' kinds.
func hasKind(err error) bool {
	return errdefs.Code(err) != "internal"
}

func (pp *portProxy) serve(w http.ResponseWriter, r *http.Request, t proxyTarget) {
	if strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		t.bearerProtocol = bearerSubprotocol(r.Header)
	}
	r = r.WithContext(context.WithValue(r.Context(), targetKey{}, t))
	pp.rp.ServeHTTP(w, r)
}

// dropCookie removes the cookie name from the Cookie headers of h.
func dropCookie(h http.Header, name string) {
	vals := h.Values("Cookie")
	if len(vals) == 0 {
		return
	}
	var keep []string
	for _, v := range vals {
		for part := range strings.SplitSeq(v, ";") {
			part = strings.TrimSpace(part)
			if n, _, _ := strings.Cut(part, "="); part != "" && n != name {
				keep = append(keep, part)
			}
		}
	}
	h.Del("Cookie")
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}

// bearerSubprotocol is the bearer entry of h's Sec-WebSocket-Protocol, or "".
func bearerSubprotocol(h http.Header) string {
	for _, v := range h.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); strings.HasPrefix(p, execproto.BearerPrefix) {
				return p
			}
		}
	}
	return ""
}

// dropBearerSubprotocol removes the bearer entries (execproto.BearerPrefix)
// from h's Sec-WebSocket-Protocol and keeps the others, in order.
func dropBearerSubprotocol(h http.Header) {
	vals := h.Values("Sec-WebSocket-Protocol")
	if len(vals) == 0 {
		return
	}
	var keep []string
	for _, v := range vals {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" && !strings.HasPrefix(p, execproto.BearerPrefix) {
				keep = append(keep, p)
			}
		}
	}
	h.Del("Sec-WebSocket-Protocol")
	if len(keep) > 0 {
		h.Set("Sec-WebSocket-Protocol", strings.Join(keep, ", "))
	}
}

// PreviewHosts serves the host form of the port proxy for requests whose
// Host is {port}-{instance}.{domain} and passes every other request to
// next (the API). domain "" returns next itself.
// A request for an instance another node runs is forwarded there with its
// Host kept (every node of a cluster serves the same preview domain),
// signed with key (WithForwardKey), through peers (WithPeerTransport; nil:
// http.DefaultTransport); a forwarded request that key does not verify is
// taken as a client's. It serves parts.Ports (none: next itself) and asks
// parts.Forward which node runs an instance (none: this one).
func PreviewHosts(parts Parts, domain string, next http.Handler, key []byte, peers PeerTransport) http.Handler {
	if domain == "" || parts.Ports == nil {
		return next
	}
	var core PreviewCore = previewParts{parts.Ports, parts.Forward}
	if parts.Forward == nil {
		core = previewParts{parts.Ports, localOwner{}}
	}
	if peers == nil {
		peers = defaultPeers
	}
	fw := forwarder{peers: peers, key: key}
	return verifyForwarded(key, &previewHosts{core: core, domain: strings.ToLower(strings.TrimSuffix(domain, ".")), next: next, proxy: newPortProxy(core), fw: fw})
}

// PreviewCore is what the host form needs: the port proxy's core, and
// which node runs an instance.
type PreviewCore interface {
	PortCore
	ForwardCore
}

type previewParts struct {
	PortCore
	ForwardCore
}

// localOwner runs every instance on this node.
type localOwner struct{}

func (localOwner) InstanceOwner(context.Context, types.Principal, string) (string, string, bool, error) {
	return "", "", true, nil
}

type previewHosts struct {
	core   PreviewCore
	domain string
	next   http.Handler
	proxy  *portProxy
	fw     forwarder
}

func (h *previewHosts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	port, id, ok, err := preview.ParseHost(r.Host, h.domain)
	if !ok {
		h.next.ServeHTTP(w, r)
		return
	}
	if err != nil {
		plainError(w, err)
		return
	}
	token, fromURL := r.URL.Query().Get(PreviewTokenParam), true
	if token == "" {
		fromURL = false
		if ck, err := r.Cookie(PreviewCookie); err == nil {
			token = ck.Value
		}
	}
	p, expires, err := h.core.PreviewAccess(r.Context(), id, port, token)
	if err != nil {
		plainError(w, err)
		return
	}
	if fromURL {
		// The token becomes a cookie of this host only, and the browser
		// goes on to the URL without it: the token stays out of the
		// history, the Referer and the dev server's logs.
		if !expires.IsZero() {
			http.SetCookie(w, &http.Cookie{Name: PreviewCookie, Value: token, Path: "/",
				Expires: expires, MaxAge: max(1, int(time.Until(expires).Seconds())),
				HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteLaxMode})
		}
		q := r.URL.Query()
		q.Del(PreviewTokenParam)
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		status := http.StatusSeeOther
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			status = http.StatusTemporaryRedirect
		}
		w.Header().Set("Location", sameHostLocation(r.URL.EscapedPath(), q.Encode()))
		w.WriteHeader(status)
		return
	}
	if r.Header.Get(ForwardedHeader) == "" {
		node, apiURL, local, err := h.core.InstanceOwner(r.Context(), p, id)
		if err != nil {
			plainError(w, err)
			return
		}
		if !local {
			forwardTo(w, r, h.fw, id, node, apiURL, true, func(err error) { plainError(w, err) })
			return
		}
	}
	h.core.TouchInstance(id)
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	h.proxy.serve(w, r, proxyTarget{p: p, id: id, port: port, path: path, fail: func(err error) { plainError(w, err) }})
}

// sameHostLocation is a Location for the path escapedPath with the query
// rawQuery on the request's own host. A browser takes a Location that
// starts with two slashes, or a slash and a backslash, as another host
// ("//evil.example/x"): leading slashes and backslashes collapse into one.
// escapedPath is url.URL.EscapedPath's, so any other character a browser
// would strip or turn into a slash (tab, newline, backslash) is already
// percent-encoded, and encoded slashes are not separators.
func sameHostLocation(escapedPath, rawQuery string) string {
	loc := "/" + strings.TrimLeft(escapedPath, "/\\")
	if rawQuery != "" {
		loc += "?" + rawQuery
	}
	return loc
}

// plainError answers a host-form request with a plain-text error: the
// client is a browser on the instance's site, not an API client.
func plainError(w http.ResponseWriter, err error) {
	status := errdefs.HTTPStatus(err)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="envd preview"`)
	}
	if ra, ok := errors.AsType[retryAfter](err); ok {
		w.Header().Set("Retry-After", retryAfterSeconds(ra.RetryAfter()))
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, fmt.Sprintf("envd: %s (%s)", err.Error(), errdefs.Code(err)), status)
}

// tunnel serves GET /v1/instances/{i}/tcp/{port}: one TCP connection to
// the instance's port over a WebSocket. The connection is made before the
// upgrade, so a port nobody listens on is a plain 502 port_unreachable.
func (g ports) tunnel(c *gin.Context) {
	port, err := portParam(c)
	if err != nil {
		writeError(c, err)
		return
	}
	if !strings.EqualFold(c.GetHeader("Upgrade"), "websocket") {
		writeError(c, invalidArgument("tcp tunnel: the request is not a WebSocket upgrade (Upgrade: websocket)"))
		return
	}
	id, p := c.Param("i"), principal(c)
	tcp, err := dialWaking(wakeContext(c), g.core, p, id, port)
	if err != nil {
		writeError(c, err)
		return
	}
	defer tcp.Close()
	ws, err := websocket.Accept(c.Writer, c.Request, &websocket.AcceptOptions{
		Subprotocols: []string{TunnelSubprotocol},
		// As for exec: bearer tokens, never cookies, so no cross-site
		// hijacking of a user's session.
		InsecureSkipVerify: true,
	})
	if err != nil {
		return // Accept answered
	}
	defer ws.CloseNow()
	ws.SetReadLimit(tunnelMessage)
	defer g.core.HoldInstance(id)()
	splice(c.Request.Context(), ws, tcp, func() { g.core.TouchInstance(id) })
}

// splice copies between a tunnel WebSocket and a TCP connection until both
// directions ended: an empty message from the client half-closes the TCP
// connection (CloseWrite), the TCP connection's EOF is sent as an empty
// message. A broken WebSocket closes the TCP connection. touch is called
// on traffic.
func splice(ctx context.Context, ws *websocket.Conn, tcp net.Conn, touch func()) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	upDone := make(chan struct{}) // the client sent its EOF
	readErr := make(chan error, 1)
	go func() {
		var once sync.Once
		for {
			_, msg, err := ws.Read(ctx)
			if err != nil {
				readErr <- err
				_ = tcp.Close() // unblocks the copy below
				return
			}
			touch()
			if len(msg) == 0 {
				if cw, ok := tcp.(interface{ CloseWrite() error }); ok {
					_ = cw.CloseWrite()
				}
				once.Do(func() { close(upDone) })
				continue
			}
			if _, err := tcp.Write(msg); err != nil {
				readErr <- err
				_ = tcp.Close()
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := tcp.Read(buf)
		if n > 0 {
			touch()
			if werr := ws.Write(ctx, websocket.MessageBinary, buf[:n]); werr != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			if ws.Write(ctx, websocket.MessageBinary, nil) != nil {
				return
			}
			select {
			case <-upDone:
				_ = ws.Close(websocket.StatusNormalClosure, "")
			case <-readErr:
			}
			return
		}
		if err != nil {
			select {
			case <-readErr: // the client went away
			default:
				_ = ws.Close(websocket.StatusGoingAway, "connection to the instance broke")
			}
			return
		}
	}
}
