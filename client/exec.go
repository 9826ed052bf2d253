package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/envd-dev/envd/api/types"

	"github.com/coder/websocket"

	"github.com/envd-dev/envd/api/execproto"
	"github.com/envd-dev/envd/errdefs"
)

// ExecStream runs a command in the instance with its streams connected to
// stdio and returns its exit code when it ends: GET
// /v1/instances/{i}/exec/ws, a WebSocket. req.Stdin and req.Timeout are not
// used. With stdio.TTY the command gets a terminal: all its output arrives
// on stdio.Stdout, and sizes sent on stdio.Resize resize it. Send the
// initial size before the call: the terminal is then made with it, and the
// command's first look sees it. Later sizes are applied as they arrive, like
// a SIGWINCH, with no order against stdin sent meanwhile. When stdio.Stdin
// ends, the command's stdin is closed; a nil Stdin gives it none (EOF at
// once). A non-zero exit code is not an error. Canceling ctx ends the
// session and the server kills the command.
//
// ExecStream does not wait for a Read of stdio.Stdin in progress when the
// command exits: that read's data is lost.
func (c *Client) ExecStream(ctx context.Context, id string, req types.ExecRequest, stdio types.Stdio) (int, error) {
	var initial *types.TermSize
	if stdio.TTY && stdio.Resize != nil {
		// A size already sent goes in the URL: the terminal is made with
		// it, so the command's first look at it cannot race a resize.
		select {
		case sz, ok := <-stdio.Resize:
			if ok && sz.Cols > 0 && sz.Rows > 0 {
				initial = &sz
			}
		default:
		}
	}
	u, err := c.execURL(id, req, stdio.TTY, initial)
	if err != nil {
		return -1, err
	}
	header := http.Header{"User-Agent": {c.userAgent}}
	if c.token != "" {
		header.Set("Authorization", "Bearer "+c.token)
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient:   c.hc,
		HTTPHeader:   header,
		Subprotocols: []string{execproto.Subprotocol},
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.Body != nil {
			return -1, decodeError(resp)
		}
		return -1, fmt.Errorf("exec in %q: connect: %w", id, err)
	}
	defer conn.CloseNow()
	conn.SetReadLimit(execproto.MaxMessage)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	send := func(channel byte, payload []byte) error {
		msg := make([]byte, 1+len(payload))
		msg[0] = channel
		copy(msg[1:], payload)
		return conn.Write(ctx, websocket.MessageBinary, msg)
	}
	if stdio.Resize != nil {
		go func() {
			for {
				select {
				case sz, ok := <-stdio.Resize:
					if !ok {
						return
					}
					b, _ := json.Marshal(sz)
					if send(execproto.Resize, b) != nil {
						return
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	go func() {
		if stdio.Stdin != nil {
			buf := make([]byte, execproto.Chunk)
			for {
				n, err := stdio.Stdin.Read(buf)
				if n > 0 {
					if send(execproto.Stdin, buf[:n]) != nil {
						return
					}
				}
				if err != nil {
					break
				}
			}
		}
		_ = send(execproto.EOF, nil)
	}()

	stdout, stderr := stdio.Stdout, stdio.Stderr
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	for {
		_, msg, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return -1, ctx.Err()
			}
			return -1, fmt.Errorf("exec in %q: the stream ended before the exit status: %w", id, err)
		}
		if len(msg) == 0 {
			continue
		}
		payload := msg[1:]
		switch msg[0] {
		case execproto.Stdout:
			if _, err := stdout.Write(payload); err != nil {
				return -1, fmt.Errorf("exec in %q: write stdout: %w", id, err)
			}
		case execproto.Stderr:
			if _, err := stderr.Write(payload); err != nil {
				return -1, fmt.Errorf("exec in %q: write stderr: %w", id, err)
			}
		case execproto.Exit:
			var ex types.ExecExit
			if err := json.Unmarshal(payload, &ex); err != nil {
				return -1, fmt.Errorf("exec in %q: decode exit status: %w", id, err)
			}
			_ = conn.Close(websocket.StatusNormalClosure, "")
			if ex.Error != nil {
				status := http.StatusInternalServerError
				if k := errdefs.FromCode(ex.Error.Code); k != nil {
					status = errdefs.HTTPStatus(k)
				}
				return -1, &types.Error{Status: status, Code: ex.Error.Code, Message: ex.Error.Message, Details: ex.Error.Details, RequestID: ex.Error.RequestID}
			}
			return ex.ExitCode, nil
		}
	}
}

// execURL is the WebSocket URL of an exec stream.
func (c *Client) execURL(id string, req types.ExecRequest, tty bool, size *types.TermSize) (string, error) {
	if len(req.Args) == 0 {
		return "", errors.New("exec: no command")
	}
	u, err := url.Parse(c.base + "/v1/instances/" + esc(id) + "/exec/ws")
	if err != nil {
		return "", fmt.Errorf("exec in %q: %w", id, err)
	}
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	}
	q := url.Values{"cmd": req.Args}
	if len(req.Env) > 0 {
		q["env"] = req.Env
	}
	if req.Cwd != "" {
		q.Set("cwd", req.Cwd)
	}
	if req.Wake {
		q.Set("wake", "1")
	}
	if tty {
		q.Set("tty", "1")
		if size != nil {
			q.Set("cols", strconv.Itoa(int(size.Cols)))
			q.Set("rows", strconv.Itoa(int(size.Rows)))
		}
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// BearerSubprotocol returns the WebSocket subprotocol that carries token,
// for clients that cannot set an Authorization header (browsers): offer it
// together with "v1.exec.envd.dev".
func BearerSubprotocol(token string) string {
	return execproto.BearerSubprotocol(token)
}
