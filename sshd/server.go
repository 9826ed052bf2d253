// Package sshd is envd's SSH endpoint: `ssh INSTANCE@NODE -p PORT` opens
// a shell or runs a command in an instance, scp and sftp move files, and
// ssh -L forwards ports, which is what VS Code Remote-SSH and JetBrains
// Gateway need.
//
// Terms:
//   - The user name of a key login is the instance id. The key must be
//     registered by the instance's tenant (POST /v1/ssh-keys); the session
//     then acts for that tenant (Core.SSHLogin). Every refusal reads the
//     same, whether the instance or the key is unknown or another
//     tenant's.
//   - A tunnel connection (ServeConn) arrives through the API's WebSocket
//     route, authenticated there by a bearer token and bound to one
//     instance: only such connections accept auth method "none", and the
//     user name is ignored.
//
// Sessions run through the core's streamed exec as the image's user, in
// the user's login shell (from the instance's /etc/passwd, /bin/sh
// otherwise); SFTP is served by envd itself through the file API's code
// (envd/files), with the file API's rights and no more (sftp.go).
package sshd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/files"
	"github.com/envd-dev/envd/errdefs"
)

// Core is what the SSH endpoint needs of envd's core.
type Core interface {
	// SSHLogin returns the principal of a key login to instance id, or
	// an error of kind ErrUnauthenticated that tells nothing more.
	SSHLogin(ctx context.Context, id string, key ssh.PublicKey) (types.Principal, error)
	// WakeInstance returns the instance once Running, starting it first
	// when it is stopped or hibernated.
	WakeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
	// TouchInstance records activity on the instance (its idle clock).
	TouchInstance(id string)
	// HoldInstance keeps the instance from being idle until release is
	// called: an open SSH connection (a VS Code window, a shell running
	// top) is use, typed into or not.
	HoldInstance(id string) (release func())
	// ExecStream runs a command with its streams connected to stdio.
	ExecStream(ctx context.Context, p types.Principal, id string, req types.ExecRequest, stdio types.Stdio) (int, error)
	// DialInstance connects to 127.0.0.1:port as seen inside the instance.
	DialInstance(ctx context.Context, p types.Principal, id string, port int) (net.Conn, error)
	// OpenFiles opens the instance's root filesystem as the file API
	// does, acting as as (the zero FileUser: the image's user); SFTP is
	// served with it.
	OpenFiles(ctx context.Context, p types.Principal, id string, as types.FileUser, write bool) (*files.Root, error)
	// Admit takes one of the tenant's slots of kind (types.AdmitExec for
	// a session's command, as for the exec routes; types.AdmitSFTP for an
	// SFTP session) or refuses with ErrResourceExhausted; release gives
	// it back.
	Admit(p types.Principal, kind string) (release func(), err error)
}

type options struct {
	node          string
	log           *slog.Logger
	keepAlive     time.Duration
	keepAliveMax  int
	loginDeadline time.Duration
}

// Option configures New.
type Option func(*options) error

// WithLogger logs connections and refusals to log. Default: slog.Default().
func WithLogger(log *slog.Logger) Option {
	return func(o *options) error {
		if log == nil {
			return errors.New("logger is nil")
		}
		o.log = log
		return nil
	}
}

// WithNode names the node the server runs on: a session to an instance
// of another node is refused with a message that names the right node
// (sessions run on the instance's node). Default: "" (no check).
func WithNode(name string) Option {
	return func(o *options) error {
		o.node = name
		return nil
	}
}

// WithKeepAlive sends a keep-alive request every d on an idle-looking
// connection and closes it after max unanswered in a row. Default: 30s, 4.
func WithKeepAlive(d time.Duration, max int) Option {
	return func(o *options) error {
		if d <= 0 || max <= 0 {
			return fmt.Errorf("keep-alive %v x %d: both must be positive", d, max)
		}
		o.keepAlive, o.keepAliveMax = d, max
		return nil
	}
}

// Server is the SSH endpoint. Serve it on a listener, hand it tunnel
// connections with ServeConn, and Close it at the end.
type Server struct {
	core    Core
	hostKey ssh.Signer
	o       options

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	lns    []net.Listener
}

// New makes a server with its host key.
func New(core Core, hostKey ssh.Signer, opts ...Option) (*Server, error) {
	if core == nil || hostKey == nil {
		return nil, errors.New("sshd: a core and a host key are required")
	}
	o := options{log: slog.Default(), keepAlive: 30 * time.Second, keepAliveMax: 4, loginDeadline: 30 * time.Second}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("sshd: %w", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{core: core, hostKey: hostKey, o: o, ctx: ctx, cancel: cancel}, nil
}

// Serve accepts connections on ln until Close; each logs in with a key.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return err
		}
		s.wg.Go(func() { s.serve(s.ctx, c, nil, "") })
	}
}

// CheckTunnel is called before a tunnel connection is accepted: the
// instance must be p's, and is woken when it is not Running.
func (s *Server) CheckTunnel(ctx context.Context, p types.Principal, instance string) error {
	_, err := s.core.WakeInstance(ctx, p, instance)
	return err
}

// ServeConn serves a tunnel connection: authenticated already as p, bound
// to instance. It returns when the connection ends.
func (s *Server) ServeConn(ctx context.Context, conn net.Conn, p types.Principal, instance string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	s.serve(ctx, conn, &p, instance)
}

// Close stops the listeners and ends every connection.
func (s *Server) Close() error {
	s.cancel()
	s.mu.Lock()
	for _, ln := range s.lns {
		_ = ln.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// Permissions extensions set by the auth callbacks.
const (
	extTenant   = "envd-tenant"
	extAdmin    = "envd-admin" // "1" on a tunnel of an admin token
	extInstance = "envd-instance"
)

// errRefused is what every refused login reads.
var errRefused = errors.New("permission denied")

// config is the server configuration of one connection. A tunnel
// connection (tunnel != nil) accepts only "none", bound to instance; any
// other accepts only public keys registered by the instance's tenant.
func (s *Server) config(ctx context.Context, tunnel *types.Principal, instance string) *ssh.ServerConfig {
	cfg := &ssh.ServerConfig{ServerVersion: "SSH-2.0-envd", MaxAuthTries: 6}
	cfg.AddHostKey(s.hostKey)
	if tunnel != nil {
		cfg.NoClientAuth = true
		cfg.NoClientAuthCallback = func(ssh.ConnMetadata) (*ssh.Permissions, error) {
			ext := map[string]string{extTenant: tunnel.Tenant, extInstance: instance}
			if tunnel.Admin {
				ext[extAdmin] = "1"
			}
			return &ssh.Permissions{Extensions: ext}, nil
		}
		return cfg
	}
	cfg.PublicKeyCallback = func(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		p, err := s.core.SSHLogin(lctx, meta.User(), key)
		if err != nil {
			s.o.log.Info("ssh login refused", "remote", meta.RemoteAddr().String(), "user", meta.User(),
				"key", ssh.FingerprintSHA256(key), "err", err)
			return nil, errRefused
		}
		return &ssh.Permissions{Extensions: map[string]string{extTenant: p.Tenant, extInstance: meta.User()}}, nil
	}
	return cfg
}

// conn is one authenticated SSH connection.
type conn struct {
	s        *Server
	sc       *ssh.ServerConn
	p        types.Principal
	instance string
}

func (s *Server) serve(ctx context.Context, nc net.Conn, tunnel *types.Principal, instance string) {
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(s.o.loginDeadline))
	sc, chans, reqs, err := ssh.NewServerConn(nc, s.config(ctx, tunnel, instance))
	if err != nil {
		s.o.log.Debug("ssh handshake", "remote", nc.RemoteAddr().String(), "err", err)
		return
	}
	_ = nc.SetDeadline(time.Time{})
	ext := sc.Permissions.Extensions
	c := &conn{s: s, sc: sc, p: types.Principal{Tenant: ext[extTenant], Admin: ext[extAdmin] == "1"}, instance: ext[extInstance]}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		_ = sc.Close()
	}()
	s.o.log.Info("ssh connection", "instance", c.instance, "tenant", c.p.Tenant, "remote", nc.RemoteAddr().String(),
		"client", string(sc.ClientVersion()))
	go ssh.DiscardRequests(reqs) // keep-alives and forward requests: answered "no"
	go c.keepAlive(ctx)
	defer s.core.HoldInstance(c.instance)()
	var wg sync.WaitGroup
	for nch := range chans {
		switch nch.ChannelType() {
		case "session":
			wg.Go(func() { c.session(ctx, nch) })
		case "direct-tcpip":
			wg.Go(func() { c.directTCPIP(ctx, nch) })
		default:
			_ = nch.Reject(ssh.UnknownChannelType, "channel type "+nch.ChannelType()+" is not supported")
		}
	}
	cancel()
	wg.Wait()
}

// keepAlive asks the client for a reply every keepAlive and closes the
// connection after keepAliveMax unanswered in a row (a client gone
// without a FIN, or a broken tunnel).
func (c *conn) keepAlive(ctx context.Context) {
	t := time.NewTicker(c.s.o.keepAlive)
	defer t.Stop()
	missed := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		replied := make(chan struct{})
		go func() {
			// Any answer, even "unsupported", proves the client alive.
			if _, _, err := c.sc.SendRequest("keepalive@openssh.com", true, nil); err == nil {
				close(replied)
			}
		}()
		select {
		case <-replied:
			missed = 0
		case <-time.After(c.s.o.keepAlive):
			if missed++; missed >= c.s.o.keepAliveMax {
				c.s.o.log.Info("ssh connection: no keep-alive answer, closing", "instance", c.instance)
				_ = c.sc.Close()
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// wake returns once the instance is Running (woken when needed); an error
// is what the client is told.
func (c *conn) wake(ctx context.Context) error {
	in, err := c.s.core.WakeInstance(ctx, c.p, c.instance)
	if err != nil {
		return err
	}
	if c.s.o.node != "" && in.Node != "" && in.Node != c.s.o.node {
		return fmt.Errorf("instance %q runs on node %q, this is node %q: use that node's SSH endpoint (envctl info there): %w",
			c.instance, in.Node, c.s.o.node, errdefs.ErrFailedPrecondition)
	}
	c.s.core.TouchInstance(c.instance)
	return nil
}
