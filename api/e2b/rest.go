package e2b

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// newSandbox is the body of POST /sandboxes and /v2/sandboxes (E2B's
// NewSandbox); the fields envd cannot honor are refused, not ignored.
type newSandbox struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          json.RawMessage   `json:"autoResume"`
	Secure              *bool             `json:"secure"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Network             json.RawMessage   `json:"network"`
	MCP                 json.RawMessage   `json:"mcp"`
	VolumeMounts        json.RawMessage   `json:"volumeMounts"`
	IAM                 json.RawMessage   `json:"iam"`
}

// sandboxJSON is E2B's Sandbox (the answer to create and connect).
type sandboxJSON struct {
	ClientID        string `json:"clientID"`
	EnvdAccessToken string `json:"envdAccessToken,omitempty"`
	EnvdVersion     string `json:"envdVersion"`
	SandboxID       string `json:"sandboxID"`
	TemplateID      string `json:"templateID"`
	Alias           string `json:"alias,omitempty"`
}

// listedSandbox is E2B's ListedSandbox and, with the token, SandboxDetail.
type listedSandbox struct {
	ClientID        string            `json:"clientID"`
	CPUCount        float64           `json:"cpuCount"`
	DiskSizeMB      int64             `json:"diskSizeMB"`
	MemoryMB        int64             `json:"memoryMB"`
	EndAt           string            `json:"endAt"`
	StartedAt       string            `json:"startedAt"`
	EnvdVersion     string            `json:"envdVersion"`
	EnvdAccessToken string            `json:"envdAccessToken,omitempty"`
	Metadata        map[string]string `json:"metadata"`
	SandboxID       string            `json:"sandboxID"`
	State           string            `json:"state"`
	TemplateID      string            `json:"templateID"`
	Alias           string            `json:"alias,omitempty"`
}

// timeoutBody is the body of /timeout, /connect and /resume; duration that
// of /refreshes.
type timeoutBody struct {
	Timeout   *int64 `json:"timeout"`
	Duration  *int64 `json:"duration"`
	AutoPause *bool  `json:"autoPause"`
	Memory    *bool  `json:"memory"`
}

// maxTimeout bounds a timeout in seconds so that it fits a Go duration.
const maxTimeout = math.MaxInt64 / int64(time.Second)

func (s *Server) restRoutes() {
	rest := func(h func(c Envd, w http.ResponseWriter, r *http.Request) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			c, ok := s.clientFor(w, r, apiKey(r), writeRESTError)
			if !ok {
				return
			}
			if err := h(c, w, r); err != nil {
				writeRESTError(w, err)
			}
		}
	}
	s.mux.Handle("POST /sandboxes", rest(s.create(15)))
	s.mux.Handle("POST /v2/sandboxes", rest(s.create(300)))
	s.mux.Handle("GET /sandboxes", rest(s.list))
	s.mux.Handle("GET /v2/sandboxes", rest(s.list))
	s.mux.Handle("GET /sandboxes/{id}", rest(s.get))
	s.mux.Handle("DELETE /sandboxes/{id}", rest(s.kill))
	s.mux.Handle("POST /sandboxes/{id}/timeout", rest(s.setTimeout))
	s.mux.Handle("POST /sandboxes/{id}/refreshes", rest(s.setTimeout))
	s.mux.Handle("POST /sandboxes/{id}/pause", rest(s.pause))
	s.mux.Handle("POST /sandboxes/{id}/resume", rest(s.connect(true)))
	s.mux.Handle("POST /sandboxes/{id}/connect", rest(s.connect(false)))
	s.mux.Handle("POST /v2/sandboxes/{id}/connect", rest(s.connect(false)))
	// The rest of E2B's API (templates, snapshots, forks, volumes, secrets,
	// metrics, logs, network) is not mapped: a clear 501, never a 404 that
	// an SDK would read as "sandbox not found".
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeRESTError(w, &types.Error{Status: http.StatusNotImplemented, Code: "unimplemented",
			Message: fmt.Sprintf("%s %s is not mapped by envd's E2B compatibility (docs/api.md, \"E2B compatibility\")", r.Method, r.URL.Path)})
	})
}

// decodeBody decodes r's JSON body into v; an empty body leaves v as is.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 1<<20))
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("request body: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ttl turns E2B's timeout in seconds into envd's TTL.
func ttl(seconds int64) (string, error) {
	if seconds <= 0 || seconds > maxTimeout {
		return "", fmt.Errorf("timeout %d: must be a positive number of seconds: %w", seconds, errdefs.ErrInvalidArgument)
	}
	return strconv.FormatInt(seconds, 10) + "s", nil
}

// parseTemplate maps an E2B template id to a project and version: "name"
// or "name:latest"/"name:default" is the project's current version,
// "name:N" its version N.
func parseTemplate(id string) (project string, version int, err error) {
	project, tag, hasTag := strings.Cut(id, ":")
	if project == "" {
		return "", 0, fmt.Errorf("templateID %q: name a template (an envd project of the caller's tenant): %w", id, errdefs.ErrInvalidArgument)
	}
	if !hasTag || tag == "latest" || tag == "default" {
		return project, 0, nil
	}
	n, err := strconv.Atoi(tag)
	if err != nil || n <= 0 {
		return "", 0, fmt.Errorf("templateID %q: the tag must be a version number of project %q, or latest: %w", id, project, errdefs.ErrInvalidArgument)
	}
	return project, n, nil
}

// refuse answers the fields of a new sandbox envd does not map.
func (b newSandbox) refuse() error {
	unmapped := func(field, why string) error {
		return fmt.Errorf("%s is not mapped by envd's E2B compatibility: %s: %w", field, why, errdefs.ErrInvalidArgument)
	}
	set := func(m json.RawMessage) bool { s := strings.TrimSpace(string(m)); return s != "" && s != "null" }
	switch {
	case set(b.MCP):
		return unmapped("mcp", "use envd's own MCP endpoint (/mcp)")
	case set(b.VolumeMounts):
		return unmapped("volumeMounts", "volumes are the project's (envctl volumes)")
	case set(b.Network):
		return unmapped("network", "egress is the project's network policy (PUT /v1/projects/{p}/network)")
	case set(b.IAM):
		return unmapped("iam", "envd has no workload identity tokens")
	case b.AllowInternetAccess != nil && !*b.AllowInternetAccess:
		return unmapped("allow_internet_access=false", "egress is the project's network policy (PUT /v1/projects/{p}/network)")
	case b.AutoPauseMemory != nil && *b.AutoPauseMemory && b.AutoPause != nil && *b.AutoPause:
		return unmapped("autoPauseMemory", "a paused sandbox keeps its files, not its memory")
	case set(b.AutoResume) && strings.Contains(string(b.AutoResume), "true"):
		return unmapped("autoResume", "resume a paused sandbox with connect")
	}
	return nil
}

// create: POST /sandboxes (defaultTimeout 15 s) and /v2/sandboxes (300 s).
func (s *Server) create(defaultTimeout int64) func(c Envd, w http.ResponseWriter, r *http.Request) error {
	return func(c Envd, w http.ResponseWriter, r *http.Request) error {
		var b newSandbox
		if err := decodeBody(r, &b); err != nil {
			return err
		}
		if err := b.refuse(); err != nil {
			return err
		}
		project, version, err := parseTemplate(b.TemplateID)
		if err != nil {
			return err
		}
		timeout := defaultTimeout
		if b.Timeout != nil {
			timeout = *b.Timeout
		}
		d, err := ttl(timeout)
		if err != nil {
			return err
		}
		env := map[string]string{}
		for k, v := range b.EnvVars {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
				return fmt.Errorf("envVars: %q is not an environment variable: %w", k, errdefs.ErrInvalidArgument)
			}
			env[k] = v
		}
		if _, err := c.GetProject(r.Context(), project); err != nil {
			var e *types.Error
			if errors.As(err, &e) && e.Code == "not_found" {
				return &types.Error{Status: http.StatusNotFound, Code: "not_found",
					Message: fmt.Sprintf("template %q not found: a template is an envd project of the caller's tenant (envctl projects create %s --base IMAGE)", b.TemplateID, project)}
			}
			return err
		}
		// autoPause: at the timeout the sandbox is paused, not killed;
		// envd's retained instance is just that (stopped at expiry, layer
		// kept).
		retain := b.AutoPause != nil && *b.AutoPause
		in, err := c.CreateInstance(r.Context(), project, types.CreateInstanceRequest{Version: version, TTL: d, Retain: retain})
		if err != nil {
			return err
		}
		md := b.Metadata
		if md == nil {
			md = map[string]string{}
		}
		if err := s.store.PutE2BSandbox(r.Context(), in.ID, Sandbox{Template: b.TemplateID, Metadata: md, Env: env}); err != nil {
			// Nothing half-made stays: the instance goes with the failure.
			_, _ = c.DeleteInstance(r.Context(), in.ID)
			return err
		}
		writeJSON(w, http.StatusCreated, sandboxJSON{ClientID: in.Node, EnvdAccessToken: apiKey(r), EnvdVersion: EnvdVersion,
			SandboxID: in.ID, TemplateID: b.TemplateID, Alias: project})
		return nil
	}
}

// state is E2B's state of an instance; ok is false for one that is gone.
func state(in types.Instance) (string, bool) {
	switch in.State {
	case types.StateTerminated, types.StateFailed:
		return "", false
	case types.StateStopped, types.StateStopping, types.StatePaused, types.StatePausing:
		return "paused", true
	default:
		return "running", true
	}
}

// listed is in as E2B lists it, with its record sb (zero when the instance
// was not made through E2B: its template is then its project).
func listed(in types.Instance, sb Sandbox, st string) listedSandbox {
	l := listedSandbox{ClientID: in.Node, EnvdVersion: EnvdVersion, Metadata: sb.Metadata, SandboxID: in.ID, State: st,
		TemplateID: sb.Template, Alias: in.Project, StartedAt: in.CreatedAt.UTC().Format(time.RFC3339Nano)}
	if l.TemplateID == "" {
		l.TemplateID = in.Project
	}
	if l.Metadata == nil {
		l.Metadata = map[string]string{}
	}
	if in.ExpiresAt != nil {
		l.EndAt = in.ExpiresAt.UTC().Format(time.RFC3339Nano)
	} else {
		// No expiry: E2B has no such sandbox; the farthest date says so.
		l.EndAt = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC).Format(time.RFC3339Nano)
	}
	if lim := in.Limits; lim != nil {
		l.CPUCount, l.MemoryMB, l.DiskSizeMB = lim.CPUs, lim.MemoryBytes>>20, lim.DiskBytes>>20
	}
	return l
}

// list: GET /sandboxes and /v2/sandboxes, with E2B's filters (state,
// metadata, template) and paging (limit, nextToken; the next token in the
// X-Next-Token header).
func (s *Server) list(c Envd, w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	states := map[string]bool{}
	for _, v := range q["state"] {
		for st := range strings.SplitSeq(v, ",") {
			if st != "running" && st != "paused" {
				return fmt.Errorf("state %q: running or paused: %w", st, errdefs.ErrInvalidArgument)
			}
			states[st] = true
		}
	}
	var want url.Values
	if m := q.Get("metadata"); m != "" {
		var err error
		if want, err = url.ParseQuery(m); err != nil {
			return fmt.Errorf("metadata %q: key=value pairs joined by &: %w", m, errdefs.ErrInvalidArgument)
		}
	}
	limit, offset := 0, 0
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("limit %q: a positive number: %w", v, errdefs.ErrInvalidArgument)
		}
		limit = n
	}
	if v := q.Get("nextToken"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("nextToken %q: not a token this server gave: %w", v, errdefs.ErrInvalidArgument)
		}
		offset = n
	}
	ins, err := c.ListInstances(r.Context(), "")
	if err != nil {
		return err
	}
	ids := make([]string, len(ins))
	for i, in := range ins {
		ids[i] = in.ID
	}
	recs, err := s.store.E2BSandboxes(r.Context(), ids)
	if err != nil {
		return err
	}
	out := []listedSandbox{}
	for _, in := range ins {
		st, ok := state(in)
		if !ok || (len(states) > 0 && !states[st]) {
			continue
		}
		l := listed(in, recs[in.ID], st)
		if t := q.Get("template"); t != "" && t != l.TemplateID && t != in.Project {
			continue
		}
		match := true
		for k := range want {
			if l.Metadata[k] != want.Get(k) {
				match = false
			}
		}
		if match {
			out = append(out, l)
		}
	}
	// Newest first, as E2B's default order; "asc" turns it.
	sort.SliceStable(out, func(i, j int) bool { return out[i].StartedAt > out[j].StartedAt })
	if q.Get("order") == "asc" {
		sort.SliceStable(out, func(i, j int) bool { return out[i].StartedAt < out[j].StartedAt })
	}
	if offset > len(out) {
		offset = len(out)
	}
	out = out[offset:]
	if limit > 0 && len(out) > limit {
		out = out[:limit]
		w.Header().Set("X-Next-Token", strconv.Itoa(offset+limit))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// sandboxNotFound is the 404 E2B's SDKs read as "sandbox not found".
func sandboxNotFound(id string) error {
	return &types.Error{Status: http.StatusNotFound, Code: "not_found", Message: fmt.Sprintf("sandbox %q not found", id)}
}

// instance gets the caller's live instance id (a gone one is not found).
func instance(c Envd, r *http.Request, id string) (types.Instance, string, error) {
	in, err := c.GetInstance(r.Context(), id)
	if err != nil {
		return in, "", err
	}
	st, ok := state(in)
	if !ok {
		return in, "", sandboxNotFound(id)
	}
	return in, st, nil
}

// get: GET /sandboxes/{id}.
func (s *Server) get(c Envd, w http.ResponseWriter, r *http.Request) error {
	in, st, err := instance(c, r, r.PathValue("id"))
	if err != nil {
		return err
	}
	recs, err := s.store.E2BSandboxes(r.Context(), []string{in.ID})
	if err != nil {
		return err
	}
	l := listed(in, recs[in.ID], st)
	l.EnvdAccessToken = apiKey(r)
	writeJSON(w, http.StatusOK, l)
	return nil
}

// kill: DELETE /sandboxes/{id} removes the instance.
func (s *Server) kill(c Envd, w http.ResponseWriter, r *http.Request) error {
	in, _, err := instance(c, r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if _, err := c.DeleteInstance(r.Context(), in.ID); err != nil {
		return err
	}
	s.procs.endSandbox(in.ID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// setTimeout: POST /sandboxes/{id}/timeout ({timeout}) and /refreshes
// ({duration}): the instance expires that many seconds from now (envd's
// renew, which may shorten the lifetime, as E2B's timeout does).
func (s *Server) setTimeout(c Envd, w http.ResponseWriter, r *http.Request) error {
	var b timeoutBody
	if err := decodeBody(r, &b); err != nil {
		return err
	}
	secs := b.Timeout
	if secs == nil {
		secs = b.Duration
	}
	if secs == nil {
		return fmt.Errorf("timeout: required, in seconds: %w", errdefs.ErrInvalidArgument)
	}
	d, err := ttl(*secs)
	if err != nil {
		return err
	}
	in, _, err := instance(c, r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if _, err := c.RenewInstance(r.Context(), in.ID, d); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pause: POST /sandboxes/{id}/pause stops the instance and hibernates it
// (its writable layer saved as a non-current version, the disk freed).
// Files survive, memory and processes do not. Only a sandbox created with
// autoPause (an envd retained instance) keeps its layer when stopped.
func (s *Server) pause(c Envd, w http.ResponseWriter, r *http.Request) error {
	var b timeoutBody
	if err := decodeBody(r, &b); err != nil {
		return err
	}
	in, st, err := instance(c, r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if st == "paused" {
		// 409 is how the SDK learns "already paused" (pause answers false).
		return &types.Error{Status: http.StatusConflict, Code: "failed_precondition", Message: fmt.Sprintf("sandbox %q is already paused", in.ID)}
	}
	if b.Memory != nil && *b.Memory {
		return s.pauseWithMemory(c, w, r, in.ID)
	}
	if !in.Retain {
		// Not 409: the SDK would read it as "already paused".
		return &types.Error{Status: http.StatusBadRequest, Code: "failed_precondition",
			Message: fmt.Sprintf("sandbox %q cannot be paused: envd pauses only sandboxes created with onTimeout 'pause' (autoPause), whose files it keeps, or pause({keepMemory: true}) of a sandbox of a gvisor template", in.ID)}
	}
	if _, err := c.StopInstance(r.Context(), in.ID); err != nil {
		return err
	}
	s.procs.endSandbox(in.ID)
	if _, err := c.HibernateInstance(r.Context(), in.ID); err != nil {
		return fmt.Errorf("sandbox %q is paused (stopped, its files kept on the node) but not hibernated: %w", in.ID, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// pauseWithMemory is pause({keepMemory: true}): the sandbox is hibernated
// with its processes (envd's hibernate with memory, gvisor class), which
// connect and resume continue. The node's command sessions end (their
// streams were the stopped instance's); the processes they started go on
// after the resume. Where memory cannot be kept nothing changes and the
// answer is envd's memory_checkpoint_unsupported, as 400: the SDK reads a
// 409 from pause as "already paused".
func (s *Server) pauseWithMemory(c Envd, w http.ResponseWriter, r *http.Request, id string) error {
	if _, err := c.HibernateInstanceWith(r.Context(), id, types.HibernateRequest{Memory: true}); err != nil {
		var e *types.Error
		if errors.As(err, &e) && e.Status == http.StatusConflict {
			cp := *e
			cp.Status = http.StatusBadRequest
			return &cp
		}
		return err
	}
	s.procs.endSandbox(id)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// connect: POST /sandboxes/{id}/connect, /v2/sandboxes/{id}/connect and
// (resume) /sandboxes/{id}/resume: a paused sandbox is started again (its
// files back, not its memory); the timeout, when given, is renewed.
// resume refuses a running sandbox, as E2B's does.
func (s *Server) connect(resume bool) func(c Envd, w http.ResponseWriter, r *http.Request) error {
	return func(c Envd, w http.ResponseWriter, r *http.Request) error {
		var b timeoutBody
		if err := decodeBody(r, &b); err != nil {
			return err
		}
		if b.Memory != nil && !*b.Memory {
			b.Memory = nil // a cold boot from disk is what envd's resume is anyway
		}
		in, st, err := instance(c, r, r.PathValue("id"))
		if err != nil {
			return err
		}
		status := http.StatusOK
		if st == "paused" {
			if in, err = c.StartInstance(r.Context(), in.ID); err != nil {
				return err
			}
			status = http.StatusCreated
		} else if resume {
			return &types.Error{Status: http.StatusConflict, Code: "failed_precondition", Message: fmt.Sprintf("sandbox %q is already running", in.ID)}
		}
		if b.Timeout != nil {
			d, err := ttl(*b.Timeout)
			if err != nil {
				return err
			}
			if _, err := c.RenewInstance(r.Context(), in.ID, d); err != nil {
				return err
			}
		}
		recs, err := s.store.E2BSandboxes(r.Context(), []string{in.ID})
		if err != nil {
			return err
		}
		l := listed(in, recs[in.ID], "running")
		writeJSON(w, status, sandboxJSON{ClientID: in.Node, EnvdAccessToken: apiKey(r), EnvdVersion: EnvdVersion,
			SandboxID: in.ID, TemplateID: l.TemplateID, Alias: in.Project})
		return nil
	}
}
