package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// The process.Process service: commands are envd execs (GET
// /v1/instances/{i}/exec/ws) that this server holds, so that they outlive
// the call that started them (background commands) and can be listed,
// reconnected to, fed stdin and killed by pid. A pid is this server's
// number for the command, not the process's pid inside the instance. Both
// signals (SIGTERM, SIGKILL) end the exec session, which kills the command.

type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

type processSelector struct {
	Pid *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

type startRequest struct {
	Process *processConfig  `json:"process"`
	Pty     json.RawMessage `json:"pty"`
	Tag     *string         `json:"tag"`
	Stdin   *bool           `json:"stdin"`
}

type selectorRequest struct {
	Process *processSelector `json:"process"`
}

type sendInputRequest struct {
	Process *processSelector `json:"process"`
	Input   *struct {
		Stdin *string `json:"stdin"`
		Pty   *string `json:"pty"`
	} `json:"input"`
}

type sendSignalRequest struct {
	Process *processSelector `json:"process"`
	Signal  json.RawMessage  `json:"signal"`
}

type processInfo struct {
	Config processConfig `json:"config"`
	Pid    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

// processEvent is the event of StartResponse and ConnectResponse: one of
// its fields is set.
type processEvent struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

type startEvent struct {
	Pid uint32 `json:"pid"`
}

type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"` // base64 in JSON, as proto3's bytes
	Stderr []byte `json:"stderr,omitempty"`
}

type endEvent struct {
	ExitCode int32   `json:"exitCode"`
	Exited   bool    `json:"exited"`
	Status   string  `json:"status"`
	Error    *string `json:"error,omitempty"`
}

type eventMessage struct {
	Event processEvent `json:"event"`
}

// proc is one command this server runs.
type proc struct {
	pid     uint32
	sandbox string
	tag     *string
	cfg     processConfig
	kill    context.CancelFunc
	stdin   *io.PipeWriter // nil: the command has no stdin

	mu     sync.Mutex
	subs   map[chan processEvent]struct{}
	killed bool
	done   chan struct{}
}

// subscribe returns a channel of the command's events from now on; it is
// closed after the end event. ok is false when the command has ended.
func (p *proc) subscribe() (ch chan processEvent, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return nil, false
	default:
	}
	ch = make(chan processEvent, 64)
	p.subs[ch] = struct{}{}
	return ch, true
}

func (p *proc) unsubscribe(ch chan processEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.subs[ch]; ok {
		delete(p.subs, ch)
		// Drain so that a publish blocked on it goes on.
		go func() {
			for range ch {
			}
		}()
		close(ch)
	}
}

// publish gives ev to every subscriber. It blocks while one is full (the
// command's output then waits, as a pipe would); an unsubscribe frees it.
func (p *proc) publish(ev processEvent) {
	p.mu.Lock()
	subs := make([]chan processEvent, 0, len(p.subs))
	for ch := range p.subs {
		subs = append(subs, ch)
	}
	p.mu.Unlock()
	for _, ch := range subs {
		func() {
			defer func() { _ = recover() }() // closed by an unsubscribe meanwhile
			ch <- ev
		}()
	}
}

// finish publishes the end and closes every subscription.
func (p *proc) finish(end endEvent) {
	p.publish(processEvent{End: &end})
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.done)
	for ch := range p.subs {
		delete(p.subs, ch)
		close(ch)
	}
}

// publishWriter publishes what the command writes as data events.
type publishWriter struct {
	p      *proc
	stderr bool
}

func (w publishWriter) Write(b []byte) (int, error) {
	data := append([]byte(nil), b...)
	ev := dataEvent{Stdout: data}
	if w.stderr {
		ev = dataEvent{Stderr: data}
	}
	w.p.publish(processEvent{Data: &ev})
	return len(b), nil
}

// processTable holds the running commands by sandbox and pid.
type processTable struct {
	mu      sync.Mutex
	nextPid atomic.Uint32
	procs   map[string]map[uint32]*proc
}

func newProcessTable() *processTable { return &processTable{procs: map[string]map[uint32]*proc{}} }

func (t *processTable) add(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p.pid = t.nextPid.Add(1)
	if t.procs[p.sandbox] == nil {
		t.procs[p.sandbox] = map[uint32]*proc{}
	}
	t.procs[p.sandbox][p.pid] = p
}

func (t *processTable) remove(p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.procs[p.sandbox], p.pid)
	if len(t.procs[p.sandbox]) == 0 {
		delete(t.procs, p.sandbox)
	}
}

// find is sandbox's running command sel names.
func (t *processTable) find(sandbox string, sel *processSelector) (*proc, error) {
	if sel == nil || (sel.Pid == nil && sel.Tag == nil) {
		return nil, fmt.Errorf("process: a pid or tag is required: %w", errdefs.ErrInvalidArgument)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.procs[sandbox] {
		if (sel.Pid != nil && p.pid == *sel.Pid) || (sel.Pid == nil && p.tag != nil && *p.tag == *sel.Tag) {
			return p, nil
		}
	}
	what := ""
	if sel.Pid != nil {
		what = "pid " + strconv.FormatUint(uint64(*sel.Pid), 10)
	} else {
		what = "tag " + strconv.Quote(*sel.Tag)
	}
	return nil, fmt.Errorf("process with %s not found (it has ended, or runs on another node): %w", what, errdefs.ErrNotFound)
}

func (t *processTable) list(sandbox string) []*proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*proc
	for _, p := range t.procs[sandbox] {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// endSandbox kills sandbox's commands (it was killed or paused).
func (t *processTable) endSandbox(sandbox string) {
	for _, p := range t.list(sandbox) {
		p.kill()
	}
}

func (t *processTable) closeAll() {
	t.mu.Lock()
	var all []*proc
	for _, ps := range t.procs {
		for _, p := range ps {
			all = append(all, p)
		}
	}
	t.mu.Unlock()
	for _, p := range all {
		p.kill()
	}
}

// start runs cfg in sb as a new command: it runs until it ends, is killed,
// or ctx (its timeout, Connect-Timeout-Ms) ends, whoever follows it.
func (s *Server) start(ctx context.Context, sb sandboxCall, cfg processConfig, tag *string, withStdin bool) (*proc, chan processEvent) {
	// The command is not the call's: it outlives a disconnect (a background
	// command), so only the call's deadline bounds it.
	pctx, kill := context.WithCancel(context.WithoutCancel(ctx))
	if dl, ok := ctx.Deadline(); ok {
		var cancelDL context.CancelFunc
		pctx, cancelDL = context.WithDeadline(pctx, dl)
		k := kill
		kill = func() { cancelDL(); k() }
	}
	p := &proc{sandbox: sb.id, tag: tag, cfg: cfg, kill: kill, subs: map[chan processEvent]struct{}{}, done: make(chan struct{})}
	var stdin io.Reader
	if withStdin {
		r, w := io.Pipe()
		stdin, p.stdin = r, w
	}
	s.procs.add(p)
	sub, _ := p.subscribe()
	req := types.ExecRequest{Args: append([]string{cfg.Cmd}, cfg.Args...)}
	if cfg.Cwd != nil {
		req.Cwd = *cfg.Cwd
	}
	for _, env := range []map[string]string{sb.env, cfg.Envs} {
		keys := make([]string, 0, len(env))
		for k := range env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			req.Env = append(req.Env, k+"="+env[k])
		}
	}
	go func() {
		defer kill()
		code, err := sb.c.ExecStream(pctx, sb.id, req, types.Stdio{Stdin: stdin,
			Stdout: publishWriter{p: p}, Stderr: publishWriter{p: p, stderr: true}})
		if p.stdin != nil {
			_ = p.stdin.CloseWithError(io.ErrClosedPipe)
		}
		s.procs.remove(p)
		p.finish(endOf(pctx, code, err))
	}()
	return p, sub
}

// endOf is the end event of an exec that returned code and err.
func endOf(ctx context.Context, code int, err error) endEvent {
	switch {
	case err == nil:
		return endEvent{ExitCode: int32(code), Exited: true, Status: "exit status " + strconv.Itoa(code)}
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		msg := "signal: killed (the command's timeout passed)"
		return endEvent{ExitCode: -1, Status: "signal: killed", Error: &msg}
	case ctx.Err() != nil:
		msg := "signal: killed"
		return endEvent{ExitCode: -1, Status: "signal: killed", Error: &msg}
	default:
		msg := err.Error()
		return endEvent{ExitCode: -1, Status: "error", Error: &msg}
	}
}

// forward sends sub's events until the command ends or ctx does, with
// keep-alive events between.
func forward(ctx context.Context, p *proc, sub chan processEvent, keepAlive time.Duration, send func(any) error) error {
	defer p.unsubscribe(sub)
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-sub:
			if !ok {
				return nil
			}
			if err := send(eventMessage{ev}); err != nil {
				return err
			}
			if ev.End != nil {
				return nil
			}
		case <-tick.C:
			if err := send(eventMessage{processEvent{Keepalive: &struct{}{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *Server) processRoutes() {
	const svc = "/process.Process/"
	s.mux.Handle("POST "+svc+"Start", serverStream(s, func(ctx context.Context, sb sandboxCall, req *startRequest, keepAlive time.Duration, send func(any) error) error {
		if req.Process == nil || req.Process.Cmd == "" {
			return fmt.Errorf("process.cmd: required: %w", errdefs.ErrInvalidArgument)
		}
		if s := strings.TrimSpace(string(req.Pty)); s != "" && s != "null" {
			return unimplemented("pty: terminals are not mapped; use envd's exec WebSocket (envctl exec -t)")
		}
		if req.Tag != nil {
			if _, err := s.procs.find(sb.id, &processSelector{Tag: req.Tag}); err == nil {
				return fmt.Errorf("a process with tag %q runs already: %w", *req.Tag, errdefs.ErrAlreadyExists)
			}
		}
		p, sub := s.start(ctx, sb, *req.Process, req.Tag, req.Stdin != nil && *req.Stdin)
		if err := send(eventMessage{processEvent{Start: &startEvent{p.pid}}}); err != nil {
			p.unsubscribe(sub)
			return err
		}
		return forward(ctx, p, sub, keepAlive, send)
	}))
	s.mux.Handle("POST "+svc+"Connect", serverStream(s, func(ctx context.Context, sb sandboxCall, req *selectorRequest, keepAlive time.Duration, send func(any) error) error {
		p, err := s.procs.find(sb.id, req.Process)
		if err != nil {
			return err
		}
		sub, ok := p.subscribe()
		if !ok {
			return fmt.Errorf("process %d has ended: %w", p.pid, errdefs.ErrNotFound)
		}
		if err := send(eventMessage{processEvent{Start: &startEvent{p.pid}}}); err != nil {
			p.unsubscribe(sub)
			return err
		}
		return forward(ctx, p, sub, keepAlive, send)
	}))
	s.mux.Handle("POST "+svc+"List", unary(s, func(ctx context.Context, sb sandboxCall, _ *struct{}) (any, error) {
		out := []processInfo{}
		for _, p := range s.procs.list(sb.id) {
			out = append(out, processInfo{Config: p.cfg, Pid: p.pid, Tag: p.tag})
		}
		return map[string]any{"processes": out}, nil
	}))
	s.mux.Handle("POST "+svc+"SendInput", unary(s, func(ctx context.Context, sb sandboxCall, req *sendInputRequest) (any, error) {
		p, err := s.procs.find(sb.id, req.Process)
		if err != nil {
			return nil, err
		}
		if req.Input == nil || req.Input.Stdin == nil {
			if req.Input != nil && req.Input.Pty != nil {
				return nil, unimplemented("pty input: terminals are not mapped")
			}
			return nil, fmt.Errorf("input.stdin: required: %w", errdefs.ErrInvalidArgument)
		}
		data, err := decodeBytes(*req.Input.Stdin)
		if err != nil {
			return nil, err
		}
		if p.stdin == nil {
			return nil, fmt.Errorf("process %d was started without stdin (start it with stdin: true): %w", p.pid, errdefs.ErrFailedPrecondition)
		}
		if _, err := p.stdin.Write(data); err != nil {
			return nil, fmt.Errorf("process %d: stdin is closed: %w", p.pid, errdefs.ErrFailedPrecondition)
		}
		return struct{}{}, nil
	}))
	s.mux.Handle("POST "+svc+"CloseStdin", unary(s, func(ctx context.Context, sb sandboxCall, req *selectorRequest) (any, error) {
		p, err := s.procs.find(sb.id, req.Process)
		if err != nil {
			return nil, err
		}
		if p.stdin == nil {
			return nil, fmt.Errorf("process %d was started without stdin: %w", p.pid, errdefs.ErrFailedPrecondition)
		}
		_ = p.stdin.Close()
		return struct{}{}, nil
	}))
	s.mux.Handle("POST "+svc+"SendSignal", unary(s, func(ctx context.Context, sb sandboxCall, req *sendSignalRequest) (any, error) {
		p, err := s.procs.find(sb.id, req.Process)
		if err != nil {
			return nil, err
		}
		switch sig := strings.Trim(string(req.Signal), `"`); sig {
		case "SIGNAL_SIGKILL", "SIGNAL_SIGTERM", "9", "15":
		default:
			return nil, fmt.Errorf("signal %s: SIGNAL_SIGKILL or SIGNAL_SIGTERM: %w", req.Signal, errdefs.ErrInvalidArgument)
		}
		p.kill()
		return struct{}{}, nil
	}))
	for _, m := range []string{"Update", "StreamInput"} {
		s.mux.Handle("POST "+svc+m, unary(s, func(ctx context.Context, sb sandboxCall, _ *struct{}) (any, error) {
			return nil, unimplemented("process.Process/%s is not mapped", m)
		}))
	}
}

// decodeBytes decodes proto3 JSON bytes (standard or URL-safe base64,
// padded or not).
func decodeBytes(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("bytes: not base64: %w", errdefs.ErrInvalidArgument)
}
