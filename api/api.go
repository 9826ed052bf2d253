// Package api serves envd's HTTP API with gin.
//
// Handlers parse the request, authenticate it, call the Core and map its
// errors; they hold no business logic. Every route under /v1 needs an
// "Authorization: Bearer <token>" header (a WebSocket upgrade may carry the
// token as a subprotocol instead, see exec_ws.go). Errors are JSON:
//
//	{"error": {"code": "not_found", "message": "project \"p\": not found"}}
//
// with the HTTP status and the stable code of the error's kind (package
// errdefs); writeError is the one place that mapping happens.
package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"
)

// Core is what the API needs from envd's service core. *envd.Service
// implements it. Every method but Authenticate acts for the principal the
// request's token belongs to.
type Core interface {
	// Authenticate returns the principal a bearer token belongs to, or an
	// error of kind errdefs.ErrUnauthenticated.
	Authenticate(ctx context.Context, token string) (types.Principal, error)
	Info(ctx context.Context) (types.Info, error)
	// ImportImage stores a base image from a tar stream (plain or gzip).
	ImportImage(ctx context.Context, p types.Principal, name string, tarball io.Reader) (types.Image, error)
	ListImages(ctx context.Context, p types.Principal) ([]types.Image, error)
	// CreateProject creates a project. A repeated call with the same
	// non-empty idempotencyKey and request returns the same project; with a
	// different request it is an errdefs.ErrIdempotencyReuse.
	CreateProject(ctx context.Context, p types.Principal, req types.CreateProjectRequest, idempotencyKey string) (types.Project, error)
	ListProjects(ctx context.Context, p types.Principal) ([]types.Project, error)
	GetProject(ctx context.Context, p types.Principal, name string) (types.Project, error)
	DeleteProject(ctx context.Context, p types.Principal, name string) error
	// CreateInstance starts an instance; idempotencyKey as for CreateProject.
	CreateInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, idempotencyKey string) (types.Instance, error)
	// Migrate starts an operation of kind "migrate".
	Migrate(ctx context.Context, p types.Principal, project string, req types.MigrateRequest, idempotencyKey string) (types.Operation, error)
	// Build starts an operation of kind "build".
	Build(ctx context.Context, p types.Principal, project string, req types.BuildRequest, idempotencyKey string) (types.Operation, error)
	// SetRetention sets a project's version retention policy.
	SetRetention(ctx context.Context, p types.Principal, project string, r types.Retention) (types.Project, error)
	// SetProjectLimits replaces a project's resource limits.
	SetProjectLimits(ctx context.Context, p types.Principal, project string, l types.Limits) (types.Project, error)
	// SetProjectNetwork sets a project's network policy (egress, isolation).
	SetProjectNetwork(ctx context.Context, p types.Principal, project string, n types.ProjectNetwork) (types.Project, error)
	// SetQuota sets a tenant's quota (admin only).
	SetQuota(ctx context.Context, p types.Principal, tenant string, q types.Quota) (types.Quota, error)
	// Usage reports a tenant's usage and quota ("" = the caller's).
	Usage(ctx context.Context, p types.Principal, tenant string) (types.Usage, error)
	// CreateToken creates an API token of a tenant (admin only).
	CreateToken(ctx context.Context, p types.Principal, tenant string, req types.CreateTokenRequest) (types.Token, error)
	// GC starts an operation of kind "gc" (admin only).
	GC(ctx context.Context, p types.Principal, req types.GCRequest, idempotencyKey string) (types.Operation, error)
	// Restore starts an instance as an operation of kind "restore" (POST
	// .../instances with Prefer: respond-async).
	Restore(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, idempotencyKey string) (types.Operation, error)
	// ListInstances lists the instances of project, of all projects when
	// project is "".
	ListInstances(ctx context.Context, p types.Principal, project string) ([]types.Instance, error)
	GetInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
	DeleteInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
	// StopInstance, StartInstance, PauseInstance and ResumeInstance move
	// the instance through its lifecycle; an illegal transition is an
	// errdefs.ErrFailedPrecondition whose details hold the current "state".
	StopInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
	StartInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
	PauseInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
	ResumeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
	// RenewInstance sets the instance's expiry to now + ttl ("none": never).
	RenewInstance(ctx context.Context, p types.Principal, id, ttl string) (types.Instance, error)
	// Metrics is the Prometheus text exposition of the node (admin only).
	Metrics(ctx context.Context, p types.Principal) (string, error)
	HibernateInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
	ListVolumes(ctx context.Context, p types.Principal, project string) ([]types.Volume, error)
	AddVolume(ctx context.Context, p types.Principal, project string, req types.AddVolumeRequest) (types.Project, error)
	RemoveVolume(ctx context.Context, p types.Principal, project, name string) (types.Project, error)
	ArchiveVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.VolumeArchive, error)
	RestoreVolume(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.Volume, error)
	Exec(ctx context.Context, p types.Principal, id string, req types.ExecRequest) (types.ExecResult, error)
	// ExecStream runs a command with its streams connected to stdio and
	// returns its exit code when it ends; canceling ctx kills it.
	ExecStream(ctx context.Context, p types.Principal, id string, req types.ExecRequest, stdio types.Stdio) (int, error)
	// Save starts a save operation. A repeated call with the same non-empty
	// idempotencyKey returns the same operation.
	Save(ctx context.Context, p types.Principal, id string, req types.SaveRequest, idempotencyKey string) (types.Operation, error)
	ListVersions(ctx context.Context, p types.Principal, project string) ([]types.Version, error)
	GetVersion(ctx context.Context, p types.Principal, project string, n int) (types.Version, error)
	// SetCurrent moves the project's current version by compare-and-swap; a
	// lost swap is an errdefs.ErrConflict.
	SetCurrent(ctx context.Context, p types.Principal, project string, req types.SetCurrentRequest) (types.Project, error)
	PinVersion(ctx context.Context, p types.Principal, project string, n int, pinned bool) (types.Version, error)
	GetOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error)
	CancelOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error)
	// OperationEvents returns the operation's events with Seq > after, in
	// order.
	OperationEvents(ctx context.Context, p types.Principal, id string, after int) ([]types.Event, error)

	// Tenant isolation: tokens (tokens.go) and volume archives (archives.go).
	TokenCore
	ArchiveCore
}

// MaxJSONBody is the largest JSON request body accepted. Image uploads are
// not limited.
const MaxJSONBody = 1 << 20

type options struct {
	accessLog    io.Writer
	errorLog     io.Writer
	pollInterval time.Duration
	keepAlive    time.Duration
}

// Option configures New.
type Option func(*options) error

// WithAccessLog writes one line per request to w. Default: no access log.
func WithAccessLog(w io.Writer) Option {
	return func(o *options) error {
		if w == nil {
			return errors.New("access log writer is nil")
		}
		o.accessLog = w
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

// New returns the API's HTTP handler. It panics on an invalid option, which
// is a programming error.
func New(core Core, opts ...Option) http.Handler {
	o := options{
		errorLog:     gin.DefaultErrorWriter,
		pollInterval: 200 * time.Millisecond,
		keepAlive:    15 * time.Second,
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			panic(fmt.Sprintf("api.New: %v", err))
		}
	}
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	e.HandleMethodNotAllowed = false
	e.ContextWithFallback = true
	_ = e.SetTrustedProxies(nil)
	if o.accessLog != nil {
		e.Use(gin.LoggerWithWriter(o.accessLog))
	}
	e.Use(gin.CustomRecoveryWithWriter(o.errorLog, func(c *gin.Context, rec any) {
		writeError(c, fmt.Errorf("internal error: %v", rec))
	}))
	e.NoRoute(func(c *gin.Context) {
		writeError(c, fmt.Errorf("no route %s %s: %w", c.Request.Method, c.Request.URL.Path, errNotFound))
	})

	h := &handlers{core: core, opts: o}
	e.GET("/healthz", func(c *gin.Context) { c.JSON(http.StatusOK, gin.H{"status": "ok"}) })
	e.GET("/metrics", h.authenticate, h.metrics)
	v1 := e.Group("/v1", h.authenticate, h.checkIdempotencyKey)
	for _, r := range h.routes() {
		v1.Handle(r.method, r.path, r.handler)
	}
	return e
}

// route is one entry of the /v1 route table.
type route struct {
	method  string
	path    string // relative to /v1
	handler gin.HandlerFunc
}

// routes is the /v1 route table. Adding a route is adding a line.
func (h *handlers) routes() []route {
	return []route{
		{http.MethodGet, "/info", h.info},

		{http.MethodPost, "/images", h.importImage},
		{http.MethodGet, "/images", h.listImages},

		{http.MethodPost, "/projects", h.createProject},
		{http.MethodGet, "/projects", h.listProjects},
		{http.MethodGet, "/projects/:p", h.getProject},
		{http.MethodDelete, "/projects/:p", h.deleteProject},

		{http.MethodPost, "/projects/:p/instances", h.createInstance},
		{http.MethodGet, "/projects/:p/instances", h.listInstances},
		{http.MethodGet, "/instances", h.listInstances},
		{http.MethodGet, "/instances/:i", h.getInstance},
		{http.MethodDelete, "/instances/:i", h.deleteInstance},
		{http.MethodPost, "/instances/:i/stop", h.instanceVerb(h.core.StopInstance)},
		{http.MethodPost, "/instances/:i/start", h.instanceVerb(h.core.StartInstance)},
		{http.MethodPost, "/instances/:i/pause", h.instanceVerb(h.core.PauseInstance)},
		{http.MethodPost, "/instances/:i/resume", h.instanceVerb(h.core.ResumeInstance)},
		{http.MethodPost, "/instances/:i/renew", h.renew},
		{http.MethodPost, "/instances/:i/exec", h.exec},
		{http.MethodGet, "/instances/:i/exec/ws", h.execWebSocket},
		{http.MethodPost, "/instances/:i/save", h.save},

		{http.MethodPost, "/instances/:i/hibernate", h.instanceVerb(h.core.HibernateInstance)},

		{http.MethodGet, "/projects/:p/volumes", h.listVolumes},
		{http.MethodPost, "/projects/:p/volumes", h.addVolume},
		{http.MethodDelete, "/projects/:p/volumes/:v", h.removeVolume},
		{http.MethodPost, "/projects/:p/volumes/:v/archive", h.archiveVolume},
		{http.MethodPost, "/projects/:p/volumes/:v/restore", h.restoreVolume},

		{http.MethodGet, "/projects/:p/versions", h.listVersions},
		{http.MethodGet, "/projects/:p/versions/:n", h.getVersion},
		{http.MethodPost, "/projects/:p/current", h.setCurrent},
		{http.MethodPut, "/projects/:p/retention", h.setRetention},
		{http.MethodPut, "/projects/:p/limits", h.setProjectLimits},
		{http.MethodPut, "/projects/:p/network", h.setProjectNetwork},
		{http.MethodPost, "/projects/:p/builds", h.build},
		{http.MethodPost, "/projects/:p/migrations", h.migrate},
		{http.MethodPost, "/admin/gc", h.gc},
		{http.MethodPost, "/admin/tenants/:t/tokens", h.createToken},
		{http.MethodPut, "/admin/tenants/:t/quota", h.setQuota},
		{http.MethodGet, "/admin/tenants/:t/usage", h.usage},
		{http.MethodGet, "/usage", h.usage},
		{http.MethodPost, "/projects/:p/versions/:n/pin", h.pin(true)},
		{http.MethodDelete, "/projects/:p/versions/:n/pin", h.pin(false)},

		{http.MethodGet, "/operations/:id", h.getOperation},
		{http.MethodDelete, "/operations/:id", h.cancelOperation},
		{http.MethodGet, "/operations/:id/events", h.operationEvents},

		// Tenant isolation: tokens and volume archives.
		{http.MethodGet, "/admin/tokens", h.listTokens(true)},
		{http.MethodGet, "/admin/tenants/:t/tokens", h.listTokens(true)},
		{http.MethodDelete, "/admin/tokens/:id", h.revokeToken(true)},
		{http.MethodGet, "/tokens", h.listTokens(false)},
		{http.MethodDelete, "/tokens/:id", h.revokeToken(false)},
		{http.MethodGet, "/projects/:p/archives", h.listArchives},
		{http.MethodGet, "/projects/:p/volumes/:v/archives", h.listArchives},
		{http.MethodDelete, "/projects/:p/volumes/:v/archives/:name", h.deleteArchive},
	}
}
