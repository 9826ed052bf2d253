package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"
)

// rttProxy stands between the joining nodes and the primary's registry and
// holds every request for a fixed time before passing it on, as a registry
// one round trip away would (-registry-rtt). It adds latency per request
// only: bandwidth is still the loopback's, so a full pull (a few large
// GETs) barely notices it and a lazy start (one GET per chunk it misses)
// does. Loopback only.
type rttProxy struct {
	addr string
	srv  *http.Server
}

func startRTTProxy(target string, rtt time.Duration) (*rttProxy, error) {
	u, err := url.Parse("http://" + target)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("registry rtt proxy: %w", err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1 // stream bodies as they come
	p := &rttProxy{addr: ln.Addr().String(), srv: &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t := time.NewTimer(rtt)
			defer t.Stop()
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			}
			rp.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 30 * time.Second,
	}}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

func (p *rttProxy) close() { _ = p.srv.Close() }
