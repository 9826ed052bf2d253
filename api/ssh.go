package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/coder/websocket"
	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// SSH: the tenant's public keys (/v1/ssh-keys) and the keyless path into
// the node's SSH endpoint, GET /v1/instances/:i/ssh upgraded to a
// WebSocket whose binary messages carry an SSH connection (docs/api.md,
// "SSH"). That connection is already authenticated by the bearer token
// (header or subprotocol, as for the exec stream), so the SSH server
// accepts auth method "none" on it, for that instance only.

// SSHKeyCore manages the tenant's SSH public keys.
type SSHKeyCore interface {
	// AddSSHKey registers a key of the caller's tenant; one it has already
	// is ErrAlreadyExists.
	AddSSHKey(ctx context.Context, p types.Principal, req types.AddSSHKeyRequest) (types.SSHKey, error)
	ListSSHKeys(ctx context.Context, p types.Principal) ([]types.SSHKey, error)
	// DeleteSSHKey removes key id of the caller's tenant.
	DeleteSSHKey(ctx context.Context, p types.Principal, id int64) (types.SSHKey, error)
}

// SSHServer serves SSH connections that the API authenticated: conn
// carries the client's SSH protocol, p is the token's principal and
// instance the only instance the connection may reach. ServeConn returns
// when the connection ends.
type SSHServer interface {
	// CheckTunnel is called before the upgrade: the instance must be p's
	// (it is woken when not Running); the error is answered as usual.
	CheckTunnel(ctx context.Context, p types.Principal, instance string) error
	ServeConn(ctx context.Context, conn net.Conn, p types.Principal, instance string)
}

// WithSSH serves GET /v1/instances/{i}/ssh with srv. Default: none, and
// the route answers 404 not_found ("this node serves no SSH").
func WithSSH(srv SSHServer) Option {
	return func(o *options) error {
		if srv == nil {
			return errors.New("ssh server is nil")
		}
		o.ssh = srv
		return nil
	}
}

// sshMaxMessage bounds one WebSocket message of the SSH tunnel.
const sshMaxMessage = 1 << 20

type sshRoutes struct {
	core SSHKeyCore
	srv  SSHServer // nil = none
}

func (g sshRoutes) routes() []route {
	return []route{
		{http.MethodPost, "/ssh-keys", handle(http.StatusCreated, func(r in, req types.AddSSHKeyRequest) (types.SSHKey, error) {
			return g.core.AddSSHKey(r.ctx, r.p, req)
		})},
		{http.MethodGet, "/ssh-keys", handle(http.StatusOK, func(r in, _ none) ([]types.SSHKey, error) {
			return items(g.core.ListSSHKeys(r.ctx, r.p))
		})},
		{http.MethodDelete, "/ssh-keys/:id", handle(http.StatusOK, func(r in, _ none) (types.SSHKey, error) {
			id, err := strconv.ParseInt(r.param("id"), 10, 64)
			if err != nil || id <= 0 {
				return types.SSHKey{}, invalidArgument("ssh key id %q: want a positive number", r.param("id"))
			}
			return g.core.DeleteSSHKey(r.ctx, r.p, id)
		})},
		{http.MethodGet, "/instances/:i/ssh", g.tunnel},
	}
}

// tunnel hands the WebSocket's byte stream to the SSH server, bound to the
// instance and the token's principal, once the instance is checked (and
// woken): an unknown instance is a plain 404 before the upgrade.
func (g sshRoutes) tunnel(c *gin.Context) {
	if g.srv == nil {
		writeError(c, fmt.Errorf("ssh: this node serves no SSH (envd --ssh-listen): %w", errdefs.ErrNotFound))
		return
	}
	if !strings.EqualFold(c.GetHeader("Upgrade"), "websocket") {
		writeError(c, invalidArgument("ssh tunnel: the request is not a WebSocket upgrade (Upgrade: websocket)"))
		return
	}
	if err := g.srv.CheckTunnel(c.Request.Context(), principal(c), c.Param("i")); err != nil {
		writeError(c, err)
		return
	}
	conn, err := websocket.Accept(c.Writer, c.Request, &websocket.AcceptOptions{
		Subprotocols: []string{types.SSHSubprotocol},
		// Bearer tokens only, never cookies: see the exec stream.
		InsecureSkipVerify: true,
	})
	if err != nil {
		return // Accept has answered the request
	}
	defer conn.CloseNow()
	// SSH packets are at most 35000 bytes; a client may put several in one
	// message (envctl sends what it read, up to 32 KiB).
	conn.SetReadLimit(sshMaxMessage)
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	nc := websocket.NetConn(ctx, conn, websocket.MessageBinary)
	defer nc.Close()
	g.srv.ServeConn(ctx, nc, principal(c), c.Param("i"))
}
