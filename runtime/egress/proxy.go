package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/net/dns/dnsmessage"
	"golang.org/x/sys/unix"
)

// helloTimeout bounds the wait for a TLS ClientHello or an HTTP request
// head.
const helloTimeout = 15 * time.Second

var errHelloRead = errors.New("client hello read")

// serveProxyConn handles one redirected connection: it reads the name the
// client asks for, checks it, and splices the connection to its original
// destination.
func (g *Gateway) serveProxyConn(conn net.Conn) {
	c, ok := g.client(conn.RemoteAddr())
	if !ok {
		return
	}
	dst, err := originalDst(conn)
	if err != nil {
		g.deny(c, "connect", "", "", "original destination unknown: "+err.Error())
		return
	}
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == 0x16 { // a TLS handshake record
		g.proxyTLS(c, conn, br, dst)
		return
	}
	g.proxyHTTP(c, conn, br, dst)
}

// originalDst is the destination a REDIRECT/DNAT rule replaced
// (SO_ORIGINAL_DST of the conntrack entry).
func originalDst(conn net.Conn) (*net.TCPAddr, error) {
	tc, ok := conn.(*net.TCPConn)
	if !ok {
		return nil, errors.New("not a TCP connection")
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil, err
	}
	var sa unix.RawSockaddrInet4
	var serr error
	if err := rc.Control(func(fd uintptr) {
		l := uint32(unsafe.Sizeof(sa))
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_IP, unix.SO_ORIGINAL_DST,
			uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&l)), 0)
		if e != 0 {
			serr = e
		}
	}); err != nil {
		return nil, err
	}
	if serr != nil {
		return nil, serr
	}
	port := int(sa.Port>>8 | sa.Port<<8)
	return &net.TCPAddr{IP: net.IPv4(sa.Addr[0], sa.Addr[1], sa.Addr[2], sa.Addr[3]).To4(), Port: port}, nil
}

// check decides whether client c may reach dst under name: the name must
// match c's patterns and resolve, at the upstream resolvers now, to dst's
// address, and dst must not be refused. It returns the refusal reason, ""
// when allowed.
func (g *Gateway) check(ctx context.Context, c Client, name string, dst *net.TCPAddr) string {
	if name == "" {
		return "no host name in the request"
	}
	if !Match(c.Names, name) {
		return "name not allowed by the project's egress policy"
	}
	if g.refused(dst.IP, dst.Port) {
		return "destination is the node or a cluster endpoint"
	}
	ips, err := g.lookupA(ctx, name)
	if err != nil {
		return "name does not resolve: " + err.Error()
	}
	if !slices.ContainsFunc(ips, dst.IP.Equal) {
		return "name does not resolve to the destination " + dst.IP.String()
	}
	return ""
}

// lookupA asks the upstream resolvers for name's IPv4 addresses (no
// /etc/hosts, no cache: the answer the instance could get now).
func (g *Gateway) lookupA(ctx context.Context, name string) ([]net.IP, error) {
	qn, err := dnsmessage.NewName(strings.TrimSuffix(name, ".") + ".")
	if err != nil {
		return nil, err
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: uint16(time.Now().UnixNano()), RecursionDesired: true})
	_ = b.StartQuestions()
	_ = b.Question(dnsmessage.Question{Name: qn, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET})
	q, err := b.Finish()
	if err != nil {
		return nil, err
	}
	out, err := g.exchange(q, "udp")
	if err == nil && len(out) > 2 && out[2]&0x02 != 0 { // truncated
		out, err = g.exchange(q, "tcp")
	}
	if err != nil {
		return nil, err
	}
	var p dnsmessage.Parser
	h, err := p.Start(out)
	if err != nil {
		return nil, err
	}
	if h.RCode != dnsmessage.RCodeSuccess {
		return nil, fmt.Errorf("%s", h.RCode)
	}
	if err := p.SkipAllQuestions(); err != nil {
		return nil, err
	}
	var ips []net.IP
	for {
		rh, err := p.AnswerHeader()
		if err != nil {
			break
		}
		if rh.Type != dnsmessage.TypeA {
			_ = p.SkipAnswer()
			continue
		}
		a, err := p.AResource()
		if err != nil {
			break
		}
		ips = append(ips, net.IP(a.A[:]))
	}
	return ips, nil
}

// recordingConn feeds crypto/tls the client's bytes while recording them,
// so the ClientHello can be read and then replayed to the destination.
type recordingConn struct {
	net.Conn
	r   io.Reader
	rec bytes.Buffer
}

func (r *recordingConn) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.rec.Write(p[:n])
	return n, err
}
func (r *recordingConn) Write([]byte) (int, error) { return 0, errHelloRead }

func (g *Gateway) proxyTLS(c Client, conn net.Conn, br *bufio.Reader, dst *net.TCPAddr) {
	rc := &recordingConn{Conn: conn, r: br}
	var sni string
	_ = tls.Server(rc, &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		sni = h.ServerName
		return nil, errHelloRead
	}}).Handshake()
	sni = strings.TrimSuffix(strings.ToLower(sni), ".")
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Timeout)
	defer cancel()
	if reason := g.check(ctx, c, sni, dst); reason != "" {
		g.deny(c, "tls", sni, dst.String(), reason)
		return
	}
	if g.cfg.CA != nil && g.cfg.Headers != nil {
		hs, err := g.cfg.Headers(ctx, c.Key, "https", sni)
		if err != nil {
			// Neither passed through without its secret nor answered:
			// the client sees its handshake fail.
			g.deny(c, "tls", sni, dst.String(), "secret lookup failed: "+err.Error())
			return
		}
		if len(hs) > 0 {
			cancel()
			g.terminateTLS(c, &replayConn{Conn: conn, r: io.MultiReader(bytes.NewReader(rc.rec.Bytes()), br)}, dst, sni)
			return
		}
	}
	up, err := net.DialTimeout("tcp4", dst.String(), g.cfg.Timeout)
	if err != nil {
		return
	}
	defer up.Close()
	_ = conn.SetReadDeadline(time.Time{})
	if _, err := up.Write(rc.rec.Bytes()); err != nil {
		return
	}
	splice(conn, br, up)
}

// replayConn reads the bytes already read from a connection (the
// ClientHello) before the rest.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (r *replayConn) Read(p []byte) (int, error) { return r.r.Read(p) }

// terminateTLS serves a TLS connection to sni itself, with a certificate
// of the node's CA, and forwards its HTTP/1 requests (headers added) over
// a TLS connection of its own to dst that verifies the upstream's real
// certificate for sni. The client is offered HTTP/1.1 only (ALPN), so
// HTTP/2 clients fall back to it.
func (g *Gateway) terminateTLS(c Client, conn net.Conn, dst *net.TCPAddr, sni string) {
	cert, err := g.cfg.CA.Certificate(sni)
	if err != nil {
		g.deny(c, "tls", sni, dst.String(), "no certificate to present: "+err.Error())
		return
	}
	tc := tls.Server(conn, &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12})
	_ = tc.SetDeadline(time.Now().Add(helloTimeout))
	if err := tc.Handshake(); err != nil {
		return // the client did not trust the node's CA, or went away
	}
	_ = tc.SetDeadline(time.Time{})
	dial := func() (net.Conn, string) {
		raw, err := net.DialTimeout("tcp4", dst.String(), g.cfg.Timeout)
		if err != nil {
			return nil, dst.String() + " unreachable"
		}
		up := tls.Client(raw, &tls.Config{ServerName: sni, RootCAs: g.cfg.UpstreamRoots, NextProtos: []string{"http/1.1"},
			MinVersion: tls.VersionTLS12})
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Timeout)
		defer cancel()
		if err := up.HandshakeContext(ctx); err != nil {
			raw.Close()
			var verr *tls.CertificateVerificationError
			if errors.As(err, &verr) {
				reason := "upstream certificate not trusted: " + verr.Err.Error()
				g.deny(c, "tls", sni, dst.String(), reason)
				return nil, reason
			}
			return nil, "upstream TLS handshake failed: " + err.Error()
		}
		return up, ""
	}
	g.forwardHTTP(c, tc, bufio.NewReader(tc), dst, "https", sni, dial)
}

// splice copies both ways until both directions end.
func splice(client net.Conn, clientR io.Reader, up net.Conn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, clientR)
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(client, up)
	if cw, ok := client.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	<-done
}

// proxyHTTP forwards the requests of one plain HTTP/1 connection.
func (g *Gateway) proxyHTTP(c Client, conn net.Conn, br *bufio.Reader, dst *net.TCPAddr) {
	g.forwardHTTP(c, conn, br, dst, "http", "", func() (net.Conn, string) {
		up, err := net.DialTimeout("tcp4", dst.String(), g.cfg.Timeout)
		if err != nil {
			return nil, dst.String() + " unreachable"
		}
		return up, ""
	})
}

// forwardHTTP forwards the HTTP/1 requests read from br, checking the Host
// of each and setting the configured headers of scheme on each, over one
// upstream connection that dial opens at the first request (it returns
// the reason the instance is told when it cannot). On a terminated TLS
// connection (sni != "") every request must be for sni: the upstream
// connection was verified for that name alone.
func (g *Gateway) forwardHTTP(c Client, conn net.Conn, br *bufio.Reader, dst *net.TCPAddr, scheme, sni string,
	dial func() (net.Conn, string)) {
	var up net.Conn
	var upR *bufio.Reader
	defer func() {
		if up != nil {
			up.Close()
		}
	}()
	allowed := map[string]bool{}
	if sni != "" {
		allowed[sni] = true // checked when the connection opened
	}
	for {
		_ = conn.SetReadDeadline(time.Now().Add(helloTimeout))
		req, err := http.ReadRequest(br)
		if err != nil {
			if up == nil && sni == "" && !errors.Is(err, io.EOF) {
				g.deny(c, "connect", "", dst.String(), "neither TLS nor HTTP")
			}
			return
		}
		_ = conn.SetReadDeadline(time.Time{})
		host := req.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		if sni != "" && host != sni {
			g.deny(c, scheme, host, dst.String(), "request for another host than the TLS connection's ("+sni+")")
			refuse(conn, http.StatusMisdirectedRequest, fmt.Sprintf("envd egress: %s: this connection is for %s\n", orNone(host), sni))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Timeout)
		if !allowed[host] {
			if reason := g.check(ctx, c, host, dst); reason != "" {
				cancel()
				g.deny(c, scheme, host, dst.String(), reason)
				refuse(conn, http.StatusForbidden, fmt.Sprintf("envd egress: %s: %s\n", orNone(host), reason))
				return
			}
			allowed[host] = true
		}
		var headers []Header
		if g.cfg.Headers != nil {
			headers, err = g.cfg.Headers(ctx, c.Key, scheme, host)
		}
		cancel()
		if err != nil {
			refuse(conn, http.StatusBadGateway, "envd egress: secret lookup failed\n")
			return
		}
		for _, h := range headers {
			req.Header.Set(h.Name, h.Value)
		}
		if up == nil {
			var reason string
			if up, reason = dial(); up == nil {
				refuse(conn, http.StatusBadGateway, "envd egress: "+orNone(host)+": "+reason+"\n")
				return
			}
			upR = bufio.NewReader(up)
		}
		if err := req.Write(up); err != nil {
			return
		}
		resp, err := http.ReadResponse(upR, req)
		if err != nil {
			return
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			if resp.Write(conn) == nil {
				splice(conn, br, &bufConn{Conn: up, r: upR})
			}
			return
		}
		err = resp.Write(conn)
		resp.Body.Close()
		if err != nil || req.Close || resp.Close {
			return
		}
	}
}

// bufConn reads through a bufio.Reader that may hold bytes already read.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func refuse(conn net.Conn, status int, body string) {
	_, _ = io.WriteString(conn, "HTTP/1.1 "+strconv.Itoa(status)+" "+http.StatusText(status)+
		"\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
}

func orNone(s string) string {
	if s == "" {
		return "(no host)"
	}
	return s
}
