// Package api serves envd's HTTP API with gin.
//
// Handlers parse the request, authenticate it, call the Core and map its
// errors; they hold no business logic. Every route under /v1 needs an
// "Authorization: Bearer <token>" header (a WebSocket upgrade may carry the
// token as a subprotocol instead, see exec_ws.go). Errors are JSON:
//
//	{"error": {"code": "not_found", "message": "project \"p\": not found", "request_id": "..."}}
//
// with the HTTP status and the stable code of the error's kind (package
// errdefs); writeError is the one place that mapping happens. Every
// request has an id, logged with it in the access log (observe.go).
//
// Routes come in groups, one file each (projects.go, instances.go, ...):
// the group declares the small interface of the core methods it calls and
// lists its routes. Nearly every route is one handle call (handle.go):
// decode the JSON body into the request type, call the core, answer the
// result with a status or the error. To add a route, add its line to its
// group's routes and, when the core method is new, the method to the
// group's interface (and to *envd.Service and the fake in apitest).
package api

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// Core is what the API needs from envd's service core: the union of the
// small interfaces its route groups declare, each next to its handlers
// (auth.go, node.go, images.go, projects.go, instances.go (two groups),
// exec_ws.go, versions.go, volumes.go, operations.go, tenants.go). *envd.Service
// implements it. Every method but Authenticate and Info acts for the
// principal the request's token belongs to.
type Core interface {
	Authenticator
	NodeCore
	ImageCore
	ProjectCore
	InstanceCore
	LifecycleCore
	ExecCore
	VersionCore
	VolumeCore
	OperationCore
	TenantCore
	ForwardCore
	SSHKeyCore
	IdleCore
	PortCore
	FileCore
	RolloutCore
	PoolCore
	CheckpointCore
	SpecCore
	ClusterCore
	JoinCore
}

// MaxJSONBody is the largest JSON request body accepted. Image uploads are
// not limited.
const MaxJSONBody = 1 << 20

type options struct {
	forwardTransport PeerTransport // forward.go
	forwardKey       []byte        // forwardsign.go
	accessLog        *slog.Logger
	errorLog         io.Writer
	pollInterval     time.Duration
	keepAlive        time.Duration
	checks           map[string]Checker
	checkTimeout     time.Duration
	metrics          http.Handler    // metrics.go
	scrapeToken      string          // metrics.go
	requests         RequestObserver // metrics.go
	ssh              SSHServer       // ssh.go

	previewDomain string // ports.go
}

// Option configures New.
type Option func(*options) error

// WithAccessLog writes the access log (accessLog in observe.go) to w as
// text lines, probes included. Default: no access log.
func WithAccessLog(w io.Writer) Option {
	return func(o *options) error {
		if w == nil {
			return errors.New("access log writer is nil")
		}
		o.accessLog = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
		return nil
	}
}

// WithLogger writes the access log (accessLog in observe.go) through log:
// a line per request at Info, probes at Debug. Default: no access log.
func WithLogger(log *slog.Logger) Option {
	return func(o *options) error {
		if log == nil {
			return errors.New("logger is nil")
		}
		o.accessLog = log
		return nil
	}
}

// WithReadiness sets what GET /readyz checks, by name (the names appear in
// its answer). Default: nothing, so /readyz answers 200 while the process
// serves.
func WithReadiness(checks map[string]Checker) Option {
	return func(o *options) error {
		for name, ch := range checks {
			if name == "" || ch == nil {
				return fmt.Errorf("readiness check %q: needs a name and a checker", name)
			}
		}
		o.checks = checks
		return nil
	}
}

// WithReadinessTimeout bounds each readiness check. Default: 2s.
func WithReadinessTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("readiness timeout %v: must be positive", d)
		}
		o.checkTimeout = d
		return nil
	}
}

// WithErrorLog sets where recovered panics are logged. Default: os.Stderr
// (gin's default error writer).
func WithErrorLog(w io.Writer) Option {
	return func(o *options) error {
		if w == nil {
			return errors.New("error log writer is nil")
		}
		o.errorLog = w
		return nil
	}
}

// WithEventPollInterval sets how often an operation's event stream asks the
// core for new events. Default: 200ms.
func WithEventPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("event poll interval %v: must be positive", d)
		}
		o.pollInterval = d
		return nil
	}
}

// WithKeepAlive sets how often an idle event stream sends an SSE comment so
// that proxies keep the connection open. Default: 15s.
func WithKeepAlive(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("keep-alive interval %v: must be positive", d)
		}
		o.keepAlive = d
		return nil
	}
}

// WithPreviewDomain names the node's preview domain: preview URLs in
// answers are {port}-{instance}.{domain} (PreviewHosts serves them).
// Default: "", no preview URLs.
func WithPreviewDomain(domain string) Option {
	return func(o *options) error {
		o.previewDomain = strings.ToLower(strings.TrimSuffix(domain, "."))
		return nil
	}
}

// New returns the API's HTTP handler, or the error of the first invalid
// option.
func New(core Core, opts ...Option) (http.Handler, error) {
	o := options{
		errorLog:     gin.DefaultErrorWriter,
		pollInterval: 200 * time.Millisecond,
		keepAlive:    15 * time.Second,
		checkTimeout: 2 * time.Second,
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("api: %w", err)
		}
	}
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	e.HandleMethodNotAllowed = false
	e.ContextWithFallback = true
	_ = e.SetTrustedProxies(nil)
	e.Use(requestID)
	e.Use(func(c *gin.Context) { stripUnsigned(o.forwardKey, c.Request) }) // forwardsign.go
	if o.accessLog != nil {
		e.Use(accessLog(o.accessLog))
	}
	if o.requests != nil {
		e.Use(observeRequests(o.requests))
	}
	e.Use(gin.CustomRecoveryWithWriter(o.errorLog, func(c *gin.Context, rec any) {
		writeError(c, fmt.Errorf("internal error: %v", rec))
	}))
	e.NoRoute(func(c *gin.Context) {
		writeError(c, fmt.Errorf("no route %s %s: %w", c.Request.Method, c.Request.URL.Path, errNotFound))
	})

	auth := authenticate(core)
	admit := admission(core)
	node := node{core}
	serveConsole(e)
	e.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	e.GET("/readyz", readiness{o.checks, o.checkTimeout}.serve)
	e.GET("/metrics", scrapeAuth(core, o.scrapeToken), serveMetrics(o.metrics))
	e.POST("/v1/cluster/join", joinTokens{core}.join)
	fwd := forwarder{peers: o.forwardTransport, key: o.forwardKey}
	if fwd.peers == nil {
		fwd.peers = defaultPeers
	}
	v1 := e.Group("/v1", auth, checkIdempotencyKey, forward(core, fwd), placeCreate(core, fwd))
	for _, group := range [][]route{
		node.routes(),
		images{core}.routes(),
		projects{core}.routes(),
		instances{core}.routes(),
		lifecycle{core}.routes(),
		execs{core, admit}.routes(),
		versions{core}.routes(),
		volumes{core}.routes(),
		operations{core, admit, o.pollInterval, o.keepAlive}.routes(),
		tenants{core}.routes(),
		sshRoutes{core, o.ssh}.routes(),
		idle{core}.routes(),
		newPorts(core, o.previewDomain).routes(),
		fileRoutes{core, admit, o.keepAlive}.routes(),
		rollouts{core}.routes(),
		pools{core}.routes(),
		checkpoints{core}.routes(),
		specRoutes{core}.routes(),
		nodes{core}.routes(),
		joinTokens{core}.routes(),
	} {
		for _, r := range group {
			v1.Handle(r.method, r.path, r.handler)
		}
	}
	return e, nil
}

// route is one entry of a group's part of the /v1 route table. Adding a
// route is adding a line to its group's routes and, when the group's
// interface lacks the core method it calls, a method to that interface.
type route struct {
	method  string
	path    string // relative to /v1
	handler gin.HandlerFunc
}
