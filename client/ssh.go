package client

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/coder/websocket"

	"github.com/envd-dev/envd/api/types"
)

// AddSSHKey registers a public key (authorized_keys form) of the caller's
// tenant: POST /v1/ssh-keys.
func (c *Client) AddSSHKey(ctx context.Context, req types.AddSSHKeyRequest) (types.SSHKey, error) {
	return post[types.SSHKey](ctx, c, http.MethodPost, "/v1/ssh-keys", req)
}

// ListSSHKeys lists the caller's tenant's keys: GET /v1/ssh-keys.
func (c *Client) ListSSHKeys(ctx context.Context) ([]types.SSHKey, error) {
	return get[[]types.SSHKey](ctx, c, "/v1/ssh-keys")
}

// DeleteSSHKey removes a key: DELETE /v1/ssh-keys/{id}.
func (c *Client) DeleteSSHKey(ctx context.Context, id int64) (types.SSHKey, error) {
	return post[types.SSHKey](ctx, c, http.MethodDelete, "/v1/ssh-keys/"+strconv.FormatInt(id, 10), nil)
}

// SSHTunnel opens GET /v1/instances/{i}/ssh: the returned connection
// carries an SSH connection to the node's SSH endpoint, logged in with the
// client's token (auth method "none") and bound to instance id. The
// connection lives until it is closed or ctx ends.
func (c *Client) SSHTunnel(ctx context.Context, id string) (net.Conn, error) {
	u, err := url.Parse(c.base + "/v1/instances/" + esc(id) + "/ssh")
	if err != nil {
		return nil, fmt.Errorf("ssh to %q: %w", id, err)
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
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{
		HTTPClient:   c.hc,
		HTTPHeader:   header,
		Subprotocols: []string{types.SSHSubprotocol},
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			return nil, decodeError(resp)
		}
		return nil, fmt.Errorf("ssh to %q: connect: %w", id, err)
	}
	conn.SetReadLimit(1 << 20) // the server sends one SSH packet (at most 35000 bytes) a message
	return websocket.NetConn(ctx, conn, websocket.MessageBinary), nil
}
