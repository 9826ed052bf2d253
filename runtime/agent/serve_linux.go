//go:build linux

package agent

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ServeOptions tunes Serve and Run.
type ServeOptions struct {
	// DrainGrace is how long output may pause, after a process exited,
	// before the agent stops waiting for the background processes that hold
	// its output pipes open. Default 2 s.
	DrainGrace time.Duration
}

const defaultDrainGrace = 2 * time.Second

// defaultPath is searched when the request's environment has no PATH.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

const (
	atFdcwd   = -100  // AT_FDCWD
	atEaccess = 0x200 // AT_EACCESS: check with the effective ids
	xOK       = 1     // X_OK
)

// Serve runs the agent's side on one connection until it ends (or ctx ends,
// which closes it): sends Hello, runs Start requests concurrently. When the
// connection ends it SIGKILLs the processes still running from it. It
// returns nil when the host closed the connection, ctx's error when ctx
// ended.
func Serve(ctx context.Context, c net.Conn, opts ServeOptions) error {
	s := &server{
		conn:  c,
		grace: opts.DrainGrace,
		procs: make(map[uint32]*proc),
	}
	if s.grace <= 0 {
		s.grace = defaultDrainGrace
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	hello, _ := json.Marshal(helloMsg{Version: Version, PID: os.Getpid()})
	err := s.send(typeHello, 0, hello)
	if err == nil {
		// Payloads are not reused: a Stdin payload goes to the process's
		// queue as it is, and back to the pool once written.
		fr := &frameReader{r: c, alloc: getChunk}
		for {
			var f frame
			if f, err = fr.next(); err != nil {
				break
			}
			if !s.dispatch(f) {
				putChunk(f.payload)
			}
		}
	}
	c.Close()
	s.end()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return fmt.Errorf("serve agent connection: %w", err)
}

type server struct {
	conn  net.Conn
	grace time.Duration

	wmu sync.Mutex // serializes frame writes

	mu    sync.Mutex
	procs map[uint32]*proc // live execs
	gone  bool             // the connection has ended
}

// proc is the agent's state of one exec.
type proc struct {
	s  *server
	id uint32

	mu      sync.Mutex
	p       *os.Process    // nil until forked
	kill    syscall.Signal // a Kill that came before the fork
	exited  bool
	stopped bool       // drain ended by Kill or by the end of the connection
	outs    []*os.File // read ends of stdout and stderr, once forked
	sending int        // output frames being sent

	// Stdin: frames queued for the writer goroutine, at most stdinWindow
	// bytes.
	cond      sync.Cond // on mu
	queue     [][]byte
	queued    int
	eof       bool     // StdinEOF came
	stdinDone bool     // no more stdin is written (none asked, write failed, exec ended)
	stdinW    *os.File // write end of the stdin pipe, once forked
}

// send writes one frame.
func (s *server) send(typ byte, id uint32, payload []byte) error {
	return s.write(appendFrame(make([]byte, 0, headerLen+len(payload)), typ, id, payload))
}

// write writes one whole frame. A failed write may have sent part of it, so
// it closes the connection, which ends Serve.
func (s *server) write(b []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.conn.Write(b)
	if err != nil {
		s.conn.Close()
	}
	return err
}

func (s *server) sendJSON(typ byte, id uint32, v any) {
	b, _ := json.Marshal(v)
	_ = s.send(typ, id, b)
}

func (s *server) lookup(id uint32) *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.procs[id]
}

// dispatch handles one frame from the host. It never writes to the
// connection itself, so a host that is slow to read cannot stop the agent
// from reading Stdin and Kill frames. It reports whether it kept the
// payload.
func (s *server) dispatch(f frame) (kept bool) {
	switch f.typ {
	case typeStart:
		var m startMsg
		if err := json.Unmarshal(f.payload, &m); err != nil {
			go s.sendJSON(typeStartFailed, f.id, startFailedMsg{Message: "decode start request: " + err.Error(), Process: true})
			return
		}
		s.mu.Lock()
		if _, live := s.procs[f.id]; live {
			s.mu.Unlock()
			go s.sendJSON(typeStartFailed, f.id, startFailedMsg{Message: "duplicate exec id", Process: true})
			return
		}
		pr := &proc{s: s, id: f.id, stdinDone: !m.Stdin}
		pr.cond.L = &pr.mu
		s.procs[f.id] = pr
		s.mu.Unlock()
		go pr.run(m)
	case typeStdin:
		if pr := s.lookup(f.id); pr != nil {
			return pr.enqueue(f.payload)
		}
	case typeStdinEOF:
		if pr := s.lookup(f.id); pr != nil {
			pr.mu.Lock()
			pr.eof = true
			pr.cond.Broadcast()
			pr.mu.Unlock()
		}
	case typeKill:
		if pr := s.lookup(f.id); pr != nil && len(f.payload) == 1 && f.payload[0] != 0 {
			pr.signal(syscall.Signal(f.payload[0]))
		}
	}
	return false
}

// end runs when the connection has ended: nobody can receive the output of
// the live execs any more, so their processes are killed and their drains
// stopped.
func (s *server) end() {
	s.mu.Lock()
	s.gone = true
	procs := make([]*proc, 0, len(s.procs))
	for _, pr := range s.procs {
		procs = append(procs, pr)
	}
	s.mu.Unlock()
	for _, pr := range procs {
		pr.signal(syscall.SIGKILL)
		pr.endStdin()
	}
}

// signal delivers a Kill: to the process if it runs, later if it is not
// forked yet; after the exit it ends the drain.
func (pr *proc) signal(sig syscall.Signal) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	switch {
	case pr.p == nil:
		pr.kill = sig
	case !pr.exited:
		_ = pr.p.Signal(sig)
	default:
		pr.stopDrainLocked()
	}
	if sig == syscall.SIGKILL {
		pr.stopped = true
	}
}

func (pr *proc) stopDrainLocked() {
	pr.stopped = true
	now := time.Now()
	for _, f := range pr.outs {
		_ = f.SetReadDeadline(now)
	}
}

// run runs the exec from fork to Exit.
func (pr *proc) run(m startMsg) {
	s := pr.s
	p, stdinW, outs, fail := pr.start(m)
	if fail != nil {
		s.remove(pr)
		pr.endStdin()
		s.sendJSON(typeStartFailed, pr.id, fail)
		return
	}
	pr.mu.Lock()
	pr.p = p
	pr.outs = outs
	pr.stdinW = stdinW
	if pr.stdinDone && stdinW != nil {
		stdinW.Close() // the connection ended meanwhile
	}
	sig := pr.kill
	pr.mu.Unlock()
	_ = s.send(typeStarted, pr.id, nil)
	if sig != 0 {
		_ = p.Signal(sig)
	}
	if stdinW != nil {
		go pr.writeStdin(stdinW)
	}
	var wg sync.WaitGroup
	for i, f := range outs {
		typ := typeStdout
		if i == 1 {
			typ = typeStderr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr.forward(f, typ)
		}()
	}

	code := 255 // if Wait fails, which only another reaper could cause
	if st, err := p.Wait(); err == nil {
		if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		} else {
			code = st.ExitCode()
		}
	}
	pr.mu.Lock()
	pr.exited = true
	if pr.stopped {
		pr.stopDrainLocked()
	} else {
		pr.setDrainDeadlineLocked()
	}
	pr.mu.Unlock()
	wg.Wait()
	for _, f := range outs {
		f.Close()
	}
	pr.endStdin()
	s.remove(pr)
	s.sendJSON(typeExit, pr.id, exitMsg{Code: code})
}

func (s *server) remove(pr *proc) {
	s.mu.Lock()
	if s.procs[pr.id] == pr {
		delete(s.procs, pr.id)
	}
	s.mu.Unlock()
}

// start resolves the command and forks it. It returns the process, the
// write end of its stdin pipe (nil without stdin), the read ends of its
// stdout and stderr, or why it could not start.
func (pr *proc) start(m startMsg) (*os.Process, *os.File, []*os.File, *startFailedMsg) {
	if len(m.Args) == 0 {
		return nil, nil, nil, &startFailedMsg{Message: "no command given", Process: true}
	}
	cwd := m.Cwd
	if cwd == "" {
		cwd = "/"
	}
	cwd = filepath.Join("/", cwd)
	if err := checkDir(cwd); err != nil {
		return nil, nil, nil, &startFailedMsg{Message: fmt.Sprintf("chdir to cwd %q: %v", cwd, err), Process: true}
	}
	name := m.Args[0]
	path, fail := lookPath(name, cwd, m.Env)
	if fail != nil {
		return nil, nil, nil, fail
	}

	var closeOnFail, child []*os.File
	defer func() {
		for _, f := range child {
			f.Close()
		}
		for _, f := range closeOnFail {
			f.Close()
		}
	}()
	var stdinR, stdinW *os.File
	var err error
	if m.Stdin {
		if stdinR, stdinW, err = os.Pipe(); err != nil {
			return nil, nil, nil, processFailure("stdin pipe", err)
		}
		closeOnFail = append(closeOnFail, stdinW)
	} else if stdinR, err = os.Open(os.DevNull); err != nil {
		return nil, nil, nil, processFailure("open "+os.DevNull, err)
	}
	child = append(child, stdinR)
	outs := make([]*os.File, 2)
	files := []*os.File{stdinR, nil, nil}
	for i := range outs {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, nil, nil, processFailure("output pipe", err)
		}
		outs[i], files[i+1] = r, w
		closeOnFail = append(closeOnFail, r)
		child = append(child, w)
	}

	env := m.Env
	if env == nil {
		env = []string{} // nil would mean the agent's environment
	}
	pr.s.mu.Lock()
	gone := pr.s.gone
	pr.s.mu.Unlock()
	if gone {
		return nil, nil, nil, processFailure("start", net.ErrClosed)
	}
	p, err := os.StartProcess(path, m.Args, &os.ProcAttr{Dir: cwd, Env: env, Files: files})
	if err != nil {
		return nil, nil, nil, execFailure(name, path, cwd, err)
	}
	closeOnFail = nil
	return p, stdinW, outs, nil
}

func processFailure(what string, err error) *startFailedMsg {
	return &startFailedMsg{Message: what + ": " + err.Error(), Process: true}
}

// checkDir reports why a process could not chdir to dir.
func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return errnoOf(err)
	}
	if !fi.IsDir() {
		return syscall.ENOTDIR
	}
	if err := syscall.Faccessat(atFdcwd, dir, xOK, atEaccess); err != nil {
		return errnoOf(err)
	}
	return nil
}

// errnoOf returns the errno inside err, or err.
func errnoOf(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// lookPath finds the file to execute for name as a shell would: a name with
// a slash is a path (relative to cwd), used as it is; another is searched in
// the PATH of env. It returns an absolute path.
func lookPath(name, cwd string, env []string) (string, *startFailedMsg) {
	if strings.Contains(name, "/") {
		return abs(cwd, name), nil
	}
	if name != "" {
		for _, dir := range filepath.SplitList(envPath(env)) {
			if dir == "" {
				dir = "." // as shells do
			}
			if p := abs(cwd, filepath.Join(dir, name)); executable(p) {
				return p, nil
			}
		}
	}
	return "", &startFailedMsg{Code: 127, Message: name + ": executable file not found in $PATH"}
}

// envPath is the last PATH of env (as os/exec and runc take it), or the
// default.
func envPath(env []string) string {
	path := defaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	return path
}

func abs(cwd, p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(cwd, p)
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	if err != nil || fi.IsDir() {
		return false
	}
	return syscall.Faccessat(atFdcwd, p, xOK, atEaccess) == nil
}

// execFailure maps the error of os.StartProcess to what a shell reports.
func execFailure(name, path, cwd string, err error) *startFailedMsg {
	var pe *os.PathError
	if errors.As(err, &pe) && pe.Op == "chdir" {
		return &startFailedMsg{Message: fmt.Sprintf("chdir to cwd %q: %v", cwd, errnoOf(err)), Process: true}
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return processFailure("fork/exec "+name, err)
	}
	notExec := func(e error) *startFailedMsg {
		return &startFailedMsg{Code: 126, Message: name + ": " + e.Error()}
	}
	switch errno {
	case syscall.ENOENT:
		if _, err := os.Stat(path); err == nil {
			return notExec(errno) // its interpreter is missing
		}
		return &startFailedMsg{Code: 127, Message: name + ": " + errno.Error()}
	case syscall.EACCES:
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			return notExec(syscall.EISDIR)
		}
		return notExec(errno)
	case syscall.ENOEXEC, syscall.ELOOP, syscall.ENOTDIR, syscall.EISDIR, syscall.ETXTBSY,
		syscall.EPERM, syscall.ENAMETOOLONG, syscall.E2BIG, syscall.ELIBBAD:
		return notExec(errno)
	}
	return processFailure("fork/exec "+name, errno)
}

// enqueue queues a Stdin payload for the process and reports whether it
// did. The host keeps to the window; a payload beyond it is dropped.
func (pr *proc) enqueue(b []byte) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if pr.stdinDone || pr.eof || pr.queued+len(b) > stdinWindow {
		return false
	}
	pr.queue = append(pr.queue, b)
	pr.queued += len(b)
	pr.cond.Broadcast()
	return true
}

// writeStdin writes the queued stdin to the process, acknowledging each
// payload written, and closes w after StdinEOF. If a write fails (the
// process closed its stdin) it discards the rest without acknowledging.
func (pr *proc) writeStdin(w *os.File) {
	defer w.Close()
	var ack [4]byte
	for {
		pr.mu.Lock()
		for len(pr.queue) == 0 && !pr.eof && !pr.stdinDone {
			pr.cond.Wait()
		}
		if pr.stdinDone || len(pr.queue) == 0 {
			pr.stdinDone = true
			pr.mu.Unlock()
			return
		}
		b := pr.queue[0]
		pr.queue[0] = nil
		pr.queue = pr.queue[1:]
		pr.queued -= len(b)
		pr.mu.Unlock()
		_, err := w.Write(b)
		putChunk(b)
		if err != nil {
			pr.endStdin()
			return
		}
		binary.BigEndian.PutUint32(ack[:], uint32(len(b)))
		_ = pr.s.send(typeStdinAck, pr.id, ack[:])
	}
}

// endStdin stops stdin: the queue is dropped and the pipe closed, which also
// ends a write blocked on a full pipe.
func (pr *proc) endStdin() {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.stdinDone = true
	for _, b := range pr.queue {
		putChunk(b)
	}
	pr.queue, pr.queued = nil, 0
	if pr.stdinW != nil {
		pr.stdinW.Close()
	}
	pr.cond.Broadcast()
}

// bufPool holds the buffers of output frames (a header and a chunk).
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, headerLen+dataChunk)
	return &b
}}

// chunkPool holds payload buffers of frames read, of capacity dataChunk.
var chunkPool sync.Pool

// getChunk returns a buffer of n bytes for a frame's payload: from the pool
// if n fits a chunk.
func getChunk(n int) []byte {
	if n > dataChunk {
		return make([]byte, n)
	}
	if bp, ok := chunkPool.Get().(*[]byte); ok {
		return (*bp)[:n]
	}
	return make([]byte, n, dataChunk)
}

// putChunk returns a buffer from getChunk to the pool.
func putChunk(b []byte) {
	if cap(b) == dataChunk {
		b = b[:0]
		chunkPool.Put(&b)
	}
}

// forward sends what the process writes to f in frames of type typ, each
// chunk as soon as it is read, until EOF, the drain's deadline, or a failed
// send.
func (pr *proc) forward(f *os.File, typ byte) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		n, err := f.Read(buf[headerLen:])
		if n > 0 {
			b := buf[:headerLen+n]
			putHeader(b, typ, pr.id)
			pr.countSend(1)
			werr := pr.s.write(b)
			pr.countSend(-1)
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// countSend counts output frames being sent: the time a slow host takes to
// read them does not count as a pause of the output in the drain.
func (pr *proc) countSend(d int) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.sending += d
	if pr.exited && !pr.stopped {
		pr.setDrainDeadlineLocked()
	}
}

// setDrainDeadlineLocked sets the read deadline of the drain: DrainGrace
// from now, none while output is being sent.
func (pr *proc) setDrainDeadlineLocked() {
	var deadline time.Time
	if pr.sending == 0 {
		deadline = time.Now().Add(pr.s.grace)
	}
	for _, f := range pr.outs {
		_ = f.SetReadDeadline(deadline)
	}
}

// Run dials socketPath (unix) and Serves, redialing after the connection
// ends or a dial fails (backoff 50 ms doubling to 2 s, reset after a
// connection that served), until ctx ends; then it returns ctx's error.
func Run(ctx context.Context, socketPath string, opts ServeOptions) error {
	const minBackoff, maxBackoff = 50 * time.Millisecond, 2 * time.Second
	if len(socketPath) >= len(syscall.RawSockaddrUnix{}.Path) {
		return fmt.Errorf("socket path %q is too long for a unix socket", socketPath)
	}
	var d net.Dialer
	backoff := minBackoff
	for {
		c, err := d.DialContext(ctx, "unix", socketPath)
		if err == nil {
			_ = Serve(ctx, c, opts)
			backoff = minBackoff
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		if err != nil {
			backoff = min(2*backoff, maxBackoff)
		}
	}
}
