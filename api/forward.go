package api

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// ForwardCore tells which node answers requests about an instance.
type ForwardCore interface {
	// InstanceOwner is the node that runs instance id and its API URL, or
	// local when this node answers.
	InstanceOwner(ctx context.Context, p types.Principal, id string) (node, apiURL string, local bool, err error)
}

// ForwardedHeader marks a request one node forwarded to another: it is
// answered where it arrives, never forwarded again.
const ForwardedHeader = "X-Envd-Forwarded-From"

// forward sends a request about an instance that another node runs to
// that node, as it came (the client's token included: the owner checks it
// against the same database) and streams the answer back, WebSocket
// upgrades and event streams included, so that every node serves every
// instance route. Reading an instance (GET /v1/instances/{i}) is answered
// where it arrives.
func forward(core ForwardCore, fw forwarder) gin.HandlerFunc {
	return func(c *gin.Context) {
		id := c.Param("i")
		if id == "" || c.GetHeader(ForwardedHeader) != "" ||
			(c.Request.Method == http.MethodGet && c.FullPath() == "/v1/instances/:i") {
			c.Next()
			return
		}
		node, apiURL, local, err := core.InstanceOwner(c.Request.Context(), principal(c), id)
		if err != nil {
			writeError(c, err)
			return
		}
		if local {
			c.Next()
			return
		}
		c.Abort()
		forwardTo(c.Writer, c.Request, fw, id, node, apiURL, false, func(err error) { writeError(c, err) })
	}
}

// forwardTo sends r to the node at apiURL and streams its answer to w.
// keepHost keeps the request's Host (the host form of the port proxy,
// which the owner recognises by it); otherwise the owner's host is sent.
// forwarder is how this node forwards: the transport to each other node
// and the cluster's key it signs with (forwardsign.go).
type forwarder struct {
	peers PeerTransport
	key   []byte
}

// PeerTransport is how this node reaches node's API to forward a request
// there: the transport that trusts node's TLS certificate, for one.
type PeerTransport func(ctx context.Context, node string) (http.RoundTripper, error)

// defaultPeers reaches every node through http.DefaultTransport.
func defaultPeers(context.Context, string) (http.RoundTripper, error) {
	return http.DefaultTransport, nil
}

func forwardTo(w http.ResponseWriter, r *http.Request, fw forwarder, id, node, apiURL string, keepHost bool, fail func(error)) {
	target, err := url.Parse(apiURL)
	if err != nil {
		fail(fmt.Errorf("node %q registered API URL %q: %v: %w", node, apiURL, err, errdefs.ErrUnavailable))
		return
	}
	rt, err := fw.peers(r.Context(), node)
	if err != nil {
		fail(unreached{fmt.Errorf("instance %q runs on node %q: how to reach it: %w", id, node, err)})
		return
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
			if keepHost {
				pr.Out.Host = pr.In.Host
			}
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
			signForwarded(fw.key, pr.Out, time.Now())
		},
		Transport:     rt,
		FlushInterval: -1, // event streams and exec output as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			fail(unreached{fmt.Errorf("instance %q runs on node %q, which did not answer at %s: %v: %w", id, node, apiURL, err, errdefs.ErrUnavailable)})
		},
	}
	rp.ServeHTTP(w, r)
}

// unreached is a forward that did not reach the owner: 503 (or the kind
// it wraps) with a Retry-After, as every 503 of the API has; a node that
// restarts is back, or its lease lapses and its instances fail, within
// seconds.
type unreached struct{ error }

func (e unreached) Unwrap() error { return e.error }

func (unreached) RetryAfter() time.Duration { return forwardRetryAfter }

const forwardRetryAfter = 5 * time.Second

// WithForwardTransport forwards requests to every other node through rt.
// Default: http.DefaultTransport.
func WithForwardTransport(rt http.RoundTripper) Option {
	return func(o *options) error {
		if rt == nil {
			return fmt.Errorf("forward transport is nil")
		}
		o.forwardTransport = func(context.Context, string) (http.RoundTripper, error) { return rt, nil }
		return nil
	}
}

// WithPeerTransport sets how requests are forwarded to the node that runs
// an instance, node by node (each node's TLS certificate, for one).
// Default: http.DefaultTransport for every node.
func WithPeerTransport(peers PeerTransport) Option {
	return func(o *options) error {
		if peers == nil {
			return fmt.Errorf("peer transport is nil")
		}
		o.forwardTransport = peers
		return nil
	}
}
