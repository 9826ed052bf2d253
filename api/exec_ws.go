package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/coder/websocket"
	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/api/execproto"
)

// Interactive and streaming exec: GET /v1/instances/:i/exec/ws, upgraded
// to a WebSocket (docs/api.md, "Streaming exec").
//
// Query: cmd (repeated, the argv), env (repeated, K=V), cwd, tty (1 or
// true). Every message is binary; its first byte is the channel and the
// rest its payload:
//
//	0 stdin   client -> server  bytes for the process's stdin
//	1 stdout  server -> client  output (with tty: all output)
//	2 stderr  server -> client  error output (never with tty)
//	3 resize  client -> server  {"cols": N, "rows": N}
//	4 exit    server -> client  {"exit_code": N} or {"exit_code": -1, "error": {...}}, then close
//	5 eof     client -> server  closes the process's stdin
//
// Authentication is the usual Authorization header or, for browsers that
// cannot set headers on a WebSocket, the subprotocol
// "base64url.bearer.envd.dev.<token, base64url without padding>" offered
// next to execproto.Subprotocol. A client disconnect kills the process.

// ExecCore runs commands in instances.
type ExecCore interface {
	Exec(ctx context.Context, p types.Principal, id string, req types.ExecRequest) (types.ExecResult, error)
	// ExecStream runs a command with its streams connected to stdio and
	// returns its exit code when it ends; canceling ctx kills it.
	ExecStream(ctx context.Context, p types.Principal, id string, req types.ExecRequest, stdio types.Stdio) (int, error)
	// WakeInstance returns the instance once it is Running, starting a
	// stopped or hibernated one; one still starting past the wait is an
	// errdefs.ErrWaking with a Retry-After.
	WakeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
}

type execs struct {
	core  ExecCore
	admit admitFunc
}

func (g execs) routes() []route {
	return []route{
		{http.MethodPost, "/instances/:i/exec", handle(http.StatusOK, func(r in, req types.ExecRequest) (types.ExecResult, error) {
			release, err := g.admit(r.p, types.AdmitExec)
			if err != nil {
				return types.ExecResult{}, err
			}
			defer release()
			return g.core.Exec(wakeContext(r.c), r.p, r.param("i"), req)
		})},
		{http.MethodGet, "/instances/:i/exec/ws", g.webSocket},
	}
}

// Close codes of the exec stream besides the normal 1000: 4000 + the HTTP
// status of the error in the exit message (4409 for failed_precondition).
const execCloseErrorBase = 4000

// subprotocolToken returns the bearer token carried in the
// Sec-WebSocket-Protocol header, if any.
func subprotocolToken(r *http.Request) (string, bool) {
	for _, h := range r.Header.Values("Sec-WebSocket-Protocol") {
		for p := range strings.SplitSeq(h, ",") {
			p = strings.TrimSpace(p)
			if strings.HasPrefix(p, execproto.BearerPrefix) {
				return execproto.BearerToken(p)
			}
		}
	}
	return "", false
}

func (g execs) webSocket(c *gin.Context) {
	req := types.ExecRequest{Args: c.QueryArray("cmd"), Env: c.QueryArray("env"), Cwd: c.Query("cwd")}
	if len(req.Args) == 0 || req.Args[0] == "" {
		writeError(c, invalidArgument("query parameter cmd is required, once per argument (?cmd=sh&cmd=-l)"))
		return
	}
	var tty bool
	switch c.Query("tty") {
	case "", "0", "false":
	case "1", "true":
		tty = true
	default:
		writeError(c, invalidArgument("query parameter tty %q: must be 1, true, 0 or false", c.Query("tty")))
		return
	}
	switch c.Query("wake") {
	case "", "0", "false":
	case "1", "true":
		req.Wake = true
	default:
		writeError(c, invalidArgument("query parameter wake %q: must be 1, true, 0 or false", c.Query("wake")))
		return
	}
	initial, err := initialSize(c.Query("cols"), c.Query("rows"))
	if err != nil {
		writeError(c, err)
		return
	}
	if err := types.CheckExecRequest(req); err != nil {
		writeError(c, err)
		return
	}
	if !strings.EqualFold(c.GetHeader("Upgrade"), "websocket") {
		// Without this check the WebSocket library answers a plain-text 426.
		writeError(c, invalidArgument("exec stream: the request is not a WebSocket upgrade (Upgrade: websocket)"))
		return
	}
	if req.Wake {
		// Before the upgrade, so a client that does not wait gets a plain
		// 503 waking with its Retry-After.
		if _, err := g.core.WakeInstance(wakeContext(c), principal(c), c.Param("i")); err != nil {
			writeError(c, err)
			return
		}
	}
	// Admitted before the upgrade, so a refusal is a plain 429.
	release, err := g.admit(principal(c), types.AdmitExec)
	if err != nil {
		writeError(c, err)
		return
	}
	defer release()
	conn, err := websocket.Accept(c.Writer, c.Request, &websocket.AcceptOptions{
		Subprotocols: []string{execproto.Subprotocol},
		// Any origin may connect: the API authenticates with bearer tokens,
		// never with cookies, so a foreign page cannot ride on a user's
		// session (cross-site WebSocket hijacking needs ambient credentials).
		InsecureSkipVerify: true,
	})
	if err != nil {
		return // Accept has answered the request
	}
	defer conn.CloseNow()
	conn.SetReadLimit(execproto.MaxMessage)

	// The session ends when the process exits or the client goes away;
	// canceling ctx kills the process.
	ctx, cancel := context.WithCancel(c.Request.Context())
	defer cancel()
	s := &execSession{conn: conn}
	stdinR, stdinW := io.Pipe()
	resize := make(chan types.TermSize, 1)
	if initial != nil {
		// Waiting before the exec starts, the size becomes the terminal's
		// size at creation: the command's first look at it sees it. A
		// resize message would race the command's first read of stdin.
		resize <- *initial
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		err := s.readLoop(ctx, stdinW, resize)
		// The connection is closed or broken: when the process still runs,
		// nobody can see it any more, so it is killed.
		_ = stdinW.CloseWithError(err)
		cancel()
	}()
	stdio := types.Stdio{
		Stdin:  stdinR,
		Stdout: &execWriter{s: s, ctx: ctx, channel: execproto.Stdout},
		Stderr: &execWriter{s: s, ctx: ctx, channel: execproto.Stderr},
		TTY:    tty,
	}
	if tty {
		stdio.Resize = resize
	}
	code, err := g.core.ExecStream(ctx, principal(c), c.Param("i"), req, stdio)
	_ = stdinR.CloseWithError(io.ErrClosedPipe) // unblock a reader stuck on a pipe write

	exit := types.ExecExit{ExitCode: code}
	closeCode, reason := websocket.StatusNormalClosure, ""
	if err != nil {
		status, body := errorResponse(c, err)
		exit = types.ExecExit{ExitCode: -1, Error: &body.Error}
		closeCode, reason = websocket.StatusCode(execCloseErrorBase+status), body.Error.Code
	}
	select {
	case <-readDone:
		return // the client is gone; nobody to tell
	default:
	}
	b, _ := json.Marshal(exit)
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer wcancel()
	if err := s.write(wctx, execproto.Exit, b); err != nil {
		return
	}
	// Close waits for the client's close frame, which the read loop sees.
	_ = conn.Close(closeCode, reason)
	<-readDone
}

// execSession serializes the writes of the exec stream.
type execSession struct {
	conn *websocket.Conn
	mu   sync.Mutex
}

func (s *execSession) write(ctx context.Context, channel byte, payload []byte) error {
	msg := make([]byte, 1+len(payload))
	msg[0] = channel
	copy(msg[1:], payload)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn.Write(ctx, websocket.MessageBinary, msg)
}

// readLoop reads client messages until the connection closes, and returns
// why it did: stdin goes to stdin, sizes to resize (the newest replacing
// one not yet taken).
func (s *execSession) readLoop(ctx context.Context, stdin *io.PipeWriter, resize chan types.TermSize) error {
	// Reads use a context that is never canceled: canceling a read closes
	// the connection, and the exit message still has to go out.
	rctx := context.WithoutCancel(ctx)
	for {
		_, msg, err := s.conn.Read(rctx)
		if err != nil {
			if websocket.CloseStatus(err) != -1 {
				return errors.New("the client closed the exec stream")
			}
			return err
		}
		if len(msg) == 0 {
			continue
		}
		payload := msg[1:]
		switch msg[0] {
		case execproto.Stdin:
			if len(payload) == 0 {
				continue
			}
			if _, err := stdin.Write(payload); err != nil {
				// The process closed its stdin or ended; keep reading so
				// resizes and the close handshake are still seen.
				continue
			}
		case execproto.EOF:
			_ = stdin.Close()
		case execproto.Resize:
			var sz types.TermSize
			if err := json.Unmarshal(payload, &sz); err != nil || sz.Cols == 0 || sz.Rows == 0 {
				continue // a bad size is ignored, not fatal
			}
			for sent := false; !sent; {
				select {
				case resize <- sz:
					sent = true
				default:
					select {
					case <-resize:
					default:
					}
				}
			}
		default:
			// Unknown channels are ignored so that clients may grow.
		}
	}
}

// execWriter sends what the process writes on one channel, in chunks.
type execWriter struct {
	s       *execSession
	ctx     context.Context
	channel byte
}

func (w *execWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), execproto.Chunk)]
		if err := w.s.write(w.ctx, w.channel, chunk); err != nil {
			return n, fmt.Errorf("exec stream: %w", err)
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// initialSize parses the cols and rows query parameters: both or neither.
func initialSize(cols, rows string) (*types.TermSize, error) {
	if cols == "" && rows == "" {
		return nil, nil
	}
	c, cerr := strconv.ParseUint(cols, 10, 16)
	r, rerr := strconv.ParseUint(rows, 10, 16)
	if cerr != nil || rerr != nil || c == 0 || r == 0 {
		return nil, invalidArgument("query parameters cols %q and rows %q: both are needed, each from 1 to 65535", cols, rows)
	}
	return &types.TermSize{Cols: uint16(c), Rows: uint16(r)}, nil
}
