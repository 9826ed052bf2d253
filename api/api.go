// Package api serves envd's HTTP API with gin.
//
// Handlers parse the request, authenticate it, call a part and map its
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
// the group declares the small interface of the methods it calls and lists
// its routes; New takes one implementation per group (Parts). Nearly every
// route is one handle call (handle.go): decode the JSON body into the
// request type, call the part, answer the result with a status or the
// error. To add a route, add its line to its group's routes and, when the
// method is new, the method to the group's interface, to the part that
// implements it (envd/node wires the parts) and to that group's fake in
// apitest. A new group is a new interface, a field of Parts, a line in New
// and a small fake.
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

// Parts are what the API serves: one field per route group, each the
// small interface that group declares next to its handlers (auth.go,
// node.go, images.go, projects.go, instances.go (two groups), exec_ws.go,
// versions.go, volumes.go, operations.go, tenants.go, ...). The composition
// root (envd/node) fills them with the feature parts that implement them.
// Every method but Authenticate, Info and Join acts for the principal the
// request's token belongs to.
//
// Auth is required. A nil group is not mounted: its routes answer 404
// not_found ("no route ..."), as any unknown route does. Forward nil: every
// instance is this node's; Cluster nil: instances are placed here;
// Admitter nil: streams are not limited.
type Parts struct {
	Auth        Authenticator
	Node        NodeCore
	Images      ImageCore
	Projects    ProjectCore
	Instances   InstanceCore
	Lifecycle   LifecycleCore
	Exec        ExecCore
	Versions    VersionCore
	Volumes     VolumeCore
	Operations  OperationCore
	Tenants     TenantCore
	Forward     ForwardCore
	SSHKeys     SSHKeyCore
	Idle        IdleCore
	Ports       PortCore
	Files       FileCore
	Rollouts    RolloutCore
	Pools       PoolCore
	Checkpoints CheckpointCore
	Egress      EgressCore
	Specs       SpecCore
	Cluster     ClusterCore
	Join        JoinCore
	Webhooks    WebhookCore
	Admitter    Admitter
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
func New(parts Parts, opts ...Option) (http.Handler, error) {
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
	if parts.Auth == nil {
		return nil, errors.New("api: Parts.Auth is nil: every /v1 route authenticates")
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

	auth := authenticate(parts.Auth)
	admit := admission(parts.Admitter)
	serveConsole(e)
	e.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	e.GET("/readyz", readiness{o.checks, o.checkTimeout}.serve)
	e.GET("/metrics", scrapeAuth(parts.Auth, o.scrapeToken), serveMetrics(o.metrics))
	if parts.Join != nil {
		e.POST("/v1/cluster/join", joinTokens{parts.Join}.join)
	}
	fwd := forwarder{peers: o.forwardTransport, key: o.forwardKey}
	if fwd.peers == nil {
		fwd.peers = defaultPeers
	}
	chain := []gin.HandlerFunc{auth, checkIdempotencyKey}
	if parts.Forward != nil {
		chain = append(chain, forward(parts.Forward, fwd))
	}
	if parts.Cluster != nil {
		chain = append(chain, placeCreate(parts.Cluster, fwd))
	}
	v1 := e.Group("/v1", chain...)
	// A group is listed only when its part is there: a route list built
	// on a nil interface would panic on its first request (or at once,
	// where routes take method values).
	var groups [][]route
	add := func(present bool, routes func() []route) {
		if present {
			groups = append(groups, routes())
		}
	}
	add(parts.Node != nil, func() []route { return node{parts.Node}.routes() })
	add(parts.Images != nil, func() []route { return images{parts.Images}.routes() })
	add(parts.Projects != nil, func() []route { return projects{parts.Projects}.routes() })
	add(parts.Instances != nil, func() []route { return instances{parts.Instances}.routes() })
	add(parts.Lifecycle != nil, func() []route { return lifecycle{parts.Lifecycle}.routes() })
	add(parts.Exec != nil, func() []route { return execs{parts.Exec, admit}.routes() })
	add(parts.Versions != nil, func() []route { return versions{parts.Versions}.routes() })
	add(parts.Volumes != nil, func() []route { return volumes{parts.Volumes}.routes() })
	add(parts.Operations != nil, func() []route {
		return operations{parts.Operations, admit, o.pollInterval, o.keepAlive}.routes()
	})
	add(parts.Tenants != nil, func() []route { return tenants{parts.Tenants}.routes() })
	add(parts.SSHKeys != nil, func() []route { return sshRoutes{parts.SSHKeys, o.ssh}.routes() })
	add(parts.Idle != nil, func() []route { return idle{parts.Idle}.routes() })
	add(parts.Ports != nil, func() []route { return newPorts(parts.Ports, o.previewDomain).routes() })
	add(parts.Files != nil, func() []route { return fileRoutes{parts.Files, admit, o.keepAlive}.routes() })
	add(parts.Rollouts != nil, func() []route { return rollouts{parts.Rollouts}.routes() })
	add(parts.Pools != nil, func() []route { return pools{parts.Pools}.routes() })
	add(parts.Checkpoints != nil, func() []route { return checkpoints{parts.Checkpoints}.routes() })
	add(parts.Egress != nil, func() []route { return egressRoutes{parts.Egress}.routes() })
	add(parts.Specs != nil, func() []route { return specRoutes{parts.Specs}.routes() })
	add(parts.Cluster != nil, func() []route { return nodes{parts.Cluster}.routes() })
	add(parts.Join != nil, func() []route { return joinTokens{parts.Join}.routes() })
	add(parts.Webhooks != nil, func() []route { return webhooks{parts.Webhooks}.routes() })
	for _, group := range groups {
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
