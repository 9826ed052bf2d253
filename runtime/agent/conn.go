package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Request is one command to run.
type Request struct {
	Args   []string  // Args[0] looked up in the PATH of Env (as a shell would), or a path
	Env    []string  // the whole environment, KEY=VALUE
	Cwd    string    // "" = "/"
	Stdin  io.Reader // nil = no input (the process reads EOF at once)
	Stdout io.Writer // nil = discard
	Stderr io.Writer // nil = discard
}

// CommandError: the command could not be run, as a shell reports it: Code 127
// (not found) or 126 (found, not executable), Message like
// `nosuch: executable file not found in $PATH`,
// `/does/not/exist: no such file or directory`,
// `/etc/passwd: permission denied`, `/tmp: is a directory` (no trailing
// newline).
type CommandError struct {
	Code    int
	Message string
}

func (e *CommandError) Error() string { return e.Message }

// StartError: the process could not be set up for another reason (working
// directory missing, ...): Reason mentions the cause and the path, e.g.
// `chdir to cwd "/nope": no such file or directory`.
type StartError struct {
	Reason string
}

func (e *StartError) Error() string { return "start process: " + e.Reason }

var (
	// ErrNotSent: the request never reached the agent (the connection was
	// closed, or the request did not fit in a frame, before the Start frame
	// was written): the caller may run the command another way.
	ErrNotSent = errors.New("command not sent to the agent")
	// ErrLost: the connection ended after the Start frame was written: the
	// command may have run; do not retry it.
	ErrLost = errors.New("agent connection lost after the command was sent")
)

const (
	helloTimeout = 5 * time.Second
	// writeTimeout bounds each frame write: an agent reads all the time, so
	// one that does not read for this long is broken or hostile and the
	// connection is dropped.
	writeTimeout = 10 * time.Second
	// killWait is how long Exec waits for Exit after sending Kill.
	killWait = 10 * time.Second
	// maxMessage bounds the text of a StartFailed kept in an error.
	maxMessage = 4 << 10
)

// Conn is the host's side of one agent connection. It is safe for
// concurrent Exec calls.
//
// Output is read in order from the one connection and written to each
// Request's Stdout and Stderr by a single goroutine, with no queue between:
// a writer that blocks holds up the output of every Exec on the Conn.
type Conn struct {
	nc  net.Conn
	pid int

	wmu sync.Mutex // serializes frame writes

	mu     sync.Mutex
	execs  map[uint32]*hostExec // live execs by id
	nextID uint32
	ended  bool  // the read loop has ended; no exec can be added
	err    error // why it ended

	done chan struct{}
}

// hostExec is the host's state of one Exec.
type hostExec struct {
	id uint32

	// result receives the exec's outcome once, sent by whoever removes the
	// exec from Conn.execs first: the read loop on Exit or StartFailed, or
	// the end of the connection.
	result chan execResult

	// mu is held while output is written; closed means Exec has returned
	// and the writers must not be used any more.
	mu             sync.Mutex
	closed         bool
	stdout, stderr io.Writer // nil: discard

	// Stdin flow control.
	cmu      sync.Mutex
	inflight int           // stdin bytes sent and not acknowledged
	credit   chan struct{} // signaled when inflight went down

	done chan struct{} // closed when Exec returns
}

type execResult struct {
	code int
	err  error
}

// NewConn reads the agent's Hello from c (waiting at most 5 s), checks its
// version and starts reading the connection. If it fails it closes c.
func NewConn(c net.Conn) (*Conn, error) {
	conn, err := newConn(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("agent handshake: %w", err)
	}
	return conn, nil
}

func newConn(c net.Conn) (*Conn, error) {
	if err := c.SetReadDeadline(time.Now().Add(helloTimeout)); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(c, MaxFrame)
	fr := &frameReader{r: br, reuse: true}
	f, err := fr.next()
	if err != nil {
		return nil, fmt.Errorf("read hello: %w", err)
	}
	if f.typ != typeHello {
		return nil, fmt.Errorf("first frame is of type %d, not hello", f.typ)
	}
	var h helloMsg
	if err := json.Unmarshal(f.payload, &h); err != nil {
		return nil, fmt.Errorf("decode hello: %w", err)
	}
	if h.Version != Version {
		return nil, fmt.Errorf("agent speaks protocol version %d, want %d", h.Version, Version)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return nil, err
	}
	conn := &Conn{
		nc:    c,
		pid:   h.PID,
		execs: make(map[uint32]*hostExec),
		done:  make(chan struct{}),
	}
	go conn.readLoop(fr)
	return conn, nil
}

// PID is the agent's pid in the container, as its Hello said.
func (c *Conn) PID() int { return c.pid }

// Done is closed when the connection has ended.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close closes the connection. Execs in progress return ErrLost; the agent
// kills their processes.
func (c *Conn) Close() error { return c.nc.Close() }

// Exec runs req through the agent and returns the command's exit code: its
// exit status, or 128+signal if a signal killed it.
//
// Errors:
//   - *CommandError: the command was not found (127) or could not be
//     executed (126); the code returned is its Code.
//   - *StartError: the process could not be set up (working directory...).
//   - ErrNotSent (wrapped): the command did not reach the agent.
//   - ErrLost (wrapped): the connection ended while the command ran.
//   - ctx's error (wrapped): ctx ended; Exec sent Kill (SIGKILL) and waited up
//     to 10 s for the exit: the code returned is the exit code if it came
//     (137), else -1.
//
// The code is -1 with every error but the first and the last.
//
// If req.Stdin is not nil it is read by another goroutine, which stops at the
// first Read that returns after Exec has returned: a Read in progress (on a
// pipe or a network stream that has no data) is not interrupted.
func (c *Conn) Exec(ctx context.Context, req Request) (int, error) {
	if len(req.Args) == 0 {
		return -1, &StartError{Reason: "no command given"}
	}
	name := req.Args[0]
	if err := ctx.Err(); err != nil {
		return -1, fmt.Errorf("exec %q: %w", name, err)
	}
	payload, err := json.Marshal(startMsg{Args: req.Args, Env: req.Env, Cwd: req.Cwd, Stdin: req.Stdin != nil})
	if err != nil {
		return -1, fmt.Errorf("exec %q: encode request: %w: %w", name, err, ErrNotSent)
	}
	if len(payload) > MaxFrame {
		return -1, fmt.Errorf("exec %q: request of %d bytes is more than %d: %w", name, len(payload), MaxFrame, ErrNotSent)
	}

	e := &hostExec{
		result: make(chan execResult, 1),
		stdout: req.Stdout,
		stderr: req.Stderr,
		credit: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	if err := c.add(e); err != nil {
		return -1, fmt.Errorf("exec %q: %w", name, err)
	}
	defer c.finish(e)

	if err := c.write(appendFrame(nil, typeStart, e.id, payload)); err != nil {
		return -1, fmt.Errorf("exec %q: %w: %v", name, ErrNotSent, err)
	}
	if req.Stdin != nil {
		go c.copyStdin(e, req.Stdin)
	}

	select {
	case r := <-e.result:
		if r.err != nil && !isStartFailure(r.err) {
			r.err = fmt.Errorf("exec %q: %w", name, r.err)
		}
		return r.code, r.err
	case <-ctx.Done():
	}
	_ = c.write(appendFrame(nil, typeKill, e.id, []byte{9}))
	t := time.NewTimer(killWait)
	defer t.Stop()
	code := -1
	select {
	case r := <-e.result:
		if r.err == nil {
			code = r.code
		}
	case <-t.C:
	}
	return code, fmt.Errorf("exec %q: %w", name, ctx.Err())
}

func isStartFailure(err error) bool {
	var ce *CommandError
	var se *StartError
	return errors.As(err, &ce) || errors.As(err, &se)
}

// add gives e an id and makes it live.
func (c *Conn) add(e *hostExec) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended {
		return fmt.Errorf("%w: %v", ErrNotSent, c.err)
	}
	for {
		c.nextID++
		if _, used := c.execs[c.nextID]; c.nextID != 0 && !used {
			break
		}
	}
	e.id = c.nextID
	c.execs[e.id] = e
	return nil
}

// take removes the exec id from the live ones and returns it, or nil if it
// is not live.
func (c *Conn) take(id uint32) *hostExec {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.execs[id]
	delete(c.execs, id)
	return e
}

func (c *Conn) lookup(id uint32) *hostExec {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.execs[id]
}

// finish ends e when Exec returns: no more output is written to its writers
// and its stdin copy stops.
func (c *Conn) finish(e *hostExec) {
	c.mu.Lock()
	if c.execs[e.id] == e {
		delete(c.execs, e.id)
	}
	c.mu.Unlock()
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	close(e.done)
}

// write writes one whole frame. A failed write may have sent part of it, so
// it closes the connection.
func (c *Conn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	err := c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if err == nil {
		_, err = c.nc.Write(b)
	}
	if err != nil {
		c.nc.Close()
	}
	return err
}

// copyStdin sends r to the agent in Stdin frames, then StdinEOF. A read error
// ends the input as EOF does.
func (c *Conn) copyStdin(e *hostExec, r io.Reader) {
	buf := make([]byte, headerLen+dataChunk)
	for {
		n, err := r.Read(buf[headerLen:])
		select {
		case <-e.done:
			return
		default:
		}
		if n > 0 {
			if !c.acquire(e, n) {
				return
			}
			b := buf[:headerLen+n]
			putHeader(b, typeStdin, e.id)
			if c.write(b) != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	_ = c.write(appendFrame(nil, typeStdinEOF, e.id, nil))
}

// acquire waits until n more bytes of stdin fit in the window. It returns
// false if the exec or the connection ended first.
func (c *Conn) acquire(e *hostExec, n int) bool {
	for {
		e.cmu.Lock()
		if e.inflight+n <= stdinWindow {
			e.inflight += n
			e.cmu.Unlock()
			return true
		}
		e.cmu.Unlock()
		select {
		case <-e.credit:
		case <-e.done:
			return false
		case <-c.done:
			return false
		}
	}
}

func (e *hostExec) ack(n uint32) {
	e.cmu.Lock()
	e.inflight -= int(min(n, uint32(e.inflight)))
	e.cmu.Unlock()
	select {
	case e.credit <- struct{}{}:
	default:
	}
}

// output writes p to the exec's stdout or stderr. After a writer failed,
// the rest of its output is discarded.
func (e *hostExec) output(typ byte, p []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return
	}
	w := &e.stdout
	if typ == typeStderr {
		w = &e.stderr
	}
	if *w == nil {
		return
	}
	if n, err := (*w).Write(p); err != nil || n != len(p) {
		*w = nil
	}
}

// readLoop reads frames until the connection ends, then fails the live
// execs with ErrLost.
func (c *Conn) readLoop(fr *frameReader) {
	var err error
	for {
		var f frame
		if f, err = fr.next(); err != nil {
			break
		}
		if err = c.dispatch(f); err != nil {
			break
		}
	}
	c.nc.Close()
	c.mu.Lock()
	c.ended = true
	c.err = err
	execs := c.execs
	c.execs = nil
	c.mu.Unlock()
	for _, e := range execs {
		e.result <- execResult{code: -1, err: fmt.Errorf("%w: %v", ErrLost, err)}
	}
	close(c.done)
}

// dispatch handles one frame from the agent. An error ends the connection.
func (c *Conn) dispatch(f frame) error {
	switch f.typ {
	case typeStdout, typeStderr:
		if e := c.lookup(f.id); e != nil {
			e.output(f.typ, f.payload)
		}
	case typeStdinAck:
		if len(f.payload) != 4 {
			return fmt.Errorf("stdin ack of %d bytes", len(f.payload))
		}
		if e := c.lookup(f.id); e != nil {
			e.ack(binary.BigEndian.Uint32(f.payload))
		}
	case typeExit, typeStartFailed:
		e := c.take(f.id)
		if e == nil {
			return nil
		}
		r, err := decodeResult(f)
		if err != nil {
			e.result <- execResult{code: -1, err: fmt.Errorf("%w: %v", ErrLost, err)}
			return err
		}
		e.result <- r
	}
	// Started needs nothing; other types are ignored.
	return nil
}

// decodeResult decodes an Exit or a StartFailed into the exec's outcome.
func decodeResult(f frame) (execResult, error) {
	if f.typ == typeExit {
		var m exitMsg
		if err := json.Unmarshal(f.payload, &m); err != nil {
			return execResult{}, fmt.Errorf("decode exit of exec %d: %w", f.id, err)
		}
		return execResult{code: m.Code}, nil
	}
	var m startFailedMsg
	if err := json.Unmarshal(f.payload, &m); err != nil {
		return execResult{}, fmt.Errorf("decode start failure of exec %d: %w", f.id, err)
	}
	return startFailure(m), nil
}

func startFailure(m startFailedMsg) execResult {
	msg := m.Message
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	if !m.Process && (m.Code == 126 || m.Code == 127) {
		return execResult{code: m.Code, err: &CommandError{Code: m.Code, Message: msg}}
	}
	return execResult{code: -1, err: &StartError{Reason: msg}}
}
