// Package dnstest runs a small authoritative DNS server on loopback for
// tests: A records from a map, NXDOMAIN for other names.
package dnstest

import (
	"net"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

// Server answers A queries over UDP on 127.0.0.1.
type Server struct {
	Addr string // 127.0.0.1:PORT

	mu      sync.Mutex
	records map[string]net.IP
	asked   []string
	pc      net.PacketConn
}

// Start serves records (name -> IPv4 address; names without a trailing
// dot, lower case) until the test ends.
func Start(t testing.TB, records map[string]string) *Server {
	t.Helper()
	s, err := Listen(records)
	if err != nil {
		t.Fatalf("dnstest: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Listen is Start for a TestMain: the caller closes the server.
func Listen(records map[string]string) (*Server, error) {
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: pc.LocalAddr().String(), records: map[string]net.IP{}, pc: pc}
	for n, ip := range records {
		s.Set(n, ip)
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := s.answer(buf[:n]); out != nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
	return s, nil
}

// Close stops serving.
func (s *Server) Close() error { return s.pc.Close() }

// Set adds or replaces the A record of name.
func (s *Server) Set(name, ip string) {
	s.mu.Lock()
	s.records[strings.ToLower(name)] = net.ParseIP(ip).To4()
	s.mu.Unlock()
}

// Asked returns the names queried so far, in order.
func (s *Server) Asked() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.asked...)
}

func (s *Server) answer(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil
	}
	name := strings.TrimSuffix(strings.ToLower(qs[0].Name.String()), ".")
	s.mu.Lock()
	s.asked = append(s.asked, name)
	ip, ok := s.records[name]
	s.mu.Unlock()
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired}
	if !ok {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	_ = b.StartQuestions()
	_ = b.Question(qs[0])
	_ = b.StartAnswers()
	if ok && qs[0].Type == dnsmessage.TypeA {
		var a [4]byte
		copy(a[:], ip)
		_ = b.AResource(dnsmessage.ResourceHeader{Name: qs[0].Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 5}, dnsmessage.AResource{A: a})
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}
