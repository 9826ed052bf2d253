package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/execproto"

	"github.com/envd-dev/envd/api/types"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/errdefs"
)

// wsClient speaks the exec stream's protocol, message by message.
type wsClient struct {
	t    *testing.T
	conn *websocket.Conn
}

func dialExec(t *testing.T, srv *httptest.Server, query string, opts *websocket.DialOptions) (*wsClient, *http.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if opts == nil {
		opts = &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + apitest.Token}}}
	}
	if opts.Subprotocols == nil {
		opts.Subprotocols = []string{execproto.Subprotocol}
	}
	u := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/instances/i-1/exec/ws?" + query
	conn, resp, err := websocket.Dial(ctx, u, opts)
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { conn.CloseNow() })
	return &wsClient{t: t, conn: conn}, resp, nil
}

func (c *wsClient) send(channel byte, payload string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(c.t, c.conn.Write(ctx, websocket.MessageBinary, append([]byte{channel}, payload...)))
}

// readUntilExit collects output per channel until the exit message, and
// returns it with the close status that follows.
func (c *wsClient) readUntilExit() (map[byte]string, types.ExecExit, websocket.StatusCode) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := map[byte]string{}
	for {
		typ, msg, err := c.conn.Read(ctx)
		require.NoError(c.t, err)
		require.Equal(c.t, websocket.MessageBinary, typ)
		require.NotEmpty(c.t, msg)
		if msg[0] == execproto.Exit {
			var exit types.ExecExit
			require.NoError(c.t, json.Unmarshal(msg[1:], &exit), "%s", msg[1:])
			_, _, err := c.conn.Read(ctx)
			return out, exit, websocket.CloseStatus(err)
		}
		out[msg[0]] += string(msg[1:])
	}
}

func TestExecWebSocketEchoAndExitCode(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	core.Exec.ExecStreamFunc = func(_ context.Context, _ string, _ types.ExecRequest, stdio types.Stdio) (int, error) {
		b, err := io.ReadAll(stdio.Stdin)
		if err != nil {
			return -1, err
		}
		fmt.Fprintf(stdio.Stdout, "out:%s", b)
		fmt.Fprintf(stdio.Stderr, "err:%d", len(b))
		return 7, nil
	}
	c, resp, err := dialExec(t, srv, "cmd=sh&cmd=-c&cmd=cat&env=A=1&env=B=2&cwd=/w", nil)
	require.NoError(t, err)
	assert.Equal(t, execproto.Subprotocol, resp.Header.Get("Sec-WebSocket-Protocol"))
	c.send(execproto.Stdin, "hello ")
	c.send(execproto.Stdin, "world")
	c.send(execproto.EOF, "")
	out, exit, status := c.readUntilExit()
	assert.Equal(t, "out:hello world", out[execproto.Stdout])
	assert.Equal(t, "err:11", out[execproto.Stderr])
	assert.Equal(t, types.ExecExit{ExitCode: 7}, exit)
	assert.Equal(t, websocket.StatusNormalClosure, status)

	call, ok := core.LastCall("ExecStream")
	require.True(t, ok)
	assert.Equal(t, []any{"i-1", types.ExecRequest{Args: []string{"sh", "-c", "cat"}, Env: []string{"A=1", "B=2"}, Cwd: "/w"}, false}, call.Args)
	assert.Equal(t, "t1", call.Principal.Tenant)
}

func TestExecWebSocketTTYResize(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t) // the default fake echoes stdin and records sizes
	c, _, err := dialExec(t, srv, "cmd=bash&cmd=-l&tty=1", nil)
	require.NoError(t, err)
	c.send(execproto.Resize, `{"cols": 100, "rows": 40}`)
	c.send(execproto.Resize, `not json`) // ignored
	c.send(execproto.Stdin, "echo hi\r")
	require.Eventually(t, func() bool { return len(core.Exec.Sizes()) == 1 }, 5*time.Second, 5*time.Millisecond)
	c.send(execproto.Resize, `{"cols": 120, "rows": 50}`)
	require.Eventually(t, func() bool { return len(core.Exec.Sizes()) == 2 }, 5*time.Second, 5*time.Millisecond)
	c.send(execproto.EOF, "")
	out, exit, _ := c.readUntilExit()
	assert.Equal(t, "echo hi\r", out[execproto.Stdout])
	assert.Equal(t, 0, exit.ExitCode)
	assert.Equal(t, []types.TermSize{{Cols: 100, Rows: 40}, {Cols: 120, Rows: 50}}, core.Exec.Sizes())
	call, _ := core.LastCall("ExecStream")
	assert.Equal(t, []any{"i-1", types.ExecRequest{Args: []string{"bash", "-l"}}, true}, call.Args)
}

// The size in the URL is waiting on Resize when the core is called, so the
// terminal is made with it: no resize message can race the command's start.
func TestExecWebSocketInitialSize(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	atStart := core.Exec.SizeAtStart()
	c, _, err := dialExec(t, srv, "cmd=sh&tty=1&cols=100&rows=40", nil)
	require.NoError(t, err)
	_, exit, _ := c.readUntilExit()
	assert.Equal(t, 0, exit.ExitCode)
	assert.Equal(t, types.TermSize{Cols: 100, Rows: 40}, <-atStart)
}

func TestExecWebSocketCoreError(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	core.Exec.ExecStreamFunc = func(_ context.Context, id string, _ types.ExecRequest, _ types.Stdio) (int, error) {
		return -1, errdefs.WithDetails(fmt.Errorf("instance %q is Stopped, exec needs Running: %w", id, errdefs.ErrFailedPrecondition),
			map[string]any{"state": "Stopped"})
	}
	c, _, err := dialExec(t, srv, "cmd=ls", nil)
	require.NoError(t, err)
	_, exit, status := c.readUntilExit()
	assert.Equal(t, -1, exit.ExitCode)
	require.NotNil(t, exit.Error)
	assert.Equal(t, "failed_precondition", exit.Error.Code)
	assert.Equal(t, map[string]any{"state": "Stopped"}, exit.Error.Details)
	assert.Equal(t, websocket.StatusCode(4409), status)
}

func TestExecWebSocketDisconnectKillsTheProcess(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	var (
		mu     sync.Mutex
		ctxErr error
	)
	ended := make(chan struct{})
	core.Exec.ExecStreamFunc = func(ctx context.Context, _ string, _ types.ExecRequest, _ types.Stdio) (int, error) {
		defer close(ended)
		<-ctx.Done()
		mu.Lock()
		ctxErr = ctx.Err()
		mu.Unlock()
		return -1, ctx.Err()
	}
	c, _, err := dialExec(t, srv, "cmd=sleep&cmd=1000", nil)
	require.NoError(t, err)
	c.conn.CloseNow()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the core's exec was not canceled when the client went away")
	}
	mu.Lock()
	defer mu.Unlock()
	assert.ErrorIs(t, ctxErr, context.Canceled)
}

func TestExecWebSocketAuthAndArguments(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t)

	// Browsers carry the token in a subprotocol.
	tok := base64.RawURLEncoding.EncodeToString([]byte(apitest.Token))
	c, resp, err := dialExec(t, srv, "cmd=cat", &websocket.DialOptions{
		Subprotocols: []string{execproto.Subprotocol, execproto.BearerPrefix + tok},
	})
	require.NoError(t, err)
	assert.Equal(t, execproto.Subprotocol, resp.Header.Get("Sec-WebSocket-Protocol"), "the token protocol is never selected")
	c.send(execproto.Stdin, "x")
	c.send(execproto.EOF, "")
	out, exit, _ := c.readUntilExit()
	assert.Equal(t, "x", out[execproto.Stdout])
	assert.Equal(t, 0, exit.ExitCode)

	for _, tc := range []struct {
		name, query string
		opts        *websocket.DialOptions
		status      int
	}{
		{"no token", "cmd=cat", &websocket.DialOptions{}, http.StatusUnauthorized},
		{"wrong token", "cmd=cat", &websocket.DialOptions{
			Subprotocols: []string{execproto.Subprotocol, execproto.BearerPrefix + base64.RawURLEncoding.EncodeToString([]byte("nope"))},
		}, http.StatusUnauthorized},
		{"no command", "tty=1", nil, http.StatusBadRequest},
		{"bad tty", "cmd=cat&tty=yes", nil, http.StatusBadRequest},
		{"cols without rows", "cmd=cat&tty=1&cols=80", nil, http.StatusBadRequest},
		{"zero rows", "cmd=cat&tty=1&cols=80&rows=0", nil, http.StatusBadRequest},
		{"size too large", "cmd=cat&tty=1&cols=70000&rows=24", nil, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := dialExec(t, srv, tc.query, tc.opts)
			require.Error(t, err)
			require.NotNil(t, resp)
			assert.Equal(t, tc.status, resp.StatusCode)
		})
	}
}
