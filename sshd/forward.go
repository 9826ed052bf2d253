package sshd

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"

	"golang.org/x/crypto/ssh"
)

// directTCPIPRequest is the payload of a "direct-tcpip" channel open
// (RFC 4254 7.2): the host and port to connect to and where the client's
// connection came from.
type directTCPIPRequest struct {
	Host       string
	Port       uint32
	OriginHost string
	OriginPort uint32
}

// directTCPIP serves ssh -L and -D: a connection to host:port as seen
// inside the instance. The instance's own addresses are its loopback, so
// only localhost, 127.0.0.1 and ::1 are accepted: the instance's network
// is the one place a forward reaches, never the node's.
func (c *conn) directTCPIP(ctx context.Context, nch ssh.NewChannel) {
	var req directTCPIPRequest
	if err := ssh.Unmarshal(nch.ExtraData(), &req); err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, "malformed direct-tcpip request")
		return
	}
	if !instanceLocal(req.Host) || req.Port == 0 || req.Port > 65535 {
		_ = nch.Reject(ssh.Prohibited, fmt.Sprintf("forwarding to %s: only localhost (the instance's own ports) can be reached", net.JoinHostPort(req.Host, strconv.Itoa(int(req.Port)))))
		return
	}
	if err := c.wake(ctx); err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, err.Error())
		return
	}
	tcp, err := c.s.core.DialInstance(ctx, c.p, c.instance, int(req.Port))
	if err != nil {
		_ = nch.Reject(ssh.ConnectionFailed, fmt.Sprintf("connect to port %d of the instance: %v", req.Port, err))
		return
	}
	defer tcp.Close()
	ch, reqs, err := nch.Accept()
	if err != nil {
		return
	}
	defer ch.Close()
	go ssh.DiscardRequests(reqs)
	stop := context.AfterFunc(ctx, func() { _ = tcp.Close(); _ = ch.Close() })
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = io.Copy(tcp, touchReader{ch, c})
		if cw, ok := tcp.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		} else {
			_ = tcp.Close()
		}
	})
	wg.Go(func() {
		_, _ = io.Copy(ch, tcp)
		_ = ch.CloseWrite()
	})
	wg.Wait()
}

func instanceLocal(host string) bool {
	switch host {
	case "localhost", "127.0.0.1", "::1", "[::1]", "ip6-localhost":
		return true
	}
	return false
}
