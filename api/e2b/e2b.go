// Package e2b serves envd as an E2B-compatible sandbox service, so that the
// official E2B SDKs run against an envd node with only their API URL,
// sandbox URL and key pointed at it (docs/api.md, "E2B compatibility").
//
// Everything is served under one path prefix of the node (Prefix):
//   - the REST control plane of E2B's API (POST /sandboxes, GET
//     /v2/sandboxes, ...), authenticated by X-API-Key (an envd token);
//   - the protocol of E2B's in-sandbox daemon: the Connect RPC services
//     process.Process and filesystem.Filesystem (JSON codec) and plain HTTP
//     /files and /health, authenticated by X-Access-Token (the envd token
//     again: create answers it as envdAccessToken) and addressed to one
//     sandbox by the E2b-Sandbox-Id header the SDKs send on every call.
//
// Like api/mcp, the package is a client of envd's own HTTP API (package
// client) with the caller's token, so it sees exactly what the caller's
// tenant sees: another tenant's sandbox answers 404 as on the API. Its only
// other part is a small store of what E2B has and envd does not (the
// template name and metadata of a sandbox), handed in as Store.
//
// Mapping: templates are projects of the caller's tenant ("name", or
// "name:N" for version N); sandboxes are instances; timeouts are instance
// TTLs (set timeout = renew); kill = delete; pause = hibernate (files kept,
// memory not); resume/connect = start + renew; commands are envd execs;
// files are envd's file API.
package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
)

// Prefix is where the node serves the E2B API: point the SDK's API URL
// (E2B_API_URL) and sandbox URL (E2B_SANDBOX_URL) at <node URL>/e2b.
const Prefix = "/e2b"

// EnvdVersion is the E2B daemon version the sandboxes announce. The SDKs
// enable features by it: 0.5.7 means stdin close (0.5.2) and octet-stream
// uploads (0.5.7) work, and makes the SDK itself refuse what needs newer
// daemons (file metadata 0.6.2, watch events with entries 0.6.3).
const EnvdVersion = "0.5.7"

// Envd is the part of envd's API the E2B surface uses; *client.Client is
// one, made with the caller's token.
type Envd interface {
	Info(ctx context.Context) (types.Info, error)
	GetProject(ctx context.Context, name string) (types.Project, error)
	CreateInstance(ctx context.Context, project string, req types.CreateInstanceRequest, opts ...client.RequestOption) (types.Instance, error)
	ListInstances(ctx context.Context, project string) ([]types.Instance, error)
	GetInstance(ctx context.Context, id string) (types.Instance, error)
	DeleteInstance(ctx context.Context, id string) (types.Instance, error)
	StartInstance(ctx context.Context, id string) (types.Instance, error)
	StopInstance(ctx context.Context, id string) (types.Instance, error)
	RenewInstance(ctx context.Context, id, ttl string) (types.Instance, error)
	HibernateInstance(ctx context.Context, id string) (types.Instance, error)
	HibernateInstanceWith(ctx context.Context, id string, req types.HibernateRequest) (types.Instance, error)
	ExecStream(ctx context.Context, id string, req types.ExecRequest, stdio types.Stdio) (int, error)
	ListFilesPage(ctx context.Context, id, path string, page types.Page, opts ...client.FileOption) (types.FileList, error)
	ReadFile(ctx context.Context, id, path string, offset, length int64, opts ...client.FileOption) (*client.FileReader, error)
	WriteFile(ctx context.Context, id, path string, content io.Reader, opts ...client.FileOption) (types.FileInfo, error)
	DeleteFile(ctx context.Context, id, path string, opts ...client.FileOption) error
	MakeDir(ctx context.Context, id string, req types.FileMkdirRequest, opts ...client.FileOption) (types.FileInfo, error)
	MoveFile(ctx context.Context, id string, req types.FileMoveRequest, opts ...client.FileOption) (types.FileInfo, error)
	WatchFilesStarted(ctx context.Context, id, path string, started func(), fn func(types.FileEvent) error, opts ...client.FileOption) error
}

// NewClient makes a client of envd's API that authenticates with token.
type NewClient func(token string) (Envd, error)

// Sandbox is what E2B keeps of a sandbox that envd's instance does not
// have.
type Sandbox struct {
	Template string            // as the caller named it ("base", "base:3")
	Metadata map[string]string // the caller's key-value pairs
	Env      map[string]string // envVars: every command's environment
}

// Store keeps Sandbox records by instance id. The caller has always
// checked the instance is the tenant's (through the API) before it asks,
// so the store needs no tenant. A record goes with its instance.
type Store interface {
	PutE2BSandbox(ctx context.Context, instanceID string, s Sandbox) error
	E2BSandboxes(ctx context.Context, instanceIDs []string) (map[string]Sandbox, error)
}

// Server serves the E2B API. Make it with New.
type Server struct {
	newClient NewClient
	store     Store
	procs     *processTable
	mux       *http.ServeMux
}

// New returns the E2B API's server: newClient makes clients of this node's
// API, store keeps sandboxes' templates and metadata.
func New(newClient NewClient, store Store) *Server {
	s := &Server{newClient: newClient, store: store, procs: newProcessTable()}
	s.mux = http.NewServeMux()
	s.restRoutes()
	s.daemonRoutes()
	return s
}

// Mount serves h, with the E2B API (s) under Prefix in front of it.
func (s *Server) Mount(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == Prefix || strings.HasPrefix(r.URL.Path, Prefix+"/") {
			s.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ServeHTTP serves one request of the E2B API (its path under Prefix).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r2 := r.Clone(r.Context())
	r2.URL.Path = strings.TrimPrefix(r.URL.Path, Prefix)
	r2.URL.RawPath = ""
	if r2.URL.Path == "" {
		r2.URL.Path = "/"
	}
	s.mux.ServeHTTP(w, r2)
}

// Close ends every command the server started (the node is stopping).
func (s *Server) Close() { s.procs.closeAll() }

// restError is E2B's REST error body.
type restError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	// ErrorCode is envd's stable code (the E2B schema's open error_code).
	ErrorCode string `json:"error_code,omitempty"`
}

// writeJSON answers v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeRESTError answers err as E2B's error body, with the HTTP status and
// code envd gave it (or its kind's).
func writeRESTError(w http.ResponseWriter, err error) {
	status, code, msg := errorParts(err)
	writeJSON(w, status, restError{Code: status, Message: msg, ErrorCode: code})
}

// errorParts is err's HTTP status, stable code and message: the API's when
// it answered, else those of err's kind.
func errorParts(err error) (status int, code, msg string) {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Status, e.Code, e.Message
	}
	code = errdefs.Code(err)
	status = codeStatus[code]
	if status == 0 {
		status = http.StatusInternalServerError
	}
	if code == "internal" && errors.Is(err, context.Canceled) {
		status, code = 499, "canceled"
	}
	return status, code, err.Error()
}

// codeStatus: the HTTP status of envd's codes for errors made here (the
// API's own errors carry theirs).
var codeStatus = map[string]int{
	"invalid_argument":    http.StatusBadRequest,
	"unauthenticated":     http.StatusUnauthorized,
	"permission_denied":   http.StatusForbidden,
	"not_found":           http.StatusNotFound,
	"already_exists":      http.StatusConflict,
	"conflict":            http.StatusConflict,
	"failed_precondition": http.StatusConflict,
	"unimplemented":       http.StatusNotImplemented,
	"unavailable":         http.StatusServiceUnavailable,
	"quota_exceeded":      http.StatusInsufficientStorage,
	"internal":            http.StatusInternalServerError,
}

// clientFor authenticates r by its key (header), answering the client of
// envd's API made with it; a missing or refused key is answered (401, as
// the SDK reports it: "Unauthorized, please check your credentials") and
// ok is false.
func (s *Server) clientFor(w http.ResponseWriter, r *http.Request, key string, fail func(http.ResponseWriter, error)) (Envd, bool) {
	if key == "" {
		fail(w, &types.Error{Status: http.StatusUnauthorized, Code: "unauthenticated",
			Message: "missing API key: send X-API-Key (the SDK's apiKey, E2B_API_KEY) with an envd API token"})
		return nil, false
	}
	c, err := s.newClient(key)
	if err == nil {
		_, err = c.Info(r.Context())
	}
	if err != nil {
		fail(w, err)
		return nil, false
	}
	return c, true
}

// apiKey is the REST request's key: X-API-Key, or a bearer token.
func apiKey(r *http.Request) string {
	if k := strings.TrimSpace(r.Header.Get("X-API-Key")); k != "" {
		return k
	}
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}
