package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/envd"
)

type handlers struct {
	core Core
	opts options
}

const principalKey = "envd.principal"

// authenticate resolves the bearer token to a principal, or answers 401.
// The token comes from the Authorization header or, on a WebSocket upgrade
// (which browsers cannot give headers), from the bearer subprotocol.
func (h *handlers) authenticate(c *gin.Context) {
	token, ok := bearerToken(c.GetHeader("Authorization"))
	if !ok && strings.EqualFold(c.GetHeader("Upgrade"), "websocket") {
		token, ok = subprotocolToken(c.Request)
	}
	if !ok {
		c.Header("WWW-Authenticate", `Bearer realm="envd"`)
		writeError(c, fmt.Errorf("missing bearer token in the Authorization header: %w", errdefs.ErrUnauthenticated))
		return
	}
	p, err := h.core.Authenticate(c.Request.Context(), token)
	if err != nil {
		if errors.Is(err, errdefs.ErrUnauthenticated) {
			c.Header("WWW-Authenticate", `Bearer realm="envd", error="invalid_token"`)
		}
		writeError(c, err)
		return
	}
	c.Set(principalKey, p)
	c.Next()
}

func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

func principal(c *gin.Context) types.Principal {
	p, _ := c.Get(principalKey)
	pr, _ := p.(types.Principal)
	return pr
}

// decodeJSON reads a JSON request body of at most MaxJSONBody bytes into
// dst, refusing unknown fields and trailing data. An empty body leaves dst
// as it is (the zero request).
func decodeJSON(c *gin.Context, dst any) error {
	body := http.MaxBytesReader(c.Writer, c.Request.Body, MaxJSONBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return describeJSONError(err)
	}
	var extra json.RawMessage
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return describeJSONError(err)
		}
		return invalidArgument("request body: unexpected data after the JSON object")
	}
	return nil
}

func describeJSONError(err error) error {
	var (
		tooBig *http.MaxBytesError
		syn    *json.SyntaxError
		typ    *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooBig):
		return invalidArgument("request body exceeds the %d byte limit", tooBig.Limit)
	case errors.As(err, &syn):
		return invalidArgument("request body: malformed JSON at offset %d: %v", syn.Offset, syn)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidArgument("request body: malformed JSON: unexpected end of input")
	case errors.As(err, &typ):
		field := typ.Field
		if field == "" {
			field = "(top level)"
		}
		return invalidArgument("request body: field %s: cannot use a JSON %s as %s", field, typ.Value, typ.Type)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return invalidArgument("request body: %s", strings.TrimPrefix(err.Error(), "json: "))
	default:
		return invalidArgument("request body: %v", err)
	}
}

// versionParam parses the :n path parameter.
func versionParam(c *gin.Context) (int, error) {
	s := c.Param("n")
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, invalidArgument("version number %q in the path: must be a positive integer", s)
	}
	return n, nil
}

// respond writes v with status, or the error.
func respond[T any](c *gin.Context, status int, v T, err error) {
	if err != nil {
		writeError(c, err)
		return
	}
	c.JSON(status, v)
}

// list never answers null for an empty list.
func list[T any](c *gin.Context, v []T, err error) {
	if v == nil {
		v = []T{}
	}
	respond(c, http.StatusOK, v, err)
}

func (h *handlers) info(c *gin.Context) {
	v, err := h.core.Info(c.Request.Context())
	respond(c, http.StatusOK, v, err)
}

// imageContentTypes are the accepted Content-Types of an image upload; an
// absent Content-Type is accepted too and the core sniffs the stream.
var imageContentTypes = map[string]bool{
	"application/x-tar":        true,
	"application/tar":          true,
	"application/gzip":         true,
	"application/x-gzip":       true,
	"application/tar+gzip":     true,
	"application/octet-stream": true,
}

func (h *handlers) importImage(c *gin.Context) {
	name := c.Query("name")
	if name == "" {
		writeError(c, invalidArgument("query parameter name is required (POST /v1/images?name=NAME)"))
		return
	}
	if ct := c.GetHeader("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || !imageContentTypes[mt] {
			writeError(c, invalidArgument("content type %q: an image upload is a tar stream (application/x-tar or application/gzip)", ct))
			return
		}
	}
	v, err := h.core.ImportImage(c.Request.Context(), principal(c), name, c.Request.Body)
	respond(c, http.StatusCreated, v, err)
}

func (h *handlers) listImages(c *gin.Context) {
	v, err := h.core.ListImages(c.Request.Context(), principal(c))
	list(c, v, err)
}

func (h *handlers) createProject(c *gin.Context) {
	var req types.CreateProjectRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	v, err := h.core.CreateProject(c.Request.Context(), principal(c), req, c.GetHeader(IdempotencyKeyHeader))
	respond(c, http.StatusCreated, v, err)
}

func (h *handlers) listProjects(c *gin.Context) {
	v, err := h.core.ListProjects(c.Request.Context(), principal(c))
	list(c, v, err)
}

func (h *handlers) getProject(c *gin.Context) {
	v, err := h.core.GetProject(c.Request.Context(), principal(c), c.Param("p"))
	respond(c, http.StatusOK, v, err)
}

func (h *handlers) deleteProject(c *gin.Context) {
	if err := h.core.DeleteProject(c.Request.Context(), principal(c), c.Param("p")); err != nil {
		writeError(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func (h *handlers) createInstance(c *gin.Context) {
	var req types.CreateInstanceRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	if respondAsync(c) {
		op, err := h.core.Restore(c.Request.Context(), principal(c), c.Param("p"), req, c.GetHeader(IdempotencyKeyHeader))
		if err == nil {
			c.Header("Preference-Applied", "respond-async")
		}
		accepted(c, op, err)
		return
	}
	v, err := h.core.CreateInstance(c.Request.Context(), principal(c), c.Param("p"), req, c.GetHeader(IdempotencyKeyHeader))
	respond(c, http.StatusCreated, v, err)
}

// respondAsync reports whether the client asked for an operation instead of
// waiting (RFC 7240 Prefer: respond-async).
func respondAsync(c *gin.Context) bool {
	for _, h := range c.Request.Header.Values("Prefer") {
		for pref := range strings.SplitSeq(h, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(pref), "=")
			if strings.EqualFold(strings.TrimSpace(name), "respond-async") {
				return true
			}
		}
	}
	return false
}

// accepted answers a started operation: 202 with a Location to follow it.
func accepted(c *gin.Context, op types.Operation, err error) {
	if err == nil {
		c.Header("Location", "/v1/operations/"+op.ID)
	}
	respond(c, http.StatusAccepted, op, err)
}

// listInstances serves both /projects/:p/instances and /instances (all).
func (h *handlers) listInstances(c *gin.Context) {
	v, err := h.core.ListInstances(c.Request.Context(), principal(c), c.Param("p"))
	list(c, v, err)
}

func (h *handlers) getInstance(c *gin.Context) {
	v, err := h.core.GetInstance(c.Request.Context(), principal(c), c.Param("i"))
	respond(c, http.StatusOK, v, err)
}

func (h *handlers) deleteInstance(c *gin.Context) {
	v, err := h.core.DeleteInstance(c.Request.Context(), principal(c), c.Param("i"))
	respond(c, http.StatusOK, v, err)
}

// instanceVerb serves a lifecycle verb without a body (stop, start, pause,
// resume).
func (h *handlers) instanceVerb(verb func(ctx context.Context, p types.Principal, id string) (types.Instance, error)) gin.HandlerFunc {
	return func(c *gin.Context) {
		v, err := verb(c.Request.Context(), principal(c), c.Param("i"))
		respond(c, http.StatusOK, v, err)
	}
}

func (h *handlers) renew(c *gin.Context) {
	var req types.RenewRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	v, err := h.core.RenewInstance(c.Request.Context(), principal(c), c.Param("i"), req.TTL)
	respond(c, http.StatusOK, v, err)
}

func (h *handlers) exec(c *gin.Context) {
	var req types.ExecRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	release, ok := h.admit(c, envd.AdmitExec)
	if !ok {
		return
	}
	defer release()
	v, err := h.core.Exec(c.Request.Context(), principal(c), c.Param("i"), req)
	respond(c, http.StatusOK, v, err)
}

// IdempotencyKeyHeader carries a client-chosen key on creating POSTs
// (projects, instances, saves): a retry with the same key and body returns
// the same object or operation; the same key with a different body is 422
// idempotency_key_reused.
const IdempotencyKeyHeader = "Idempotency-Key"

func (h *handlers) save(c *gin.Context) {
	var req types.SaveRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	op, err := h.core.Save(c.Request.Context(), principal(c), c.Param("i"), req, c.GetHeader(IdempotencyKeyHeader))
	accepted(c, op, err)
}

func (h *handlers) setRetention(c *gin.Context) {
	var req types.Retention
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	v, err := h.core.SetRetention(c.Request.Context(), principal(c), c.Param("p"), req)
	respond(c, http.StatusOK, v, err)
}

func (h *handlers) build(c *gin.Context) {
	var req types.BuildRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	op, err := h.core.Build(c.Request.Context(), principal(c), c.Param("p"), req, c.GetHeader(IdempotencyKeyHeader))
	accepted(c, op, err)
}

func (h *handlers) migrate(c *gin.Context) {
	var req types.MigrateRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	op, err := h.core.Migrate(c.Request.Context(), principal(c), c.Param("p"), req, c.GetHeader(IdempotencyKeyHeader))
	accepted(c, op, err)
}

func (h *handlers) createToken(c *gin.Context) {
	var req types.CreateTokenRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	v, err := h.core.CreateToken(c.Request.Context(), principal(c), c.Param("t"), req)
	respond(c, http.StatusCreated, v, err)
}

func (h *handlers) setQuota(c *gin.Context) {
	var req types.Quota
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	v, err := h.core.SetQuota(c.Request.Context(), principal(c), c.Param("t"), req)
	respond(c, http.StatusOK, v, err)
}

// usage serves /usage (the caller's tenant) and /admin/tenants/:t/usage.
func (h *handlers) usage(c *gin.Context) {
	v, err := h.core.Usage(c.Request.Context(), principal(c), c.Param("t"))
	respond(c, http.StatusOK, v, err)
}

func (h *handlers) gc(c *gin.Context) {
	var req types.GCRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	op, err := h.core.GC(c.Request.Context(), principal(c), req, c.GetHeader(IdempotencyKeyHeader))
	accepted(c, op, err)
}

func (h *handlers) listVersions(c *gin.Context) {
	v, err := h.core.ListVersions(c.Request.Context(), principal(c), c.Param("p"))
	list(c, v, err)
}

func (h *handlers) getVersion(c *gin.Context) {
	n, err := versionParam(c)
	if err != nil {
		writeError(c, err)
		return
	}
	v, err := h.core.GetVersion(c.Request.Context(), principal(c), c.Param("p"), n)
	respond(c, http.StatusOK, v, err)
}

func (h *handlers) setCurrent(c *gin.Context) {
	var req types.SetCurrentRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	v, err := h.core.SetCurrent(c.Request.Context(), principal(c), c.Param("p"), req)
	respond(c, http.StatusOK, v, err)
}

func (h *handlers) pin(pinned bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		n, err := versionParam(c)
		if err != nil {
			writeError(c, err)
			return
		}
		v, err := h.core.PinVersion(c.Request.Context(), principal(c), c.Param("p"), n, pinned)
		respond(c, http.StatusOK, v, err)
	}
}

func (h *handlers) getOperation(c *gin.Context) {
	v, err := h.core.GetOperation(c.Request.Context(), principal(c), c.Param("id"))
	respond(c, http.StatusOK, v, err)
}

func (h *handlers) cancelOperation(c *gin.Context) {
	v, err := h.core.CancelOperation(c.Request.Context(), principal(c), c.Param("id"))
	respond(c, http.StatusAccepted, v, err)
}

func (h *handlers) listVolumes(c *gin.Context) {
	v, err := h.core.ListVolumes(c.Request.Context(), principal(c), c.Param("p"))
	list(c, v, err)
}

func (h *handlers) addVolume(c *gin.Context) {
	var req types.AddVolumeRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	v, err := h.core.AddVolume(c.Request.Context(), principal(c), c.Param("p"), req)
	respond(c, http.StatusCreated, v, err)
}

func (h *handlers) removeVolume(c *gin.Context) {
	v, err := h.core.RemoveVolume(c.Request.Context(), principal(c), c.Param("p"), c.Param("v"))
	respond(c, http.StatusOK, v, err)
}

func (h *handlers) archiveVolume(c *gin.Context) {
	var req types.VolumeArchiveRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	v, err := h.core.ArchiveVolume(c.Request.Context(), principal(c), c.Param("p"), c.Param("v"), req)
	respond(c, http.StatusOK, v, err)
}

func (h *handlers) restoreVolume(c *gin.Context) {
	var req types.VolumeArchiveRequest
	if err := decodeJSON(c, &req); err != nil {
		writeError(c, err)
		return
	}
	v, err := h.core.RestoreVolume(c.Request.Context(), principal(c), c.Param("p"), c.Param("v"), req)
	respond(c, http.StatusOK, v, err)
}

func (h *handlers) metrics(c *gin.Context) {
	text, err := h.core.Metrics(c.Request.Context(), principal(c))
	if err != nil {
		writeError(c, err)
		return
	}
	c.Data(http.StatusOK, "text/plain; version=0.0.4; charset=utf-8", []byte(text))
}
