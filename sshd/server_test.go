package sshd_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/files"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/limiter"
	"github.com/envd-dev/envd/sshd"
)

// fakeCore knows one key per tenant and one instance per tenant; its
// ExecStream writes the command's last argument to stdout, "err" to
// stderr, and exits 3. It stands for the core the e2e tests run for real;
// here it lets the tests see exactly which principal each call carries.
type fakeCore struct {
	keys      map[string]string // fingerprint -> tenant
	instances map[string]string // instance -> tenant

	limitOne bool
	slot     sync.Mutex
	limits   *limiter.Limiter // when set, Admit takes its slots

	// filesPID is the process whose root OpenFiles opens, as filesID.
	filesPID int
	filesID  files.Identity

	// execFunc, when set, runs instead of the echo.
	execFunc func(ctx context.Context, req types.ExecRequest, stdio types.Stdio) (int, error)

	mu    sync.Mutex
	execs []types.Principal
	env   [][]string
	held  int // HoldInstance calls not yet released
}

func (f *fakeCore) holds() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held
}

func (f *fakeCore) SSHLogin(_ context.Context, id string, key ssh.PublicKey) (types.Principal, error) {
	tenant, ok := f.keys[ssh.FingerprintSHA256(key)]
	if !ok || f.instances[id] != tenant {
		return types.Principal{}, fmt.Errorf("ssh login: %w", errdefs.ErrUnauthenticated)
	}
	return types.Principal{Tenant: tenant}, nil
}

func (f *fakeCore) WakeInstance(_ context.Context, p types.Principal, id string) (types.Instance, error) {
	if f.instances[id] != p.Tenant {
		return types.Instance{}, fmt.Errorf("instance %q: %w", id, errdefs.ErrNotFound)
	}
	node := "n1"
	if id == "elsewhere" {
		node = "n2"
	}
	return types.Instance{ID: id, Node: node, State: types.StateRunning}, nil
}

func (f *fakeCore) TouchInstance(string) {}

func (f *fakeCore) HoldInstance(id string) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held++
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.held--
	}
}

func (f *fakeCore) ExecStream(ctx context.Context, p types.Principal, id string, req types.ExecRequest, stdio types.Stdio) (int, error) {
	f.mu.Lock()
	f.execs = append(f.execs, p)
	f.env = append(f.env, req.Env)
	f.mu.Unlock()
	if f.instances[id] != p.Tenant {
		return -1, fmt.Errorf("instance %q: %w", id, errdefs.ErrNotFound)
	}
	if f.execFunc != nil {
		return f.execFunc(ctx, req, stdio)
	}
	_, _ = io.WriteString(stdio.Stdout, req.Args[len(req.Args)-1])
	_, _ = io.WriteString(stdio.Stderr, "err")
	return 3, nil
}

func (f *fakeCore) DialInstance(context.Context, types.Principal, string, int) (net.Conn, error) {
	return nil, errors.New("no network here")
}

// Admit admits up to one exec session at a time when limitOne is set,
// and by limits when they are set.
func (f *fakeCore) Admit(p types.Principal, kind string) (func(), error) {
	if f.limits != nil {
		return f.limits.Acquire(p.Tenant, kind)
	}
	if !f.limitOne {
		return func() {}, nil
	}
	if !f.slot.TryLock() {
		return nil, fmt.Errorf("too many exec sessions: %w", errdefs.ErrResourceExhausted)
	}
	return f.slot.Unlock, nil
}

// OpenFiles opens the root of process filesPID as filesID, as the core
// opens a running instance's (/proc/<init pid>/root).
func (f *fakeCore) OpenFiles(_ context.Context, p types.Principal, id string, _ types.FileUser, _ bool) (*files.Root, error) {
	if f.instances[id] != p.Tenant {
		return nil, fmt.Errorf("instance %q: %w", id, errdefs.ErrNotFound)
	}
	if f.filesPID == 0 {
		return nil, errors.New("no process here")
	}
	return files.Open(fmt.Sprintf("/proc/%d/root", f.filesPID), f.filesID)
}

// InstancePID is what the core gave before SFTP went through OpenFiles;
// kept so that the SFTP tests also build against that code.
func (f *fakeCore) InstancePID(context.Context, types.Principal, string) (int, error) {
	if f.filesPID == 0 {
		return 0, errors.New("no process here")
	}
	return f.filesPID, nil
}

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	s, err := ssh.NewSignerFromKey(priv)
	require.NoError(t, err)
	return s
}

type fixture struct {
	core         *fakeCore
	srv          *sshd.Server
	addr         string
	hostKey      ssh.PublicKey
	keyA, keyB   ssh.Signer
	instA, instB string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{keyA: newSigner(t), keyB: newSigner(t), instA: "ia", instB: "ib"}
	f.core = &fakeCore{
		keys:      map[string]string{ssh.FingerprintSHA256(f.keyA.PublicKey()): "a", ssh.FingerprintSHA256(f.keyB.PublicKey()): "b"},
		instances: map[string]string{"ia": "a", "ib": "b"},
	}
	host := newSigner(t)
	f.hostKey = host.PublicKey()
	srv, err := sshd.New(f.core, host, sshd.WithNode("n1"))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	f.srv, f.addr = srv, ln.Addr().String()
	return f
}

func (f *fixture) clientConfig(user string, auth ...ssh.AuthMethod) *ssh.ClientConfig {
	return &ssh.ClientConfig{User: user, Auth: auth, HostKeyCallback: ssh.FixedHostKey(f.hostKey)}
}

// run runs cmd in a new session and returns stdout, stderr and the exit
// status.
func run(t *testing.T, c *ssh.Client, cmd string, env ...string) (string, string, int) {
	t.Helper()
	s, err := c.NewSession()
	require.NoError(t, err)
	defer s.Close()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		_ = s.Setenv(k, v)
	}
	var stdout, stderr bytes.Buffer
	s.Stdout, s.Stderr = &stdout, &stderr
	err = s.Run(cmd)
	code := 0
	var ee *ssh.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitStatus()
	} else {
		require.NoError(t, err)
	}
	return stdout.String(), stderr.String(), code
}

// Who logs in where: a key logs in to its tenant's instances only, as
// that tenant; every refusal looks the same; "none" is refused on the
// listener.
func TestKeyLogin(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name, user string
		auth       ssh.AuthMethod
		ok         bool
	}{
		{"own key, own instance", f.instA, ssh.PublicKeys(f.keyA), true},
		{"another tenant's key", f.instA, ssh.PublicKeys(f.keyB), false},
		{"own key, another tenant's instance", f.instB, ssh.PublicKeys(f.keyA), false},
		{"unknown instance", "nope", ssh.PublicKeys(f.keyA), false},
		{"unknown key", f.instA, ssh.PublicKeys(newSigner(t)), false},
		{"no auth (none)", f.instA, nil, false},
		{"password", f.instA, ssh.Password("x"), false},
	}
	var refusals []string
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var auth []ssh.AuthMethod
			if tc.auth != nil {
				auth = append(auth, tc.auth)
			}
			c, err := ssh.Dial("tcp", f.addr, f.clientConfig(tc.user, auth...))
			if !tc.ok {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "unable to authenticate")
				if strings.Contains(err.Error(), "publickey") {
					refusals = append(refusals, err.Error())
				}
				return
			}
			require.NoError(t, err)
			defer c.Close()
			stdout, stderr, code := run(t, c, "echo hi", "LANG=C.UTF-8", "SECRET=x", "LC_ALL=C")
			assert.Equal(t, 3, code, "the exit status comes back")
			assert.Equal(t, "echo hi", stdout, "the command reaches the login shell as its last argument")
			assert.Equal(t, "err", stderr, "stderr apart")
			f.core.mu.Lock()
			defer f.core.mu.Unlock()
			assert.Equal(t, types.Principal{Tenant: "a"}, f.core.execs[len(f.core.execs)-1], "acts for the instance's tenant, never admin")
			assert.ElementsMatch(t, []string{"LANG=C.UTF-8", "LC_ALL=C"}, f.core.env[len(f.core.env)-1], "only allow-listed env")
		})
	}
	require.Len(t, refusals, 4)
	for _, r := range refusals[1:] {
		assert.Equal(t, refusals[0], r, "every refusal of a key reads the same")
	}
}

// A tunnel connection is logged in already: "none" is accepted, the user
// name is ignored and the session is bound to the tunnel's instance and
// principal.
func TestTunnelLogin(t *testing.T) {
	f := newFixture(t)
	require.NoError(t, f.srv.CheckTunnel(context.Background(), types.Principal{Tenant: "a"}, f.instA))
	assert.ErrorIs(t, f.srv.CheckTunnel(context.Background(), types.Principal{Tenant: "a"}, f.instB), errdefs.ErrNotFound,
		"another tenant's instance is not found before any upgrade")

	// A loopback pair, not net.Pipe: both ends send their version line
	// first, which an unbuffered pipe deadlocks.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	server, err := ln.Accept()
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.srv.ServeConn(context.Background(), server, types.Principal{Tenant: "a"}, f.instA)
	}()
	cc, chans, reqs, err := ssh.NewClientConn(client, "tunnel", f.clientConfig("whatever"))
	require.NoError(t, err, "auth none is accepted on a tunnel")
	c := ssh.NewClient(cc, chans, reqs)
	stdout, _, code := run(t, c, "pwd")
	assert.Equal(t, 3, code)
	assert.Equal(t, "pwd", stdout)
	f.core.mu.Lock()
	assert.Equal(t, types.Principal{Tenant: "a"}, f.core.execs[len(f.core.execs)-1])
	f.core.mu.Unlock()
	require.NoError(t, c.Close())
	<-done
}

// A terminal session gets the client's size, then its window changes, and
// TERM; a signal on a session without a terminal ends the command.
func TestSessionTerminalAndSignal(t *testing.T) {
	f := newFixture(t)
	f.core.execFunc = func(ctx context.Context, req types.ExecRequest, stdio types.Stdio) (int, error) {
		if !stdio.TTY {
			<-ctx.Done() // runs until killed
			return -1, ctx.Err()
		}
		fmt.Fprintf(stdio.Stdout, "env %v\n", req.Env)
		// The latest size wins: a window change that comes before the
		// first size was read replaces it, as a terminal needs.
		for sz := range stdio.Resize {
			fmt.Fprintf(stdio.Stdout, "size %dx%d\n", sz.Cols, sz.Rows)
			if sz.Cols == 132 {
				break
			}
		}
		return 0, nil
	}
	c, err := ssh.Dial("tcp", f.addr, f.clientConfig(f.instA, ssh.PublicKeys(f.keyA)))
	require.NoError(t, err)
	defer c.Close()

	s, err := c.NewSession()
	require.NoError(t, err)
	var out bytes.Buffer
	s.Stdout = &out
	require.NoError(t, s.RequestPty("xterm-256color", 40, 120, ssh.TerminalModes{}))
	require.NoError(t, s.Shell())
	require.NoError(t, s.WindowChange(50, 132))
	require.NoError(t, s.Wait())
	assert.Contains(t, []string{"env [TERM=xterm-256color]\nsize 120x40\nsize 132x50\n", "env [TERM=xterm-256color]\nsize 132x50\n"}, out.String())

	s, err = c.NewSession()
	require.NoError(t, err)
	require.NoError(t, s.Start("sleep 1000"))
	require.NoError(t, s.Signal(ssh.SIGTERM))
	err = s.Wait()
	var ee *ssh.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 255, ee.ExitStatus())
}

// frozenConn stops handing what it reads to the SSH client once frozen: a
// client that is gone without closing its connection. closed is closed
// when the server ends the connection.
type frozenConn struct {
	net.Conn
	mu     sync.Mutex
	frozen bool
	closed chan struct{}
	once   sync.Once
}

func (c *frozenConn) Read(p []byte) (int, error) {
	for {
		n, err := c.Conn.Read(p)
		if err != nil {
			c.once.Do(func() { close(c.closed) })
			return n, err
		}
		c.mu.Lock()
		frozen := c.frozen
		c.mu.Unlock()
		if !frozen {
			return n, nil
		}
	}
}

// A client that answers no keep-alive is dropped after max intervals.
func TestKeepAliveDropsSilentClient(t *testing.T) {
	f := newFixture(t)
	host := newSigner(t)
	srv, err := sshd.New(f.core, host, sshd.WithKeepAlive(50*time.Millisecond, 2))
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	raw, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	fc := &frozenConn{Conn: raw, closed: make(chan struct{})}
	cfg := &ssh.ClientConfig{User: f.instA, Auth: []ssh.AuthMethod{ssh.PublicKeys(f.keyA)}, HostKeyCallback: ssh.FixedHostKey(host.PublicKey())}
	cc, chans, reqs, err := ssh.NewClientConn(fc, "x", cfg)
	require.NoError(t, err)
	c := ssh.NewClient(cc, chans, reqs)
	defer c.Close()
	fc.mu.Lock()
	fc.frozen = true
	fc.mu.Unlock()
	select {
	case <-fc.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("the server kept a silent client's connection")
	}
}

// A session's command takes an exec slot of the tenant: past the limit it
// is refused with the reason, and the slot comes back when it ends.
func TestSessionAdmission(t *testing.T) {
	f := newFixture(t)
	f.core.limitOne = true
	block, blocking := make(chan struct{}), make(chan struct{})
	f.core.execFunc = func(ctx context.Context, req types.ExecRequest, stdio types.Stdio) (int, error) {
		if strings.Contains(req.Args[len(req.Args)-1], "block") {
			close(blocking)
			<-block
		}
		return 0, nil
	}
	c, err := ssh.Dial("tcp", f.addr, f.clientConfig(f.instA, ssh.PublicKeys(f.keyA)))
	require.NoError(t, err)
	defer c.Close()
	first, err := c.NewSession()
	require.NoError(t, err)
	require.NoError(t, first.Start("block"))
	<-blocking // the first session holds the slot
	_, stderr, code := run(t, c, "second")
	assert.Equal(t, 255, code)
	assert.Contains(t, stderr, "too many exec sessions")
	close(block)
	require.NoError(t, first.Wait())
	_, _, code = run(t, c, "third")
	assert.Equal(t, 0, code, "the slot came back")
}

// A session to an instance of another node says which node to use.
func TestSessionOnAnotherNode(t *testing.T) {
	f := newFixture(t)
	f.core.instances["elsewhere"] = "a"
	c, err := ssh.Dial("tcp", f.addr, f.clientConfig("elsewhere", ssh.PublicKeys(f.keyA)))
	require.NoError(t, err)
	defer c.Close()
	_, stderr, code := run(t, c, "true")
	assert.Equal(t, 255, code)
	assert.Contains(t, stderr, `runs on node "n2", this is node "n1"`)
}

// An open connection holds the instance (not idle, typed into or not)
// until it closes.
func TestConnectionHoldsTheInstance(t *testing.T) {
	f := newFixture(t)
	c, err := ssh.Dial("tcp", f.addr, f.clientConfig(f.instA, ssh.PublicKeys(f.keyA)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return f.core.holds() == 1 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, c.Close())
	require.Eventually(t, func() bool { return f.core.holds() == 0 }, 5*time.Second, 10*time.Millisecond)
}
