package client_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
)

// newServer serves api.New(fake core), wrapped by wrap when not nil.
func newServer(t *testing.T, wrap func(http.Handler) http.Handler) (*apitest.Fakes, *client.Client) {
	t.Helper()
	core := apitest.New()
	h, err := api.New(core.Parts(), api.WithEventPollInterval(5*time.Millisecond))
	require.NoError(t, err)
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := client.New(srv.URL+"/", apitest.Token, client.WithPollInterval(10*time.Millisecond))
	require.NoError(t, err)
	return core, c
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	core, c := newServer(t, nil)
	ctx := context.Background()
	two := 2
	op := core.Operations.NewOperation("save", "i-1")
	core.Operations.AppendEvent(op.ID, "step", "one")

	for _, tc := range []struct {
		name string
		do   func() (any, error)
		call string // the core method the route must reach
		args []any
		want any
	}{
		{"Info", func() (any, error) { return c.Info(ctx) }, "Info", nil,
			types.Info{Version: "test", Node: "node-1", Registry: "127.0.0.1:5000", Components: map[string]string{"containerd": "v2.4.2"}}},
		{"ListImages", func() (any, error) { return c.ListImages(ctx) }, "ListImages", nil, []types.Image{}},
		{"CreateProject", func() (any, error) {
			return c.CreateProject(ctx, types.CreateProjectRequest{Name: "web", Base: "busybox", Excludes: []string{"/cache"}, Compression: "zstd"})
		}, "CreateProject", []any{types.CreateProjectRequest{Name: "web", Base: "busybox", Excludes: []string{"/cache"}, Compression: "zstd"}, ""},
			types.Project{Name: "web", BaseImage: "busybox", Current: 1, Excludes: []string{"/cache"}, Compression: "zstd", CreatedAt: apitest.Epoch}},
		{"CreateProject with key", func() (any, error) {
			return c.CreateProject(ctx, types.CreateProjectRequest{Name: "web", Base: "busybox"}, client.WithIdempotencyKey("k-1"))
		}, "CreateProject", []any{types.CreateProjectRequest{Name: "web", Base: "busybox"}, "k-1"}, nil},
		{"ListProjects", func() (any, error) { return c.ListProjects(ctx) }, "ListProjects", nil, []types.Project{}},
		{"GetProject", func() (any, error) { return c.GetProject(ctx, "we b") }, "GetProject", []any{"we b"},
			types.Project{Name: "we b", BaseImage: "busybox", Current: 1, Compression: "estargz", CreatedAt: apitest.Epoch}},
		{"DeleteProject", func() (any, error) { return nil, c.DeleteProject(ctx, "web") }, "DeleteProject", []any{"web"}, nil},
		{"CreateInstance", func() (any, error) {
			return c.CreateInstance(ctx, "web", types.CreateInstanceRequest{Version: 2, TTL: "1h", Retain: true})
		}, "CreateInstance", []any{"web", types.CreateInstanceRequest{Version: 2, TTL: "1h", Retain: true}, ""},
			types.Instance{ID: "i-1", Project: "web", Node: "node-1", Version: 2, Generation: 1, State: "Running",
				Reason: "started", Retain: true, CreatedAt: apitest.Epoch, LastTransitionAt: apitest.Epoch}},
		{"CreateInstance with key", func() (any, error) {
			return c.CreateInstance(ctx, "web", types.CreateInstanceRequest{TTL: "1h"}, client.WithIdempotencyKey("k-2"))
		}, "CreateInstance", []any{"web", types.CreateInstanceRequest{TTL: "1h"}, "k-2"}, nil},
		{"StopInstance", func() (any, error) { return c.StopInstance(ctx, "i-9") }, "InstanceVerb", []any{"i-9", "stop"},
			types.Instance{ID: "i-9", Project: "p", Node: "node-1", Version: 1, Generation: 1, State: "Stopped",
				Reason: "user_stop", CreatedAt: apitest.Epoch, LastTransitionAt: apitest.Epoch}},
		{"StartInstance", func() (any, error) { return c.StartInstance(ctx, "i-9") }, "InstanceVerb", []any{"i-9", "start"},
			types.Instance{ID: "i-9", Project: "p", Node: "node-1", Version: 1, Generation: 2, State: "Running",
				Reason: "started", CreatedAt: apitest.Epoch, LastTransitionAt: apitest.Epoch}},
		{"PauseInstance", func() (any, error) { return c.PauseInstance(ctx, "i-9") }, "InstanceVerb", []any{"i-9", "pause"},
			types.Instance{ID: "i-9", Project: "p", Node: "node-1", Version: 1, Generation: 1, State: "Paused",
				Reason: "user_pause", CreatedAt: apitest.Epoch, LastTransitionAt: apitest.Epoch}},
		{"InstanceVerb", func() (any, error) { return c.InstanceVerb(ctx, "i-9", "pause") }, "InstanceVerb", []any{"i-9", "pause"},
			types.Instance{ID: "i-9", Project: "p", Node: "node-1", Version: 1, Generation: 1, State: "Paused",
				Reason: "user_pause", CreatedAt: apitest.Epoch, LastTransitionAt: apitest.Epoch}},
		{"ResumeInstance", func() (any, error) { return c.ResumeInstance(ctx, "i-9") }, "InstanceVerb", []any{"i-9", "resume"},
			types.Instance{ID: "i-9", Project: "p", Node: "node-1", Version: 1, Generation: 1, State: "Running",
				Reason: "user_resume", CreatedAt: apitest.Epoch, LastTransitionAt: apitest.Epoch}},
		{"RenewInstance", func() (any, error) {
			in, err := c.RenewInstance(ctx, "i-9", "90m")
			if in.ExpiresAt != nil {
				at := in.ExpiresAt.UTC()
				in.ExpiresAt = &at
			}
			return in, err
		}, "RenewInstance", []any{"i-9", "90m"},
			types.Instance{ID: "i-9", Project: "p", Node: "node-1", Version: 1, Generation: 1, State: "Running",
				Reason: "started", ExpiresAt: ptr(apitest.Epoch.Add(90 * time.Minute)), CreatedAt: apitest.Epoch, LastTransitionAt: apitest.Epoch}},
		{"ListInstances project", func() (any, error) { return c.ListInstances(ctx, "web") }, "ListInstances", []any{"web"}, []types.Instance{}},
		{"ListInstances all", func() (any, error) { return c.ListInstances(ctx, "") }, "ListInstances", []any{""}, []types.Instance{}},
		{"GetInstance", func() (any, error) { return c.GetInstance(ctx, "i-9") }, "GetInstance", []any{"i-9"},
			types.Instance{ID: "i-9", Project: "p", Node: "node-1", Version: 1, Generation: 1, State: "Running",
				Reason: "started", CreatedAt: apitest.Epoch, LastTransitionAt: apitest.Epoch}},
		{"DeleteInstance", func() (any, error) { return c.DeleteInstance(ctx, "i-9") }, "DeleteInstance", []any{"i-9"},
			types.Instance{ID: "i-9", Project: "p", Node: "node-1", Version: 1, Generation: 1, State: "Terminated",
				Reason: "user_delete", CreatedAt: apitest.Epoch, LastTransitionAt: apitest.Epoch}},
		{"Exec", func() (any, error) {
			return c.Exec(ctx, "i-9", types.ExecRequest{Args: []string{"echo", "hi"}, Env: []string{"A=1"}, Cwd: "/w", Stdin: "in"})
		}, "Exec", []any{"i-9", types.ExecRequest{Args: []string{"echo", "hi"}, Env: []string{"A=1"}, Cwd: "/w", Stdin: "in"}},
			types.ExecResult{Stdout: "[echo hi]\n"}},
		{"ListVersions", func() (any, error) { return c.ListVersions(ctx, "web") }, "ListVersions", []any{"web"}, []types.Version{}},
		{"GetVersion", func() (any, error) { return c.GetVersion(ctx, "web", 3) }, "GetVersion", []any{"web", 3},
			types.Version{Project: "web", Number: 3, Kind: "snapshot", State: "ready", CreatedAt: apitest.Epoch}},
		{"SetCurrent", func() (any, error) {
			return c.SetCurrent(ctx, "web", types.SetCurrentRequest{Version: 3, ExpectedCurrent: &two})
		}, "SetCurrent", []any{"web", types.SetCurrentRequest{Version: 3, ExpectedCurrent: &two}},
			types.Project{Name: "web", Current: 3, CreatedAt: apitest.Epoch}},
		{"PinVersion", func() (any, error) { return c.PinVersion(ctx, "web", 3) }, "PinVersion", []any{"web", 3, true},
			types.Version{Project: "web", Number: 3, Kind: "snapshot", State: "ready", Pinned: true, CreatedAt: apitest.Epoch}},
		{"UnpinVersion", func() (any, error) { return c.UnpinVersion(ctx, "web", 3) }, "PinVersion", []any{"web", 3, false},
			types.Version{Project: "web", Number: 3, Kind: "snapshot", State: "ready", CreatedAt: apitest.Epoch}},
		{"GetOperation", func() (any, error) { return c.GetOperation(ctx, op.ID) }, "GetOperation", []any{op.ID}, op},
		{"OperationEvents", func() (any, error) { return c.OperationEvents(ctx, op.ID, 0) }, "OperationEvents", []any{op.ID, 0},
			[]types.Event{{Seq: 1, At: apitest.Epoch, Type: "step", Message: "one"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.do()
			require.NoError(t, err)
			if tc.want != nil {
				assert.Equal(t, tc.want, got)
			}
			call, ok := core.LastCall(tc.call)
			require.True(t, ok)
			assert.Equal(t, tc.args, call.Args)
			if tc.call != "Info" { // Info needs a token but takes no principal
				assert.Equal(t, "t1", call.Principal.Tenant)
			}
		})
	}
}

func TestSaveAndCancel(t *testing.T) {
	t.Parallel()
	core, c := newServer(t, nil)
	ctx := context.Background()
	op, err := c.Save(ctx, "i-1", types.SaveRequest{Message: "m"}, "key-1")
	require.NoError(t, err)
	assert.Equal(t, types.OpRunning, op.State)
	call, _ := core.LastCall("Save")
	assert.Equal(t, []any{"i-1", types.SaveRequest{Message: "m"}, "key-1"}, call.Args)

	op, err = c.CancelOperation(ctx, op.ID)
	require.NoError(t, err)
	assert.Equal(t, types.OpCanceled, op.State)
}

func TestRestore(t *testing.T) {
	t.Parallel()
	core, c := newServer(t, nil)
	op, err := c.Restore(context.Background(), "web", types.CreateInstanceRequest{Version: 3}, client.WithIdempotencyKey("k-2"))
	require.NoError(t, err)
	assert.Equal(t, types.OpKindRestore, op.Kind)
	call, ok := core.LastCall("Restore")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.CreateInstanceRequest{Version: 3}, "k-2"}, call.Args)
}

func TestImportImage(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		types []string
	)
	core, c := newServer(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			types = append(types, r.Header.Get("Content-Type"))
			mu.Unlock()
			h.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()
	plain := []byte("a tar stream, as far as this test cares")
	img, err := c.ImportImage(ctx, "busybox", bytes.NewReader(plain))
	require.NoError(t, err)
	assert.Equal(t, "busybox", img.Name)
	assert.Equal(t, int64(len(plain)), img.Size)
	call, _ := core.LastCall("ImportImage")
	assert.Equal(t, []any{"busybox", plain}, call.Args, "the body arrives as sent")

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(plain)
	require.NoError(t, zw.Close())
	_, err = c.ImportImage(ctx, "busybox-gz", bytes.NewReader(gz.Bytes()))
	require.NoError(t, err)
	call, _ = core.LastCall("ImportImage")
	assert.Equal(t, []any{"busybox-gz", gz.Bytes()}, call.Args)

	assert.Equal(t, []string{"application/x-tar", "application/gzip"}, types)
}

func TestErrors(t *testing.T) {
	t.Parallel()
	core, c := newServer(t, nil)
	ctx := context.Background()
	core.Projects.GetProjectFunc = func(_ context.Context, name string) (types.Project, error) {
		return types.Project{}, fmt.Errorf("project %q: %w", name, errdefs.ErrNotFound)
	}
	core.Versions.SetCurrentFunc = func(context.Context, string, types.SetCurrentRequest) (types.Project, error) {
		return types.Project{}, fmt.Errorf("current moved: %w", errdefs.ErrConflict)
	}

	_, err := c.GetProject(ctx, "web")
	require.Error(t, err)
	var e *types.Error
	require.ErrorAs(t, err, &e)
	assert.Len(t, e.RequestID, 24, "the server's generated request id, to quote")
	assert.Equal(t, &types.Error{Status: 404, Code: "not_found", Message: `project "web": not found`, RequestID: e.RequestID}, e)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	assert.NotErrorIs(t, err, errdefs.ErrConflict)
	assert.Equal(t, `project "web": not found (not_found)`, err.Error())

	_, err = c.SetCurrent(ctx, "web", types.SetCurrentRequest{Version: 2})
	assert.ErrorIs(t, err, errdefs.ErrConflict)

	core.Lifecycle.InstanceVerbFunc = func(_ context.Context, id, _ string) (types.Instance, error) {
		return types.Instance{}, errdefs.WithDetails(fmt.Errorf("instance %q is Stopped: %w", id, errdefs.ErrFailedPrecondition),
			map[string]any{"state": "Stopped"})
	}
	_, err = c.PauseInstance(ctx, "i-1")
	require.ErrorAs(t, err, &e)
	assert.Equal(t, 409, e.Status)
	assert.Equal(t, "failed_precondition", e.Code)
	assert.Equal(t, map[string]any{"state": "Stopped"}, e.Details)
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)

	_, err = c.InstanceVerb(ctx, "i-1", "reboot") // not a verb the server serves
	require.ErrorAs(t, err, &e)
	assert.Equal(t, 404, e.Status)
	assert.Equal(t, "not_found", e.Code)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	wrong, err := client.New(c.BaseURL(), "wrong")
	require.NoError(t, err)
	_, err = wrong.Info(ctx)
	assert.ErrorIs(t, err, errdefs.ErrUnauthenticated)
}

func TestErrorWithoutJSONBody(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "proxy-1")
		http.Error(w, "upstream down", http.StatusBadGateway)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "t")
	require.NoError(t, err)
	_, err = c.Info(context.Background())
	var e *types.Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, &types.Error{Status: 502, Code: "unavailable", Message: "upstream down", RequestID: "proxy-1"}, e)
	assert.ErrorIs(t, err, errdefs.ErrUnavailable)
}

// runOperation appends events 1..n to op, the last ones while the client is
// already waiting, then finishes it.
func runOperation(core *apitest.Fakes, id string, n int) {
	for i := 1; i <= n; i++ {
		core.Operations.AppendEvent(id, "step", fmt.Sprintf("step %d", i))
		time.Sleep(5 * time.Millisecond)
	}
	core.Operations.Finish(id, types.OpSucceeded, types.SaveResult{Version: 2, Current: true}, nil)
}

func seqs(evs []types.Event) []int {
	out := []int{}
	for _, e := range evs {
		out = append(out, e.Seq)
	}
	return out
}

func TestWaitOperation(t *testing.T) {
	t.Parallel()
	core, c := newServer(t, nil)
	op := core.Operations.NewOperation("save", "i-1")
	go runOperation(core, op.ID, 5)

	var got []types.Event
	final, err := c.WaitOperation(context.Background(), op.ID, func(e types.Event) { got = append(got, e) })
	require.NoError(t, err)
	assert.Equal(t, types.OpSucceeded, final.State)
	assert.JSONEq(t, `{"project":"","version":2,"current":true,"conflict":false,"expected_current":0,"image":"",
		"freeze_ms":0,"spool_ms":0,"encode_ms":0,"push_ms":0,"commit_ms":0,"total_ms":0,"layer_bytes":0,"entries":0,"compression":""}`,
		string(final.Result))
	assert.Equal(t, []int{1, 2, 3, 4, 5}, seqs(got))
	assert.Equal(t, "step 3", got[2].Message)
}

// dropper cuts the first event stream after `allow` events: it swallows
// the rest and ends the handler by canceling its request context, so the
// client sees the stream end without the end event.
type dropper struct {
	h     http.Handler
	allow int

	mu          sync.Mutex
	streams     int
	lastEventID []string
}

func (d *dropper) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(r.URL.Path, "/events") || r.Header.Get("Accept") != "text/event-stream" {
		d.h.ServeHTTP(w, r)
		return
	}
	d.mu.Lock()
	d.streams++
	n := d.streams
	d.lastEventID = append(d.lastEventID, r.Header.Get("Last-Event-ID"))
	d.mu.Unlock()
	if n > 1 {
		d.h.ServeHTTP(w, r)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	d.h.ServeHTTP(&cutWriter{ResponseWriter: w, left: d.allow, cancel: cancel}, r.WithContext(ctx))
}

type cutWriter struct {
	http.ResponseWriter
	left   int
	cancel func()
	cut    bool
}

func (w *cutWriter) Write(p []byte) (int, error) {
	if !w.cut && bytes.HasPrefix(p, []byte("id: ")) {
		if w.left == 0 {
			w.cut = true
			w.cancel()
		}
		w.left--
	}
	if w.cut {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

func (w *cutWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

func TestWaitOperationReconnects(t *testing.T) {
	t.Parallel()
	d := &dropper{allow: 2}
	core, c := newServer(t, func(h http.Handler) http.Handler { d.h = h; return d })
	op := core.Operations.NewOperation("save", "i-1")
	go runOperation(core, op.ID, 6)

	var got []types.Event
	final, err := c.WaitOperation(context.Background(), op.ID, func(e types.Event) { got = append(got, e) })
	require.NoError(t, err)
	assert.Equal(t, types.OpSucceeded, final.State)
	assert.Equal(t, []int{1, 2, 3, 4, 5, 6}, seqs(got), "no event lost or repeated")
	d.mu.Lock()
	defer d.mu.Unlock()
	require.GreaterOrEqual(t, d.streams, 2)
	assert.Equal(t, []string{"", "2"}, d.lastEventID[:2], "the reconnect resumes after the last event seen")
}

func TestWaitOperationFallsBackToPolling(t *testing.T) {
	t.Parallel()
	var streams int
	var mu sync.Mutex
	core, c := newServer(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Accept") == "text/event-stream" {
				mu.Lock()
				streams++
				mu.Unlock()
				http.Error(w, "no streams here", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(w, r)
		})
	})
	op := core.Operations.NewOperation("save", "i-1")
	go runOperation(core, op.ID, 4)

	var got []types.Event
	final, err := c.WaitOperation(context.Background(), op.ID, func(e types.Event) { got = append(got, e) })
	require.NoError(t, err)
	assert.Equal(t, types.OpSucceeded, final.State)
	assert.Equal(t, []int{1, 2, 3, 4}, seqs(got))
	mu.Lock()
	assert.Equal(t, 3, streams, "the stream is tried a few times before polling")
	mu.Unlock()
}

func TestWaitOperationErrors(t *testing.T) {
	t.Parallel()
	core, c := newServer(t, nil)
	_, err := c.WaitOperation(context.Background(), "op-missing", nil)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	op := core.Operations.NewOperation("save", "i-1")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = c.WaitOperation(ctx, op.ID, nil)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	got, err := c.GetOperation(context.Background(), op.ID)
	require.NoError(t, err)
	assert.Equal(t, types.OpRunning, got.State, "giving up waiting does not cancel the operation")
}

func ptr[T any](v T) *T { return &v }

func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		opt  client.Option
		want string
	}{
		"nil http client":    {client.WithHTTPClient(nil), "http client is nil"},
		"empty user agent":   {client.WithUserAgent(""), "user agent is empty"},
		"zero poll interval": {client.WithPollInterval(0), "poll interval 0s: must be positive"},
		"negative poll":      {client.WithPollInterval(-time.Second), "poll interval -1s: must be positive"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := client.New("http://127.0.0.1:1", "t", client.WithUserAgent("ok"), tc.opt)
			assert.Nil(t, c)
			require.Error(t, err)
			assert.Equal(t, "client: "+tc.want, err.Error())
		})
	}
}
