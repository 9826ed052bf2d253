package runtime

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/oci"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/proc"
	"github.com/envd-dev/envd/runtime/agent"
)

// Exec agents: commands without a runc exec each.
//
// Terms:
//   - An instance's agent is a process in its container (runtime/agent,
//     the static program envd-agent) that starts commands with a plain
//     fork and exec. The instance's init starts it (initScriptAgent), so
//     it holds what runc gave the init (its namespaces, cgroup, seccomp
//     filter, capabilities, rlimits, user, no_new_privs), and so does
//     every command it starts. When that agent is gone (killed by the
//     tenant) or never came, one is started by a runc exec of the init's
//     process (StartAgent), which gives it the same. A runc exec costs
//     about 85 ms of CPU on a 2-core node (two Go programs start, the
//     seccomp filter is compiled); a command through the agent a few.
//   - The agent's binary is copied once to StateDir/agent/envd-agent; every
//     instance created since mounts it read-only at /dev/.envd-agent, and
//     its own StateDir/instances/ID/agent read-only at /dev/.envd (both in
//     the tmpfs runc mounts on /dev, so nothing lands in the writable
//     layer a save captures). The runtime listens on /dev/.envd/agent.sock
//     and the agent dials it, redialing after the connection ends (a node
//     restart): the runtime never dials a path inside the container, where
//     the tenant could point it anywhere.
//   - Trust: the container is the tenant's, so is the agent: they may kill
//     it or connect a program of their own. What comes over the socket is
//     untrusted input (bounded by runtime/agent) and only ever answers
//     the tenant's own commands in their own instance, with no more rights
//     than a runc exec would give them. Nothing envd decides for other
//     tenants or for itself rests on it.
//   - Exec uses the agent when one is connected and the session has no
//     terminal, waiting for one the init or a background start is starting;
//     otherwise (killed, an instance created before agents, a TTY) it uses
//     runc exec, as before, and after such an exec starts an agent in the
//     background for the next command. A pool makes sure the agent is
//     connected before an instance is handed out (StartAgent).
//   - Instances created before the init started agents get theirs from
//     a runc exec, as then (initStartsAgent tells them apart).

// AgentPath is where the exec agent's binary is inside an instance: its
// helper commands (runtime/agent/relay.go) are run from there.
const AgentPath = agentBinDest

const (
	agentBinDest  = "/dev/.envd-agent"
	agentDirDest  = "/dev/.envd"
	agentSockName = "agent.sock"
	agentExecID   = "envd-agent-" // prefix of the agents' exec ids in the shim
	// agentRestartGap is the least time between two background starts of
	// an instance's agent (a tenant that kills it makes envd fall back to
	// runc exec, not start agents in a loop).
	agentRestartGap = 30 * time.Second
	// agentConnectWait bounds StartAgent's wait for the agent to connect;
	// an agent of an earlier runtime redials within 2 s.
	agentConnectWait = 5 * time.Second
	// agentMaxConns bounds the connections kept per instance (an agent
	// started while an earlier one redialed; a tenant's own programs).
	agentMaxConns = 4
)

// agents is the runtime's side of its instances' agents.
type agents struct {
	bin string // the copy instances mount; "" when agents are off
	off error  // why they are off

	mu    sync.Mutex
	slots map[string]*agentSlot
	// starting holds the background starts in flight (KickAgent), closed
	// when one ends: an exec meanwhile waits for it rather than run a
	// second runc exec beside it on the same CPUs.
	starting map[string]chan struct{}
	// without are instances created without the agent's mounts: never
	// tried again.
	without map[string]bool
	// lastErr is the last background start's failure (AgentErr).
	lastErr error
}

// agentSlot is one instance's listener and the connections on it.
type agentSlot struct {
	ln   *net.UnixListener
	path string   // the socket's file, removed on close
	env  []string // the init's environment, what Exec merges into
	cwd  string   // the init's working directory

	mu        sync.Mutex
	conns     []*agent.Conn
	arrived   chan struct{} // closed (and replaced) when a connection is ready
	lastStart time.Time
	closed    bool
	gone      chan struct{} // closed with closed
}

// setupAgents finds the agent binary (Config.AgentBinary, else
// $ENVD_AGENT_BINARY, else envd-agent in $ENVD_BIN_DIR, beside the running
// program, in /usr/local/lib/envd/bin)
// and copies it under StateDir. Without one, agents are off and every
// exec is a runc exec; the reason is kept for AgentsOff.
func (r *Runtime) setupAgents() {
	r.agents = &agents{slots: map[string]*agentSlot{}, starting: map[string]chan struct{}{}, without: map[string]bool{}}
	if r.cfg.NoAgents {
		r.agents.off = errors.New("turned off in the runtime's configuration")
		return
	}
	src, err := findAgentBinary(r.cfg.AgentBinary)
	if err == nil {
		err = checkStatic(src)
	}
	if err == nil {
		r.agents.bin, err = installAgent(src, filepath.Join(r.cfg.StateDir, "agent"))
	}
	if err != nil {
		r.agents.bin, r.agents.off = "", err
	}
}

// AgentsOff says why instances get no exec agent, nil when they do.
func (r *Runtime) AgentsOff() error { return r.agents.off }

// AgentErr is the last failure of an agent start made in the background
// (after a runc exec), nil if none: such a start has no caller to tell.
func (r *Runtime) AgentErr() error {
	r.agents.mu.Lock()
	defer r.agents.mu.Unlock()
	return r.agents.lastErr
}

func findAgentBinary(configured string) (string, error) {
	if configured == "" {
		configured = os.Getenv("ENVD_AGENT_BINARY")
	}
	if configured != "" {
		if _, err := os.Stat(configured); err != nil {
			return "", fmt.Errorf("exec agent binary: %w", err)
		}
		return configured, nil
	}
	var dirs []string
	if d := os.Getenv("ENVD_BIN_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	dirs = append(dirs, "/usr/local/lib/envd/bin")
	for _, d := range dirs {
		p := filepath.Join(d, "envd-agent")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec agent binary envd-agent not found ($ENVD_AGENT_BINARY, $ENVD_BIN_DIR, beside the program, /usr/local/lib/envd/bin; build it with CGO_ENABLED=0 go build ./cmd/envd-agent)")
}

// checkStatic refuses a dynamically linked agent: it runs inside images
// that may have no C library, or another one.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("exec agent binary %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("exec agent binary %s is dynamically linked (build it with CGO_ENABLED=0)", path)
		}
	}
	return nil
}

// installAgent copies src to dir/envd-agent unless the same bytes are
// there. A new copy is renamed into place: instances running keep the
// file they mounted.
func installAgent(src, dir string) (string, error) {
	dst := filepath.Join(dir, "envd-agent")
	want, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("exec agent binary: %w", err)
	}
	if have, err := os.ReadFile(dst); err == nil && bytes.Equal(have, want) {
		return dst, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("exec agent dir: %w", err)
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, want, 0o755); err != nil {
		return "", fmt.Errorf("exec agent copy: %w", err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return "", fmt.Errorf("exec agent copy: %w", err)
	}
	return dst, nil
}

// agentMounts are the mounts an instance created now gets (none with
// agents off); it makes the instance's socket dir.
func (r *Runtime) agentMounts(id string) ([]specs.Mount, error) {
	if r.agents.bin == "" {
		return nil, nil
	}
	dir := filepath.Join(r.instanceDir(id), "agent")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("instance agent dir: %w", err)
	}
	return []specs.Mount{bindMount(r.agents.bin, agentBinDest, true), bindMount(dir, agentDirDest, true)}, nil
}

// StartAgent makes sure instance id's agent is connected: it listens on
// the instance's socket, lets an agent already running (started by an
// earlier runtime) reconnect, else starts one with a runc exec, and waits
// for it to connect. ErrFailedPrecondition: agents are off, the instance
// was created without them, or its task is not running.
//
// A start in flight (KickAgent) is waited for first, so an instance never
// gets two agents from two callers.
func (r *Runtime) StartAgent(ctx context.Context, id string) error {
	r.agents.mu.Lock()
	inflight := r.agents.starting[id]
	r.agents.mu.Unlock()
	if inflight != nil {
		select {
		case <-inflight:
		case <-ctx.Done():
			return fmt.Errorf("exec agent of instance %q: %w", id, ctx.Err())
		}
	}
	return r.startAgent(ctx, id)
}

// startAgent is StartAgent without the wait for a start in flight (the
// background start itself runs it).
func (r *Runtime) startAgent(ctx context.Context, id string) error {
	if r.agents.bin == "" {
		return fmt.Errorf("exec agent of %q: agents are off: %v: %w", id, r.agents.off, errdefs.ErrFailedPrecondition)
	}
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return translate(err, "instance %q", id)
	}
	t, err := c.Task(ctx, nil)
	if err != nil {
		return translate(err, "task of instance %q", id)
	}
	cspec, err := recordedSpec(ctx, c)
	if err != nil {
		return err
	}
	if !hasAgentMounts(cspec) {
		r.agents.mu.Lock()
		r.agents.without[id] = true
		r.agents.mu.Unlock()
		return fmt.Errorf("instance %q was created without an exec agent: %w", id, errdefs.ErrFailedPrecondition)
	}
	s, err := r.listenAgent(id, cspec)
	if err != nil {
		return err
	}
	if s.live() != nil {
		return nil
	}
	s.mu.Lock()
	s.lastStart = time.Now()
	s.mu.Unlock()
	if running, err := agentRunning(ctx, t); err == nil && running {
		// An earlier runtime's agent redials within 2 s.
		if s.wait(ctx, 3*time.Second) {
			return nil
		}
	}
	pspec := *cspec.Process
	pspec.Args = []string{agentBinDest, agentDirDest + "/" + agentSockName}
	pspec.Terminal = false
	pspec.ConsoleSize = nil
	p, err := t.Exec(ctx, agentExecID+randomHex(6), &pspec, cio.NullIO)
	if err != nil {
		return execStartErr(err, "exec agent of instance %q", id)
	}
	if err := p.Start(ctx); err != nil {
		_, _ = p.Delete(context.WithoutCancel(ctx))
		return execStartErr(err, "start the exec agent of instance %q", id)
	}
	if !s.wait(ctx, agentConnectWait) {
		if ctx.Err() != nil {
			return fmt.Errorf("exec agent of instance %q: %w", id, ctx.Err())
		}
		return fmt.Errorf("exec agent of instance %q did not connect within %v: %w", id, agentConnectWait, errdefs.ErrUnavailable)
	}
	return nil
}

// agentRunning tells whether task t has a process started as an agent: a
// runc exec of it, or the one its init started (told by its command line,
// which the tenant could imitate: then a start waits for a redial that
// does not come, and goes on with a runc exec).
func agentRunning(ctx context.Context, t client.Task) (bool, error) {
	ps, err := t.Pids(ctx)
	if err != nil {
		return false, err
	}
	for _, p := range ps {
		if p.Info == nil {
			if argv := proc.Args(int(p.Pid)); len(argv) > 0 && argv[0] == agentBinDest {
				return true, nil
			}
			continue
		}
		v, err := typeurl.UnmarshalAny(p.Info)
		if err != nil {
			continue
		}
		if d, ok := v.(*options.ProcessDetails); ok && strings.HasPrefix(d.ExecID, agentExecID) {
			return true, nil
		}
	}
	return false, nil
}

// KickAgent starts instance id's exec agent in the background, unless it
// is connected, starting, or was started less than agentRestartGap ago: a
// node starts it with the instance's task, so that the instance's first
// command finds it (a command that comes while it starts waits for it, up
// to agentConnectWait, then takes a runc exec), and after a runc exec, for
// the next command. A failure is kept for AgentErr.
func (r *Runtime) KickAgent(id string) {
	if r.agents.bin == "" {
		return
	}
	a := r.agents
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.slots[id]; s != nil {
		s.mu.Lock()
		recent := time.Since(s.lastStart) < agentRestartGap
		s.mu.Unlock()
		if recent || s.live() != nil {
			return
		}
	}
	if a.starting[id] != nil || a.without[id] {
		return
	}
	a.beginStart(id, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return r.startAgent(ctx, id)
	})
}

// beginStart records a start of instance id's agent in flight and runs
// start in the background; its failure is kept for AgentErr. a.mu must be
// held, with no start of id in flight.
func (a *agents) beginStart(id string, start func() error) {
	done := make(chan struct{})
	a.starting[id] = done
	go func() {
		if err := start(); err != nil {
			a.mu.Lock()
			a.lastErr = fmt.Errorf("instance %q: %w", id, err)
			a.mu.Unlock()
		}
		a.mu.Lock()
		delete(a.starting, id)
		a.mu.Unlock()
		close(done)
	}()
}

// ListenAgents listens for the agents of this namespace's instances whose
// task runs (or is paused), as a runtime that starts beside running
// instances must: their agents redial within 2 s, and commands from then
// on need no runc exec. Without it, the first command to each instance
// after a node restart was a runc exec (StartAgent then took the agent
// back). Instances created without agents are skipped.
func (r *Runtime) ListenAgents(ctx context.Context) error {
	if r.agents.bin == "" {
		return nil
	}
	ctx = r.ctx(ctx)
	cs, err := r.client.Containers(ctx)
	if err != nil {
		return translate(err, "list containers")
	}
	for _, c := range cs {
		st, _, err := r.taskStatus(ctx, c.ID())
		if err != nil || (st.Status != client.Running && st.Status != client.Paused) {
			continue
		}
		cspec, err := recordedSpec(ctx, c)
		if err != nil || !hasAgentMounts(cspec) {
			continue
		}
		s, err := r.listenAgent(c.ID(), cspec)
		if err != nil {
			return err
		}
		// An agent running to be taken back counts as started: a tenant
		// that kills it gets runc execs for agentRestartGap, as after any
		// start. Without one, the first command starts one (KickAgent).
		if t, err := c.Task(ctx, nil); err == nil {
			if running, _ := agentRunning(ctx, t); running {
				s.mu.Lock()
				s.lastStart = time.Now()
				s.mu.Unlock()
			}
		}
	}
	return nil
}

// initStartsAgent tells whether a container's init starts its agent
// (initScriptAgent), from its recorded process.
func initStartsAgent(p *specs.Process) bool {
	return p != nil && slices.ContainsFunc(p.Args, func(a string) bool { return strings.Contains(a, agentBinDest+" ") })
}

// initAgentSlot listens for the agent of container c's init, before its
// task starts; nil when the init starts none.
func (r *Runtime) initAgentSlot(ctx context.Context, c client.Container) (*agentSlot, error) {
	if r.agents.bin == "" {
		return nil, nil
	}
	cspec, err := recordedSpec(ctx, c)
	if err != nil {
		return nil, err
	}
	if !initStartsAgent(cspec.Process) {
		return nil, nil
	}
	return r.listenAgent(c.ID(), cspec)
}

// hasAgentMounts tells whether a container was created with the agent's
// mounts (agentMounts).
func hasAgentMounts(cspec *oci.Spec) bool {
	return slices.ContainsFunc(cspec.Mounts, func(m specs.Mount) bool { return m.Destination == agentDirDest })
}

// listenAgent is agents.listen on instance id's socket dir, with the
// init's process of its recorded spec.
func (r *Runtime) listenAgent(id string, cspec *oci.Spec) (*agentSlot, error) {
	return r.agents.listen(id, filepath.Join(r.instanceDir(id), "agent"), cspec.Process)
}

// expectInit counts the agent that instance id's init is starting as a
// start in flight, until it connects or agentConnectWait passes: a command
// meanwhile waits for it (agentConn), and no runc exec starts a second one
// beside it (KickAgent, StartAgent).
func (a *agents) expectInit(id string, s *agentSlot) {
	s.mu.Lock()
	s.lastStart = time.Now()
	s.mu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.starting[id] != nil {
		return
	}
	a.beginStart(id, func() error {
		if !s.wait(context.Background(), agentConnectWait) && !s.isClosed() {
			return fmt.Errorf("the agent its init started did not connect within %v", agentConnectWait)
		}
		return nil
	})
}

// agentConn returns instance id's live agent connection, waiting for a
// background start in flight (bounded by agentConnectWait), nil if none.
func (a *agents) agentConn(ctx context.Context, id string) *agent.Conn {
	a.mu.Lock()
	s, starting := a.slots[id], a.starting[id]
	a.mu.Unlock()
	if s != nil {
		if c := s.live(); c != nil {
			return c
		}
	}
	if starting == nil {
		return nil
	}
	timer := time.NewTimer(agentConnectWait)
	defer timer.Stop()
	select {
	case <-starting:
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return nil
	}
	a.mu.Lock()
	s = a.slots[id]
	a.mu.Unlock()
	if s == nil {
		return nil
	}
	return s.live()
}

// listen returns instance id's slot, listening on dir's socket (a stale
// socket of an earlier runtime is replaced).
func (a *agents) listen(id, dir string, init *specs.Process) (*agentSlot, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.slots[id]; s != nil {
		return s, nil
	}
	path := filepath.Join(dir, agentSockName)
	_ = os.Remove(path)
	ln, err := listenUnixLong(path)
	if err != nil {
		return nil, fmt.Errorf("exec agent socket of %q: %w", id, err)
	}
	// The agent runs as the instance's user, an unprivileged host id with
	// user namespaces: the socket is only in this instance's mount.
	if err := os.Chmod(path, 0o666); err != nil {
		ln.Close()
		return nil, fmt.Errorf("exec agent socket of %q: %w", id, err)
	}
	cwd := init.Cwd
	if cwd == "" {
		cwd = "/"
	}
	s := &agentSlot{ln: ln, path: path, env: init.Env, cwd: cwd, arrived: make(chan struct{}), gone: make(chan struct{})}
	a.slots[id] = s
	go s.accept()
	return s, nil
}

// listenUnixLong listens on a unix socket at path, which may be longer
// than a socket address holds (108 bytes; a node's data dir can make it
// so): it binds through /proc/self/fd of the directory, opened for the
// bind. The caller removes the file when done.
func listenUnixLong(path string) (*net.UnixListener, error) {
	if len(path) < 100 {
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err == nil {
			ln.SetUnlinkOnClose(false)
		}
		return ln, err
	}
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	short := fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: short, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen unix %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false) // its name is the fd's, gone after the bind
	return ln, nil
}

// accept takes connections until the listener closes. The hello is read
// off this loop (a peer that says nothing must not hold others back), at
// most agentMaxConns at a time.
func (s *agentSlot) accept() {
	sem := make(chan struct{}, agentMaxConns)
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			c.Close()
			time.Sleep(100 * time.Millisecond) // a peer dialing in a loop
			continue
		}
		go func() {
			conn, err := agent.NewConn(c)
			if err != nil {
				c.Close()
				<-sem
				return
			}
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				conn.Close()
				<-sem
				return
			}
			s.conns = append(s.conns, conn)
			close(s.arrived)
			s.arrived = make(chan struct{})
			s.mu.Unlock()
			<-conn.Done()
			s.mu.Lock()
			s.conns = slices.DeleteFunc(s.conns, func(x *agent.Conn) bool { return x == conn })
			s.mu.Unlock()
			<-sem
		}()
	}
}

func (s *agentSlot) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// live returns the newest connection that has not ended, nil if none.
func (s *agentSlot) live() *agent.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.conns) - 1; i >= 0; i-- {
		select {
		case <-s.conns[i].Done():
		default:
			return s.conns[i]
		}
	}
	return nil
}

// wait waits up to d for a live connection.
func (s *agentSlot) wait(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		if s.live() != nil {
			return true
		}
		s.mu.Lock()
		arrived := s.arrived
		s.mu.Unlock()
		select {
		case <-arrived:
		case <-timer.C:
			return s.live() != nil
		case <-s.gone:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func (s *agentSlot) close() {
	s.mu.Lock()
	if !s.closed {
		close(s.gone)
	}
	s.closed = true
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	s.ln.Close()
	_ = os.Remove(s.path)
	for _, c := range conns {
		c.Close()
	}
}

// dropAgent forgets instance id's agent (its task stopped or is removed).
func (r *Runtime) dropAgent(id string) {
	r.agents.mu.Lock()
	s := r.agents.slots[id]
	delete(r.agents.slots, id)
	delete(r.agents.without, id)
	r.agents.mu.Unlock()
	if s != nil {
		s.close()
	}
}

// closeAgents closes every listener; agents redial the next runtime.
func (r *Runtime) closeAgents() {
	r.agents.mu.Lock()
	slots := r.agents.slots
	r.agents.slots = map[string]*agentSlot{}
	r.agents.mu.Unlock()
	for _, s := range slots {
		s.close()
	}
}

// execAgent runs spec through instance id's agent. done is false when it
// did not run there and Exec should use runc exec: no agent, or the
// request never reached it (the agent is gone).
func (r *Runtime) execAgent(ctx context.Context, id string, spec ExecSpec) (code int, err error, done bool) {
	conn := r.agents.agentConn(ctx, id)
	if conn == nil {
		return 0, nil, false
	}
	r.agents.mu.Lock()
	s := r.agents.slots[id]
	r.agents.mu.Unlock()
	if s == nil {
		return 0, nil, false
	}
	// A frozen task's agent would hold the command until the thaw; runc
	// exec refuses it at once with ErrTaskPaused, which callers wait on.
	st, _, err := r.taskStatus(r.ctx(ctx), id)
	if err != nil || st.Status != client.Running {
		return 0, nil, false
	}
	cwd := spec.Cwd
	if cwd == "" {
		cwd = s.cwd
	}
	if err := types.CheckCwd(cwd); err != nil {
		return -1, fmt.Errorf("exec in %q: %w", id, err), true
	}
	stdout, stderr := spec.Stdout, spec.Stderr
	if stderr == nil {
		stderr = io.Discard
	}
	code, err = conn.Exec(ctx, agent.Request{
		Args: spec.Args, Env: mergeEnv(s.env, spec.Env), Cwd: cwd,
		Stdin: spec.Stdin, Stdout: stdout, Stderr: stderr,
	})
	var cmdErr *agent.CommandError
	var startErr *agent.StartError
	switch {
	case err == nil:
		return code, nil, true
	case errors.As(err, &cmdErr):
		// What a shell does with a command it cannot run (as the runc path).
		_, _ = io.WriteString(stderr, cmdErr.Message+"\n")
		return cmdErr.Code, nil, true
	case errors.As(err, &startErr):
		return -1, fmt.Errorf("start %q in instance %q: %s: %w", spec.Args[0], id, startErr.Reason, errdefs.ErrStartFailed), true
	case errors.Is(err, agent.ErrNotSent):
		return 0, nil, false
	case ctx.Err() != nil:
		return -1, fmt.Errorf("exec in instance %q: %w", id, ctx.Err()), true
	default:
		// The connection ended while the command ran: the command may
		// have run, so it is not tried again. If the instance's init died
		// (the OOM killer, a stop), the kernel killed every process of its
		// PID namespace with SIGKILL, the command too: 137, as the runc
		// exec path reports it. Else the tenant killed the agent.
		if r.taskEnded(ctx, id, 2*time.Second) {
			return 128 + 9, nil, true
		}
		return -1, &AgentLostError{Instance: id, Err: err}, true
	}
}

// taskEnded waits up to d for instance id's task to leave running.
func (r *Runtime) taskEnded(ctx context.Context, id string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		st, _, err := r.taskStatus(r.ctx(ctx), id)
		if err != nil {
			return cerrdefs.IsNotFound(err) // deleted; else containerd cannot tell
		}
		if st.Status == client.Stopped {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// AgentLostError is an exec whose agent went away while the command ran
// (a program in the instance killed it): the command may have run, its
// output and exit status are lost. It is errdefs.ErrUnavailable with a
// Retry-After; the next command runs by runc exec.
type AgentLostError struct {
	Instance string
	Err      error
}

func (e *AgentLostError) Error() string {
	return fmt.Sprintf("exec in instance %q: the instance's exec agent went away while the command ran (killed from inside the instance?); the command may have run, its output and exit status are lost: %v", e.Instance, e.Err)
}

func (e *AgentLostError) Unwrap() []error { return []error{e.Err, errdefs.ErrUnavailable} }

// RetryAfter is when a command may be sent again (by runc exec).
func (e *AgentLostError) RetryAfter() time.Duration { return time.Second }
