package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/coder/websocket"
)

// TunnelSubprotocol is the WebSocket subprotocol of GET
// /v1/instances/{i}/tcp/{port}.
const TunnelSubprotocol = "v1.tcp.envd.dev"

// ListPorts returns the TCP ports the running instance listens on: GET
// /v1/instances/{i}/ports.
func (c *Client) ListPorts(ctx context.Context, id string) ([]types.ListeningPort, error) {
	l, err := get[types.PortList](ctx, c, "/v1/instances/"+esc(id)+"/ports")
	return l.Ports, err
}

// PreviewToken makes a preview token (and URL, when the server has a
// preview domain) for port of the instance: POST
// /v1/instances/{i}/ports/{port}/token. ttl "" = the server's default (1h).
func (c *Client) PreviewToken(ctx context.Context, id string, port int, ttl string) (types.PreviewToken, error) {
	return post[types.PreviewToken](ctx, c, http.MethodPost, "/v1/instances/"+esc(id)+"/ports/"+strconv.Itoa(port)+"/token",
		types.PreviewTokenRequest{TTL: ttl})
}

// ProjectPorts returns the project's port settings.
func (c *Client) ProjectPorts(ctx context.Context, project string) (types.ProjectPorts, error) {
	return get[types.ProjectPorts](ctx, c, "/v1/projects/"+esc(project)+"/ports")
}

// SetProjectPorts replaces the project's port settings (its public ports).
func (c *Client) SetProjectPorts(ctx context.Context, project string, p types.ProjectPorts) (types.ProjectPorts, error) {
	if p.Public == nil {
		p.Public = []int{}
	}
	return post[types.ProjectPorts](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/ports", p)
}

// PortURL is the path-form proxy URL of path on port of the instance
// (requests to it need the client's token as a bearer token).
func (c *Client) PortURL(id string, port int, path string) string {
	if len(path) == 0 || path[0] != '/' {
		path = "/" + path
	}
	return c.base + "/v1/instances/" + esc(id) + "/ports/" + strconv.Itoa(port) + path
}

// DialPort opens a TCP connection to port of the instance, as a process in
// it would reach 127.0.0.1:port, tunnelled over a WebSocket (GET
// /v1/instances/{i}/tcp/{port}). The connection supports CloseWrite
// (half-close); it has no deadlines. A port nobody listens on is an
// error with code port_unreachable.
func (c *Client) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	u, err := url.Parse(c.base + "/v1/instances/" + esc(id) + "/tcp/" + strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	}
	header := http.Header{"User-Agent": {c.userAgent}}
	if c.token != "" {
		header.Set("Authorization", "Bearer "+c.token)
	}
	ws, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
		HTTPClient: c.hc, HTTPHeader: header, Subprotocols: []string{TunnelSubprotocol},
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			return nil, decodeError(resp)
		}
		return nil, fmt.Errorf("port %d of %q: connect: %w", port, id, err)
	}
	ws.SetReadLimit(1 << 20)
	// The tunnel outlives the dial's ctx; Close ends it.
	tctx, cancel := context.WithCancel(context.Background())
	return &tunnelConn{ws: ws, ctx: tctx, cancel: cancel, remote: tunnelAddr(fmt.Sprintf("%s:%d", id, port))}, nil
}

// tunnelConn is a TCP connection carried by the tunnel's binary messages;
// an empty message ends a direction.
type tunnelConn struct {
	ws     *websocket.Conn
	ctx    context.Context
	cancel context.CancelFunc
	remote tunnelAddr

	rmu  sync.Mutex
	rbuf []byte
	reof bool

	closeOnce sync.Once
}

// tunnelChunk is the largest message written (the server accepts 1 MiB).
const tunnelChunk = 256 << 10

func (t *tunnelConn) Read(p []byte) (int, error) {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	for len(t.rbuf) == 0 {
		if t.reof {
			return 0, io.EOF
		}
		_, msg, err := t.ws.Read(t.ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				t.reof = true
				return 0, io.EOF
			}
			return 0, err
		}
		if len(msg) == 0 {
			t.reof = true
			return 0, io.EOF
		}
		t.rbuf = msg
	}
	n := copy(p, t.rbuf)
	t.rbuf = t.rbuf[n:]
	return n, nil
}

func (t *tunnelConn) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), tunnelChunk)
		if err := t.ws.Write(t.ctx, websocket.MessageBinary, p[:n]); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// CloseWrite ends the direction towards the instance: the server shuts
// down writing to the port.
func (t *tunnelConn) CloseWrite() error {
	return t.ws.Write(t.ctx, websocket.MessageBinary, nil)
}

func (t *tunnelConn) Close() error {
	var err error
	t.closeOnce.Do(func() {
		done := make(chan error, 1)
		go func() { done <- t.ws.Close(websocket.StatusNormalClosure, "") }()
		select {
		case err = <-done:
		case <-time.After(5 * time.Second):
			err = t.ws.CloseNow()
		}
		t.cancel()
	})
	return err
}

func (t *tunnelConn) LocalAddr() net.Addr  { return tunnelAddr("local") }
func (t *tunnelConn) RemoteAddr() net.Addr { return t.remote }

var errNoDeadlines = errors.New("tunnel connection: deadlines are not supported")

func (t *tunnelConn) SetDeadline(time.Time) error      { return errNoDeadlines }
func (t *tunnelConn) SetReadDeadline(time.Time) error  { return errNoDeadlines }
func (t *tunnelConn) SetWriteDeadline(time.Time) error { return errNoDeadlines }

// tunnelAddr names an end of a tunnel: INSTANCE:PORT.
type tunnelAddr string

func (a tunnelAddr) Network() string { return "envd-tcp" }
func (a tunnelAddr) String() string  { return string(a) }
