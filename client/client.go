// Package client is a typed Go client for envd's HTTP API (package api).
//
// Every method maps to one route and returns the envd types. An error
// answer of the server is a *Error, which also matches the errdefs kind of
// its code:
//
//	_, err := c.GetProject(ctx, "web")
//	if errors.Is(err, errdefs.ErrNotFound) { ... }
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
)

// Client talks to one envd server. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	options
}

type options struct {
	hc           *http.Client
	userAgent    string
	pollInterval time.Duration
	tls          *tls.Config // nil = the transport's own
}

// Option configures New; it fails on an invalid value.
type Option func(*options) error

// WithHTTPClient sets the HTTP client. Default: a client without a timeout
// (event streams are long); bound calls with their context.
func WithHTTPClient(hc *http.Client) Option {
	return func(o *options) error {
		if hc == nil {
			return errors.New("http client is nil")
		}
		o.hc = hc
		return nil
	}
}

// WithUserAgent sets the User-Agent header. Default: "envd-client".
func WithUserAgent(ua string) Option {
	return func(o *options) error {
		if ua == "" {
			return errors.New("user agent is empty")
		}
		o.userAgent = ua
		return nil
	}
}

// WithPollInterval sets how often WaitOperation polls when the event stream
// cannot be used, and the base of its reconnect back-off. Default: 500ms.
func WithPollInterval(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("poll interval %v: must be positive", d)
		}
		o.pollInterval = d
		return nil
	}
}

// New returns a client for the server at baseURL (for example
// "http://127.0.0.1:43123") that authenticates with token, or the error of
// the first invalid option.
func New(baseURL, token string, opts ...Option) (*Client, error) {
	o := options{
		hc:           &http.Client{},
		userAgent:    "envd-client",
		pollInterval: 500 * time.Millisecond,
	}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
	}
	if o.tls != nil {
		hc, err := withTLS(o.hc, o.tls)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		o.hc = hc
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, options: o}, nil
}

// BaseURL returns the server's base URL.
func (c *Client) BaseURL() string { return c.base }

// statusCodes gives a code to error answers without a JSON body (proxies).
var statusCodes = map[int]string{
	http.StatusBadRequest:                  "invalid_argument",
	http.StatusUnauthorized:                "unauthenticated",
	http.StatusForbidden:                   "permission_denied",
	http.StatusNotFound:                    "not_found",
	http.StatusConflict:                    "conflict",
	http.StatusBadGateway:                  "unavailable",
	http.StatusServiceUnavailable:          "unavailable",
	http.StatusGatewayTimeout:              "deadline_exceeded",
	http.StatusInsufficientStorage:         "quota_exceeded",
	http.StatusTooManyRequests:             "resource_exhausted",
	http.StatusRequestHeaderFieldsTooLarge: "invalid_argument",
	http.StatusRequestEntityTooLarge:       "too_large",
}

func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var body types.ErrorBody
	if err := json.Unmarshal(b, &body); err == nil && body.Error.Code != "" {
		return &types.Error{Status: resp.StatusCode, Code: body.Error.Code, Message: body.Error.Message, Details: body.Error.Details, RequestID: body.Error.RequestID}
	}
	code, ok := statusCodes[resp.StatusCode]
	if !ok {
		code = "internal"
	}
	msg := strings.TrimSpace(string(b))
	if msg == "" || len(msg) > 200 {
		msg = resp.Status
	}
	// Not envd's answer (a proxy's, say); the header is there when envd's.
	return &types.Error{Status: resp.StatusCode, Code: code, Message: msg, RequestID: resp.Header.Get("X-Request-Id")}
}

// request is one API call.
type request struct {
	method      string
	path        string // escaped, relative to /v1 or absolute when it starts with "/healthz"
	query       url.Values
	header      http.Header
	body        io.Reader
	contentType string
}

func (c *Client) newRequest(ctx context.Context, r request) (*http.Request, error) {
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, r.body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	if req.Header.Get("Accept") == "" {
		req.Header.Set("Accept", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("User-Agent", c.userAgent)
	return req, nil
}

// send performs r and returns the response when its status is 2xx; any
// other status is decoded into an *Error.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	req, err := c.newRequest(ctx, r)
	if err != nil {
		return nil, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// call sends a JSON body (when in is not nil) and decodes the JSON answer
// into out (when out is not nil).
func (c *Client) call(ctx context.Context, method, path string, in, out any, header http.Header) error {
	r := request{method: method, path: path, header: header}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		r.body, r.contentType = bytes.NewReader(b), "application/json"
	}
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w", method, path, err)
	}
	return nil
}

// sendDecode sends r and decodes its JSON answer; what names the call in
// a decode error.
func sendDecode[T any](ctx context.Context, c *Client, r request, what string) (T, error) {
	var v T
	resp, err := c.send(ctx, r)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return v, fmt.Errorf("%s: decode response: %w", what, err)
	}
	return v, nil
}

func get[T any](ctx context.Context, c *Client, path string) (T, error) {
	var v T
	err := c.call(ctx, http.MethodGet, path, nil, &v, nil)
	return v, err
}

func post[T any](ctx context.Context, c *Client, method, path string, in any) (T, error) {
	var v T
	err := c.call(ctx, method, path, in, &v, nil)
	return v, err
}

func esc(s string) string { return url.PathEscape(s) }

// Healthz checks that the server answers.
func (c *Client) Healthz(ctx context.Context) error {
	return c.call(ctx, http.MethodGet, "/healthz", nil, nil, nil)
}

// Info describes the server: GET /v1/info.
func (c *Client) Info(ctx context.Context) (types.Info, error) {
	return get[types.Info](ctx, c, "/v1/info")
}

// ImportImage uploads a base image as a tar stream, plain or gzip
// compressed: POST /v1/images?name=NAME.
func (c *Client) ImportImage(ctx context.Context, name string, tarball io.Reader) (types.Image, error) {
	br := bufio.NewReader(tarball)
	ct := "application/x-tar"
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		ct = "application/gzip"
	}
	return sendDecode[types.Image](ctx, c, request{
		method: http.MethodPost, path: "/v1/images", query: url.Values{"name": {name}},
		body: br, contentType: ct,
	}, fmt.Sprintf("import image %q", name))
}

// PullImage imports the image ref from another OCI registry, which the
// server reaches: POST /v1/images?name=NAME&ref=REF.
func (c *Client) PullImage(ctx context.Context, name, ref string) (types.Image, error) {
	return sendDecode[types.Image](ctx, c, request{method: http.MethodPost, path: "/v1/images", query: url.Values{"name": {name}, "ref": {ref}}},
		fmt.Sprintf("import image %q", name))
}

// ExportVersion writes version n of project as a tar of an OCI image
// layout to w (GET /v1/projects/{p}/versions/{n}/export) and returns the
// bytes written. A stream cut by the server is an error, never a short tar.
func (c *Client) ExportVersion(ctx context.Context, project string, n int, w io.Writer) (int64, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: "/v1/projects/" + esc(project) + "/versions/" + strconv.Itoa(n) + "/export"})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	written, err := io.Copy(w, resp.Body)
	if err != nil {
		return written, fmt.Errorf("export version %d of %q: %w", n, project, err)
	}
	return written, nil
}

// ListImages lists the imported base images: GET /v1/images.
func (c *Client) ListImages(ctx context.Context) ([]types.Image, error) {
	return get[[]types.Image](ctx, c, "/v1/images")
}

// RequestOption sets something on one request.
type RequestOption func(*requestOptions)

type requestOptions struct {
	header http.Header
}

// WithIdempotencyKey sends key as the Idempotency-Key header: a retry of
// the request with the same key and body returns the same object or
// operation, while the same key with a different body fails with code
// idempotency_key_reused (errdefs.ErrIdempotencyReuse). Default: no key,
// every request creates anew. An empty key sends nothing.
func WithIdempotencyKey(key string) RequestOption {
	return func(o *requestOptions) {
		if key != "" {
			o.header.Set("Idempotency-Key", key)
		}
	}
}

func headerOf(opts []RequestOption) http.Header {
	o := requestOptions{header: http.Header{}}
	for _, opt := range opts {
		opt(&o)
	}
	return o.header
}

// CreateProject: POST /v1/projects.
func (c *Client) CreateProject(ctx context.Context, req types.CreateProjectRequest, opts ...RequestOption) (types.Project, error) {
	var p types.Project
	err := c.call(ctx, http.MethodPost, "/v1/projects", req, &p, headerOf(opts))
	return p, err
}

// ListProjects: GET /v1/projects.
func (c *Client) ListProjects(ctx context.Context) ([]types.Project, error) {
	return get[[]types.Project](ctx, c, "/v1/projects")
}

// GetProject: GET /v1/projects/{p}.
func (c *Client) GetProject(ctx context.Context, name string) (types.Project, error) {
	return get[types.Project](ctx, c, "/v1/projects/"+esc(name))
}

// DeleteProject: DELETE /v1/projects/{p}.
func (c *Client) DeleteProject(ctx context.Context, name string) error {
	return c.call(ctx, http.MethodDelete, "/v1/projects/"+esc(name), nil, nil, nil)
}

// CreateInstance starts an instance of project and returns it running (or
// failed): POST /v1/projects/{p}/instances.
func (c *Client) CreateInstance(ctx context.Context, project string, req types.CreateInstanceRequest, opts ...RequestOption) (types.Instance, error) {
	var in types.Instance
	err := c.call(ctx, http.MethodPost, "/v1/projects/"+esc(project)+"/instances", req, &in, headerOf(opts))
	return in, err
}

// Migrate starts a migration of project's current version onto another
// base image: POST /v1/projects/{p}/migrations. The operation's result is
// an types.MigrateResult.
func (c *Client) Migrate(ctx context.Context, project string, req types.MigrateRequest, opts ...RequestOption) (types.Operation, error) {
	var op types.Operation
	err := c.call(ctx, http.MethodPost, "/v1/projects/"+esc(project)+"/migrations", req, &op, headerOf(opts))
	return op, err
}

// Build starts a build of packages on a version of project: POST
// /v1/projects/{p}/builds. The operation's result is an types.BuildResult.
func (c *Client) Build(ctx context.Context, project string, req types.BuildRequest, opts ...RequestOption) (types.Operation, error) {
	var op types.Operation
	err := c.call(ctx, http.MethodPost, "/v1/projects/"+esc(project)+"/builds", req, &op, headerOf(opts))
	return op, err
}

// SetRetention sets a project's version retention policy: PUT
// /v1/projects/{p}/retention. An empty policy keeps every version.
func (c *Client) SetRetention(ctx context.Context, project string, r types.Retention) (types.Project, error) {
	return post[types.Project](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/retention", r)
}

// SetQuota sets a tenant's quota (admin token): PUT
// /v1/admin/tenants/{t}/quota. Zero fields are no limit.
func (c *Client) SetQuota(ctx context.Context, tenant string, q types.Quota) (types.Quota, error) {
	return post[types.Quota](ctx, c, http.MethodPut, "/v1/admin/tenants/"+esc(tenant)+"/quota", q)
}

// Usage reports a tenant's usage and quota: GET /v1/usage for the caller's
// own (tenant ""), GET /v1/admin/tenants/{t}/usage for another (admin).
func (c *Client) Usage(ctx context.Context, tenant string) (types.Usage, error) {
	if tenant == "" {
		return get[types.Usage](ctx, c, "/v1/usage")
	}
	return get[types.Usage](ctx, c, "/v1/admin/tenants/"+esc(tenant)+"/usage")
}

// CreateToken creates an API token of a tenant (admin token): POST
// /v1/admin/tenants/{t}/tokens. The token is shown only here.
func (c *Client) CreateToken(ctx context.Context, tenant string, req types.CreateTokenRequest) (types.Token, error) {
	return post[types.Token](ctx, c, http.MethodPost, "/v1/admin/tenants/"+esc(tenant)+"/tokens", req)
}

// GC starts a garbage collection (admin token): POST /v1/admin/gc. The
// operation's result is an types.GCResult.
func (c *Client) GC(ctx context.Context, req types.GCRequest, opts ...RequestOption) (types.Operation, error) {
	var op types.Operation
	err := c.call(ctx, http.MethodPost, "/v1/admin/gc", req, &op, headerOf(opts))
	return op, err
}

// Restore starts an instance as an operation of kind "restore": POST
// /v1/projects/{p}/instances with Prefer: respond-async. The operation's
// target is the new instance's id; its result, once it succeeds, is the
// running instance (an types.Instance in its Result). What CreateInstance
// refuses is refused here too, as an *Error, before any operation exists.
func (c *Client) Restore(ctx context.Context, project string, req types.CreateInstanceRequest, opts ...RequestOption) (types.Operation, error) {
	h := headerOf(opts)
	h.Set("Prefer", "respond-async")
	var op types.Operation
	err := c.call(ctx, http.MethodPost, "/v1/projects/"+esc(project)+"/instances", req, &op, h)
	return op, err
}

// ListInstances lists the instances of project, of all projects when
// project is "": GET /v1/projects/{p}/instances or GET /v1/instances.
func (c *Client) ListInstances(ctx context.Context, project string) ([]types.Instance, error) {
	if project == "" {
		return get[[]types.Instance](ctx, c, "/v1/instances")
	}
	return get[[]types.Instance](ctx, c, "/v1/projects/"+esc(project)+"/instances")
}

// GetInstance: GET /v1/instances/{i}.
func (c *Client) GetInstance(ctx context.Context, id string) (types.Instance, error) {
	return get[types.Instance](ctx, c, "/v1/instances/"+esc(id))
}

// DeleteInstance: DELETE /v1/instances/{i}.
func (c *Client) DeleteInstance(ctx context.Context, id string) (types.Instance, error) {
	return post[types.Instance](ctx, c, http.MethodDelete, "/v1/instances/"+esc(id), nil)
}

// Exec runs a command in the instance and returns its output and exit code:
// POST /v1/instances/{i}/exec. A non-zero exit code is not an error.
func (c *Client) Exec(ctx context.Context, id string, req types.ExecRequest) (types.ExecResult, error) {
	return post[types.ExecResult](ctx, c, http.MethodPost, "/v1/instances/"+esc(id)+"/exec", req)
}

// Save starts saving the instance as a new version and returns the
// operation: POST /v1/instances/{i}/save. A non-empty idempotencyKey makes
// retries return the same operation. Follow it with WaitOperation.
func (c *Client) Save(ctx context.Context, id string, req types.SaveRequest, idempotencyKey string) (types.Operation, error) {
	var h http.Header
	if idempotencyKey != "" {
		h = http.Header{"Idempotency-Key": {idempotencyKey}}
	}
	var op types.Operation
	err := c.call(ctx, http.MethodPost, "/v1/instances/"+esc(id)+"/save", req, &op, h)
	return op, err
}

// Fork starts an operation of kind "fork" (POST /v1/instances/{i}/fork):
// the instance is saved as a version that is not current and a second
// instance starts from it; the result is a types.ForkResult.
func (c *Client) Fork(ctx context.Context, id string, req types.ForkRequest, idempotencyKey string) (types.Operation, error) {
	var h http.Header
	if idempotencyKey != "" {
		h = http.Header{"Idempotency-Key": {idempotencyKey}}
	}
	var op types.Operation
	err := c.call(ctx, http.MethodPost, "/v1/instances/"+esc(id)+"/fork", req, &op, h)
	return op, err
}

// instanceAction posts an instance lifecycle verb. An illegal transition
// is an *Error with code failed_precondition (errdefs.ErrFailedPrecondition)
// and the current state in Details["state"].
func (c *Client) instanceAction(ctx context.Context, id, action string, body any) (types.Instance, error) {
	return post[types.Instance](ctx, c, http.MethodPost, "/v1/instances/"+esc(id)+"/"+action, body)
}

// InstanceVerb posts the plain verb called name (an entry of
// types.InstanceVerbs, such as "pause") on instance id and answers the
// instance: POST /v1/instances/{i}/{name}. A name the server does not
// serve is an *Error with code not_found.
func (c *Client) InstanceVerb(ctx context.Context, id, name string) (types.Instance, error) {
	return c.instanceAction(ctx, id, esc(name), nil)
}

// StopInstance kills the instance's processes and keeps its writable layer
// (state Stopped): POST /v1/instances/{i}/stop.
func (c *Client) StopInstance(ctx context.Context, id string) (types.Instance, error) {
	return c.InstanceVerb(ctx, id, "stop")
}

// StartInstance starts a stopped instance with a new generation:
// POST /v1/instances/{i}/start.
func (c *Client) StartInstance(ctx context.Context, id string) (types.Instance, error) {
	return c.InstanceVerb(ctx, id, "start")
}

// PauseInstance freezes the instance's processes, memory kept:
// POST /v1/instances/{i}/pause.
func (c *Client) PauseInstance(ctx context.Context, id string) (types.Instance, error) {
	return c.InstanceVerb(ctx, id, "pause")
}

// ResumeInstance thaws a paused instance; the answer carries its current
// address: POST /v1/instances/{i}/resume.
func (c *Client) ResumeInstance(ctx context.Context, id string) (types.Instance, error) {
	return c.InstanceVerb(ctx, id, "resume")
}

// RenewInstance sets the instance's expiry to now + ttl, a Go duration (it
// may shorten it), or removes it with "none": POST /v1/instances/{i}/renew.
func (c *Client) RenewInstance(ctx context.Context, id, ttl string) (types.Instance, error) {
	return c.instanceAction(ctx, id, "renew", types.RenewRequest{TTL: ttl})
}

// HibernateInstance saves a stopped retained instance's layer as a version
// and frees it on the node: POST /v1/instances/{i}/hibernate.
func (c *Client) HibernateInstance(ctx context.Context, id string) (types.Instance, error) {
	return c.instanceAction(ctx, id, "hibernate", nil)
}

// HibernateInstanceWith is HibernateInstance with options: with
// req.Memory a Running instance is hibernated with its processes, which
// any access resumes (memory_checkpoint_unsupported where they cannot be
// kept): POST /v1/instances/{i}/hibernate.
func (c *Client) HibernateInstanceWith(ctx context.Context, id string, req types.HibernateRequest) (types.Instance, error) {
	return c.instanceAction(ctx, id, "hibernate", req)
}

// ListVolumes lists a project's volumes with their usage:
// GET /v1/projects/{p}/volumes.
func (c *Client) ListVolumes(ctx context.Context, project string) ([]types.Volume, error) {
	return get[[]types.Volume](ctx, c, "/v1/projects/"+esc(project)+"/volumes")
}

// AddVolume declares a volume: POST /v1/projects/{p}/volumes.
func (c *Client) AddVolume(ctx context.Context, project string, req types.AddVolumeRequest) (types.Project, error) {
	return post[types.Project](ctx, c, http.MethodPost, "/v1/projects/"+esc(project)+"/volumes", req)
}

// RemoveVolume removes a volume and its data: DELETE /v1/projects/{p}/volumes/{v}.
func (c *Client) RemoveVolume(ctx context.Context, project, name string) (types.Project, error) {
	return post[types.Project](ctx, c, http.MethodDelete, "/v1/projects/"+esc(project)+"/volumes/"+esc(name), nil)
}

// ArchiveVolume copies a volume to object storage:
// POST /v1/projects/{p}/volumes/{v}/archive.
func (c *Client) ArchiveVolume(ctx context.Context, project, name string, req types.VolumeArchiveRequest) (types.VolumeArchive, error) {
	return post[types.VolumeArchive](ctx, c, http.MethodPost, "/v1/projects/"+esc(project)+"/volumes/"+esc(name)+"/archive", req)
}

// RestoreVolume replaces a volume's content on the node with an archive:
// POST /v1/projects/{p}/volumes/{v}/restore.
func (c *Client) RestoreVolume(ctx context.Context, project, name string, req types.VolumeArchiveRequest) (types.Volume, error) {
	return post[types.Volume](ctx, c, http.MethodPost, "/v1/projects/"+esc(project)+"/volumes/"+esc(name)+"/restore", req)
}

// ListVersions: GET /v1/projects/{p}/versions.
func (c *Client) ListVersions(ctx context.Context, project string) ([]types.Version, error) {
	return get[[]types.Version](ctx, c, "/v1/projects/"+esc(project)+"/versions")
}

// GetVersion: GET /v1/projects/{p}/versions/{n}.
func (c *Client) GetVersion(ctx context.Context, project string, n int) (types.Version, error) {
	return get[types.Version](ctx, c, "/v1/projects/"+esc(project)+"/versions/"+strconv.Itoa(n))
}

// VersionChanges tells what changed from version against (0: n's parent)
// to version n: GET /v1/projects/{p}/versions/{n}/changes. limit 0 is the
// server's default.
func (c *Client) VersionChanges(ctx context.Context, project string, n, against, limit int) (types.Changes, error) {
	q := url.Values{}
	if against > 0 {
		q.Set("against", strconv.Itoa(against))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	p := "/v1/projects/" + esc(project) + "/versions/" + strconv.Itoa(n) + "/changes"
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return get[types.Changes](ctx, c, p)
}

// InstanceChanges tells what a save of the instance would capture now:
// GET /v1/instances/{i}/changes. limit 0 is the server's default.
func (c *Client) InstanceChanges(ctx context.Context, id string, limit int) (types.Changes, error) {
	p := "/v1/instances/" + esc(id) + "/changes"
	if limit > 0 {
		p += "?limit=" + strconv.Itoa(limit)
	}
	return get[types.Changes](ctx, c, p)
}

// SetCurrent moves the project's current version by compare-and-swap:
// POST /v1/projects/{p}/current. A lost swap matches errdefs.ErrConflict.
func (c *Client) SetCurrent(ctx context.Context, project string, req types.SetCurrentRequest) (types.Project, error) {
	return post[types.Project](ctx, c, http.MethodPost, "/v1/projects/"+esc(project)+"/current", req)
}

// PinVersion keeps the version from retention:
// POST /v1/projects/{p}/versions/{n}/pin.
func (c *Client) PinVersion(ctx context.Context, project string, n int) (types.Version, error) {
	return post[types.Version](ctx, c, http.MethodPost, "/v1/projects/"+esc(project)+"/versions/"+strconv.Itoa(n)+"/pin", nil)
}

// UnpinVersion: DELETE /v1/projects/{p}/versions/{n}/pin.
func (c *Client) UnpinVersion(ctx context.Context, project string, n int) (types.Version, error) {
	return post[types.Version](ctx, c, http.MethodDelete, "/v1/projects/"+esc(project)+"/versions/"+strconv.Itoa(n)+"/pin", nil)
}

// GetOperation: GET /v1/operations/{id}.
func (c *Client) GetOperation(ctx context.Context, id string) (types.Operation, error) {
	return get[types.Operation](ctx, c, "/v1/operations/"+esc(id))
}

// CancelOperation asks for the operation to stop: DELETE /v1/operations/{id}.
// The answer is the operation as it is now; follow it to see it end.
func (c *Client) CancelOperation(ctx context.Context, id string) (types.Operation, error) {
	return post[types.Operation](ctx, c, http.MethodDelete, "/v1/operations/"+esc(id), nil)
}

// OperationEvents returns the operation's events with Seq > after, without
// waiting: GET /v1/operations/{id}/events (as JSON).
func (c *Client) OperationEvents(ctx context.Context, id string, after int) ([]types.Event, error) {
	return get[[]types.Event](ctx, c, "/v1/operations/"+esc(id)+"/events?after="+strconv.Itoa(after))
}

var errStreamEnded = errors.New("event stream ended before the operation was done")
