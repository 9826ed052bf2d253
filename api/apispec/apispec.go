// Package apispec checks HTTP traffic against envd's OpenAPI document
// (docs/openapi.yaml): LoadSpec reads and validates the document, and a
// Validator wraps an http.Handler, checks every request and answer against
// it and records what does not match. Tests use it; the server never does.
//
// What counts as a violation:
//   - an answer (status, headers, JSON body) the spec does not describe for
//     its route, whatever the request;
//   - a request the spec refuses (parameters, headers, JSON body) that the
//     server accepted (a status below 400): the spec is then stricter than
//     the server. Requests the server refused are bad input on purpose
//     (tests of bad input send them), not violations;
//   - a request the server accepted on a path and method the spec lacks.
//
// Proxied routes are not checked at all: an operation marked
// `x-envd-proxy: true` passes traffic to and from an instance (the port
// proxy), whose requests and answers are the instance's, not the API's.
// Its path's last parameter matches the rest of the path, slashes
// included (/v1/instances/{i}/ports/{port}/{path} covers
// .../ports/8080/a/b/c); a route of the spec that is not proxied and
// matches the request wins (POST .../ports/{port}/token). They are
// counted in Checked.
//
// Bodies that are streams are not read: image tar uploads (any request body
// that is not JSON), server-sent events, the WebSocket upgrade (hijacked)
// and /metrics (any answer that is not JSON); their status and headers are
// still checked. Answers no client received (the request's context ended
// first) are not checked.
package apispec

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// LoadSpec reads the OpenAPI document at path and validates it as a
// document (OpenAPI 3.1 rules, references resolved).
func LoadSpec(ctx context.Context, path string) (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	loader.Context = ctx
	doc, err := loader.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if err := doc.Validate(ctx, openapi3.EnableMultiError()); err != nil {
		return nil, fmt.Errorf("validate %s: %w", path, err)
	}
	return doc, nil
}

// Violation is one request or answer that does not match the spec.
type Violation struct {
	Method string
	Path   string // the request's URL path
	Status int    // the answer's status
	Err    string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s %s -> %d: %s", v.Method, v.Path, v.Status, v.Err)
}

// maxJSONRequest is the largest request body validated; the server refuses
// JSON bodies above 1 MiB, so a larger one is passed on unread.
const maxJSONRequest = 1<<20 + 1

// maxJSONAnswer is the largest answer body kept for validation (an exec's
// output is up to 4 MiB per stream, more once JSON-escaped).
const maxJSONAnswer = 64 << 20

// maxViolations bounds what a Validator keeps; it counts the rest.
const maxViolations = 1000

// Validator checks the traffic of the handlers it wraps against a spec. It
// is safe for concurrent use.
type Validator struct {
	router  routers.Router
	proxied []proxiedPath

	mu         sync.Mutex
	violations []Violation
	dropped    int
	checked    int
}

// NewValidator returns a Validator of doc, a document LoadSpec returned.
func NewValidator(doc *openapi3.T) (*Validator, error) {
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi router: %w", err)
	}
	return &Validator{router: r, proxied: proxiedPaths(doc)}, nil
}

// ProxyExtension marks an operation whose traffic is an instance's.
const ProxyExtension = "x-envd-proxy"

// proxiedPath is a path of the spec with proxied operations: re matches
// a request path, the last parameter taking the rest of it.
type proxiedPath struct {
	re      *regexp.Regexp
	methods []string
}

var pathParam = regexp.MustCompile(`\{[^}/]+\}`)

func proxiedPaths(doc *openapi3.T) []proxiedPath {
	var out []proxiedPath
	for path, item := range doc.Paths.Map() {
		var methods []string
		for method, op := range item.Operations() {
			if v, ok := op.Extensions[ProxyExtension].(bool); ok && v {
				methods = append(methods, method)
			}
		}
		if len(methods) == 0 {
			continue
		}
		params := pathParam.FindAllStringIndex(path, -1)
		var b strings.Builder
		b.WriteString("^")
		last := 0
		for i, loc := range params {
			b.WriteString(regexp.QuoteMeta(path[last:loc[0]]))
			if i == len(params)-1 && loc[1] == len(path) {
				b.WriteString(".*")
			} else {
				b.WriteString("[^/]+")
			}
			last = loc[1]
		}
		b.WriteString(regexp.QuoteMeta(path[last:]) + "$")
		out = append(out, proxiedPath{re: regexp.MustCompile(b.String()), methods: methods})
	}
	return out
}

// isProxied reports whether r goes to a proxied operation: the route the
// router found is one, or it found none and a proxied path matches.
func (v *Validator) isProxied(r *http.Request, route *routers.Route, findErr error) bool {
	if findErr == nil {
		b, _ := route.Operation.Extensions[ProxyExtension].(bool)
		return b
	}
	for _, p := range v.proxied {
		if slices.Contains(p.methods, r.Method) && p.re.MatchString(r.URL.EscapedPath()) {
			return true
		}
	}
	return false
}

// Violations returns the violations recorded so far, and how many more
// were not kept.
func (v *Validator) Violations() ([]Violation, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.Clone(v.violations), v.dropped
}

// Checked returns how many requests were checked.
func (v *Validator) Checked() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.checked
}

// Report writes the violations, one a line, and reports whether there
// were any.
func (v *Validator) Report(w io.Writer) bool {
	vs, dropped := v.Violations()
	for _, x := range vs {
		fmt.Fprintln(w, x)
	}
	if dropped > 0 {
		fmt.Fprintf(w, "... and %d more\n", dropped)
	}
	return len(vs) > 0
}

func (v *Validator) record(r *http.Request, status int, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.violations) >= maxViolations {
		v.dropped++
		return
	}
	v.violations = append(v.violations, Violation{Method: r.Method, Path: r.URL.Path, Status: status, Err: err.Error()})
}

// Wrap returns next with every request and answer checked.
func (v *Validator) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v.mu.Lock()
		v.checked++
		v.mu.Unlock()
		route, params, findErr := v.router.FindRoute(r)
		if v.isProxied(r, route, findErr) {
			next.ServeHTTP(w, r)
			return
		}
		if findErr != nil {
			rec := &recorder{ResponseWriter: w}
			next.ServeHTTP(rec, r)
			if status := rec.statusOr200(); status < 400 && r.Context().Err() == nil {
				v.record(r, status, fmt.Errorf("the server answered a route the spec lacks: %w", findErr))
			}
			return
		}

		opts := &openapi3filter.Options{
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
			MultiError:         true,
		}
		vreq := r.Clone(r.Context())
		vreq.Body, vreq.GetBody = http.NoBody, nil
		if !jsonRequestBody(route) {
			opts.ExcludeRequestBody = true
		} else if r.Body != nil && r.Body != http.NoBody {
			head, err := io.ReadAll(io.LimitReader(r.Body, maxJSONRequest))
			if err != nil {
				http.Error(w, "apispec: read request body: "+err.Error(), http.StatusBadRequest)
				return
			}
			// The handler reads the same bytes, then whatever was left.
			r.Body = readCloser{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
			if len(head) < maxJSONRequest {
				vreq.Body = io.NopCloser(bytes.NewReader(head))
			} else {
				opts.ExcludeRequestBody = true
			}
		}
		in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
		reqErr := openapi3filter.ValidateRequest(r.Context(), in)

		rec := &recorder{ResponseWriter: w, keepJSON: true}
		next.ServeHTTP(rec, r)
		status := rec.statusOr200()
		if r.Context().Err() != nil {
			return // no client received the answer
		}
		if reqErr != nil && status < 400 {
			v.record(r, status, fmt.Errorf("the server accepted a request the spec refuses: %w", reqErr))
		}
		header := rec.header
		if header == nil {
			header = w.Header().Clone()
		}
		out := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: in,
			Status:                 status,
			Header:                 header,
			Options: &openapi3filter.Options{
				IncludeResponseStatus: true,
				ExcludeResponseBody:   !rec.kept(),
				MultiError:            true,
			},
		}
		if rec.kept() {
			out.SetBodyBytes(rec.body.Bytes())
		}
		if err := openapi3filter.ValidateResponse(r.Context(), out); err != nil {
			v.record(r, status, fmt.Errorf("answer: %w", err))
		}
	})
}

// jsonRequestBody reports whether the route's request body is JSON (and so
// small enough to read before the handler does).
func jsonRequestBody(route *routers.Route) bool {
	rb := route.Operation.RequestBody
	if rb == nil || rb.Value == nil {
		return false
	}
	// Exactly: Content.Get would match a "*/*" of a streamed body.
	_, ok := rb.Value.Content["application/json"]
	return ok
}

type readCloser struct {
	io.Reader
	io.Closer
}

// recorder passes an answer through and keeps its status, its headers as
// they were sent and, when it is JSON, its body.
type recorder struct {
	http.ResponseWriter
	keepJSON bool

	status   int
	header   http.Header
	body     bytes.Buffer
	keepBody bool
	overflow bool
	hijacked bool
}

func (w *recorder) WriteHeader(status int) {
	if w.status == 0 || w.status < 200 && status >= 200 {
		w.status = status
		w.header = w.ResponseWriter.Header().Clone()
		if w.keepJSON && status >= 200 {
			mt, _, _ := mime.ParseMediaType(w.header.Get("Content-Type"))
			w.keepBody = mt == "application/json" || strings.HasSuffix(mt, "+json")
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *recorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.keepBody && !w.overflow {
		if w.body.Len()+len(b) > maxJSONAnswer {
			w.overflow = true
			w.body.Reset()
		} else {
			w.body.Write(b)
		}
	}
	return w.ResponseWriter.Write(b)
}

func (w *recorder) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := w.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("apispec: the response writer cannot be hijacked")
	}
	w.hijacked = true
	if w.status == 0 {
		// A handler that hijacks before any status writes its answer on
		// the connection itself: in envd's API only a reverse proxy
		// forwarding a WebSocket upgrade the owning node accepted (101).
		w.status = http.StatusSwitchingProtocols
		w.header = w.ResponseWriter.Header().Clone()
	}
	return hj.Hijack()
}

func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *recorder) kept() bool { return w.keepBody && !w.overflow && !w.hijacked }

// statusOr200 is the answer's status: what the handler set, else 200 (what
// net/http sends for a handler that wrote nothing).
func (w *recorder) statusOr200() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
