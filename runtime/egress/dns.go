package egress

import (
	"encoding/binary"
	"io"
	"net"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// maxDNSMessage bounds a query or an answer over TCP.
const maxDNSMessage = 65535

func (g *Gateway) serveDNSUDP(pc net.PacketConn) {
	buf := make([]byte, maxDNSMessage)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		q := append([]byte(nil), buf[:n]...)
		go func() {
			if out := g.answer(from, q, "udp"); out != nil {
				_, _ = pc.WriteTo(out, from)
			}
		}()
	}
}

func (g *Gateway) serveDNSConn(conn net.Conn) {
	for {
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
		var l [2]byte
		if _, err := io.ReadFull(conn, l[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(conn, q); err != nil {
			return
		}
		out := g.answer(conn.RemoteAddr(), q, "tcp")
		if out == nil {
			return
		}
		if _, err := conn.Write(binary.BigEndian.AppendUint16(nil, uint16(len(out)))); err != nil {
			return
		}
		if _, err := conn.Write(out); err != nil {
			return
		}
	}
}

// answer returns the reply to query q from addr: the upstream's answer
// for an allowed name, REFUSED otherwise (nil: no reply at all, for what
// is not a query).
func (g *Gateway) answer(from net.Addr, q []byte, network string) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return nil
	}
	c, ok := g.client(from)
	if !ok {
		return reply(h, qs, dnsmessage.RCodeRefused)
	}
	if len(qs) != 1 || h.OpCode != 0 {
		return reply(h, qs, dnsmessage.RCodeRefused)
	}
	name := qs[0].Name.String()
	if !Match(c.Names, name) {
		g.deny(c, "dns", name, "", "name not allowed by the project's egress policy")
		return reply(h, qs, dnsmessage.RCodeRefused)
	}
	out, err := g.exchange(q, network)
	if err != nil {
		return reply(h, qs, dnsmessage.RCodeServerFailure)
	}
	return out
}

// reply is an answer without records carrying rcode.
func reply(h dnsmessage.Header, qs []dnsmessage.Question, rcode dnsmessage.RCode) []byte {
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode,
		RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rcode})
	if b.StartQuestions() == nil {
		for _, q := range qs {
			_ = b.Question(q)
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}

// exchange sends q to the upstream resolvers in turn and returns the first
// answer.
func (g *Gateway) exchange(q []byte, network string) ([]byte, error) {
	var lastErr error
	for _, up := range g.cfg.Upstream {
		out, err := exchangeOne(up, q, network, g.cfg.Timeout)
		if err == nil {
			return out, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func exchangeOne(server string, q []byte, network string, timeout time.Duration) ([]byte, error) {
	conn, err := net.DialTimeout(network, server, timeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if network == "udp" {
		if _, err := conn.Write(q); err != nil {
			return nil, err
		}
		buf := make([]byte, maxDNSMessage)
		n, err := conn.Read(buf)
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
	if _, err := conn.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(q))), q...)); err != nil {
		return nil, err
	}
	var l [2]byte
	if _, err := io.ReadFull(conn, l[:]); err != nil {
		return nil, err
	}
	out := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(conn, out); err != nil {
		return nil, err
	}
	return out, nil
}
