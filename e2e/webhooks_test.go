package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// hookReceiver is a webhook receiver on loopback: it keeps every request
// it gets, answers 204, and can be stopped and started again on its
// address.
type hookReceiver struct {
	addr string
	mu   sync.Mutex
	got  []received
	srv  *http.Server
	more chan struct{} // a request came
}

type received struct {
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"` // base64
	event   types.Event
	attempt int
}

func startReceiver(t *testing.T) *hookReceiver {
	r := &hookReceiver{addr: "127.0.0.1:0", more: make(chan struct{}, 1)}
	r.start(t)
	t.Cleanup(r.stop)
	return r
}

func (r *hookReceiver) start(t *testing.T) {
	t.Helper()
	var ln net.Listener
	var err error
	// The address of a stopped receiver is taken again; another process
	// may hold it for a moment.
	for range 50 {
		if ln, err = net.Listen("tcp", r.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err)
	r.addr = ln.Addr().String()
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		rec := received{Headers: map[string]string{}, Body: base64.StdEncoding.EncodeToString(body)}
		for _, h := range []string{types.WebhookIDHeader, types.WebhookEventHeader, types.WebhookTimestampHeader, types.WebhookSignatureHeader, types.WebhookAttemptHeader} {
			rec.Headers[h] = req.Header.Get(h)
		}
		_ = json.Unmarshal(body, &rec.event)
		rec.attempt, _ = strconv.Atoi(req.Header.Get(types.WebhookAttemptHeader))
		r.mu.Lock()
		r.got = append(r.got, rec)
		r.mu.Unlock()
		select {
		case r.more <- struct{}{}:
		default:
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go r.srv.Serve(ln) //nolint:errcheck
}

func (r *hookReceiver) stop() {
	if r.srv != nil {
		r.srv.Close()
	}
}

func (r *hookReceiver) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// awaitDeliveries waits until done(log) holds for the hook's delivery
// log (newest first), looking again whenever the receiver gets a request
// and otherwise every 200 ms (a failed try is not seen by the receiver).
func awaitDeliveries(t *testing.T, c *client.Client, r *hookReceiver, hook, what string, done func([]types.WebhookDelivery) bool) []types.WebhookDelivery {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for {
		log, err := c.WebhookDeliveries(ctx(t), hook)
		require.NoError(t, err)
		if done(log) {
			return log
		}
		select {
		case <-deadline:
			t.Fatalf("waiting for %s: delivery log %+v", what, log)
		case <-r.more:
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func allDelivered(n int) func([]types.WebhookDelivery) bool {
	return func(log []types.WebhookDelivery) bool {
		if len(log) < n {
			return false
		}
		for _, d := range log {
			if d.State != types.DeliveryDelivered {
				return false
			}
		}
		return true
	}
}

// verifySnippet is docs/api.md's Python signature check, as written there.
func verifySnippet(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("../docs/api.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "<!-- webhook-verify:begin -->\n```python\n")
	require.True(t, ok, "docs/api.md has the webhook-verify snippet")
	code, _, ok := strings.Cut(rest, "```\n<!-- webhook-verify:end -->")
	require.True(t, ok)
	return code
}

// verifyAll runs the documented snippet on each delivery and returns its
// verdicts.
func verifyAll(t *testing.T, secret string, got []received) []bool {
	t.Helper()
	py, err := exec.LookPath("python3")
	require.NoError(t, err, "python3 runs the documented signature check")
	dir := t.TempDir()
	in, err := json.Marshal(got)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "got.json"), in, 0o600))
	script := verifySnippet(t) + `
import base64, json, sys
for d in json.load(open(sys.argv[1])):
    print(verify(sys.argv[2], d["headers"], base64.b64decode(d["body"])))
`
	out, err := commandContext(ctx(t), py, "-c", script, filepath.Join(dir, "got.json"), secret).CombinedOutput()
	require.NoError(t, err, "%s", out)
	var verdicts []bool
	for _, line := range strings.Fields(string(out)) {
		verdicts = append(verdicts, line == "True")
	}
	return verdicts
}

// A loopback receiver gets a tenant's events signed and in order; while
// it is down the events wait, are retried (attempts counted in the log and
// the Envd-Webhook-Attempt header), and arrive in order once it is back.
// The documented snippet verifies every signature and refuses a tampered
// body. URLs the node must not reach are refused with a stable code.
func TestRootWebhooks(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	tenant, tc := newTenant(t, "wh")
	_, err := tc.CreateProject(c, types.CreateProjectRequest{Name: "hooked", Base: fixtureBase})
	require.NoError(t, err)
	r := startReceiver(t)

	hook, err := tc.CreateWebhook(c, types.WebhookRequest{URL: "http://" + r.addr + "/hook", Events: []string{"instance.state", "operation.*"}, Description: "e2e"})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(hook.Secret, "whsec_"), "the secret is shown at creation: %+v", hook)
	hooks, err := tc.ListWebhooks(c)
	require.NoError(t, err)
	require.Len(t, hooks, 1)
	assert.Empty(t, hooks[0].Secret, "the secret is never shown again")
	assert.Equal(t, []string{"instance.state", "operation.*"}, hooks[0].Events)
	others, err := env.c.ListWebhooks(c)
	require.NoError(t, err)
	for _, h := range others {
		assert.NotEqual(t, hook.ID, h.ID, "another tenant lists the hook of %s", tenant)
	}

	// Events while the receiver is up.
	in, err := tc.CreateInstance(c, "hooked", types.CreateInstanceRequest{Retain: true})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = tc.DeleteInstance(context.Background(), in.ID) })
	op, err := tc.Save(c, in.ID, types.SaveRequest{Message: "hooked"}, "")
	require.NoError(t, err)
	op, err = tc.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	require.Equal(t, types.OpSucceeded, op.State, "%+v", op.Error)
	_, err = tc.StopInstance(c, in.ID)
	require.NoError(t, err)
	lastIs := func(state types.InstanceState) func([]types.WebhookDelivery) bool {
		return func(log []types.WebhookDelivery) bool {
			if !allDelivered(1)(log) || log[0].Event.Type != types.WebhookInstanceState {
				return false
			}
			var got types.Instance
			return json.Unmarshal(log[0].Event.Data, &got) == nil && got.State == state
		}
	}
	log := awaitDeliveries(t, tc, r, hook.ID, "the stop's events", lastIs(types.StateStopped))
	up := len(log)

	var states []types.InstanceState
	sawSave := false
	for _, g := range r.received() {
		switch g.event.Type {
		case types.WebhookInstanceState:
			var got types.Instance
			require.NoError(t, json.Unmarshal(g.event.Data, &got))
			assert.Equal(t, in.ID, got.ID)
			assert.Equal(t, "hooked", got.Project)
			states = append(states, got.State)
		case "operation.save":
			var got types.Operation
			require.NoError(t, json.Unmarshal(g.event.Data, &got))
			assert.Equal(t, op.ID, got.ID)
			assert.Equal(t, types.OpSucceeded, got.State)
			assert.JSONEq(t, string(op.Result), string(got.Result))
			sawSave = true
		}
		assert.Equal(t, 1, g.attempt, "delivered at the first try while the receiver was up")
	}
	assert.True(t, sawSave, "the save's result was sent")
	require.NotEmpty(t, states)
	assert.Equal(t, types.StatePending, states[0], "states: %v", states)
	assert.Contains(t, states, types.StateRunning)
	assert.Equal(t, types.StateStopped, states[len(states)-1], "states: %v", states)

	// The receiver goes down; events wait and are retried.
	r.stop()
	_, err = tc.StartInstance(c, in.ID)
	require.NoError(t, err)
	_, err = tc.StopInstance(c, in.ID)
	require.NoError(t, err)
	awaitDeliveries(t, tc, r, hook.ID, "retries while the receiver is down", func(log []types.WebhookDelivery) bool {
		head := log[len(log)-1] // the oldest pending one is the one being tried
		for i := len(log) - 1; i >= 0; i-- {
			if log[i].State == types.DeliveryPending {
				head = log[i]
				break
			}
		}
		return len(log) > up && head.State == types.DeliveryPending && head.Attempts >= 2 && head.LastError != "" && head.ResponseCode == 0
	})

	// Back up: everything arrives, in order.
	r.start(t)
	log = awaitDeliveries(t, tc, r, hook.ID, "the events after the receiver came back", lastIs(types.StateStopped))
	require.Greater(t, len(log), up)
	// The test event goes after everything else.
	test, err := tc.TestWebhook(c, hook.ID)
	require.NoError(t, err)
	assert.Equal(t, types.WebhookTest, test.Event.Type)
	log = awaitDeliveries(t, tc, r, hook.ID, "the test event", func(log []types.WebhookDelivery) bool {
		return allDelivered(1)(log) && log[0].ID == test.ID
	})

	got := r.received()
	require.Len(t, got, len(log), "each delivery arrived once")
	for i, g := range got {
		d := log[len(log)-1-i] // the log is newest first
		assert.Equal(t, strconv.FormatInt(d.ID, 10), g.Headers[types.WebhookIDHeader], "delivery %d arrived in order", i)
		assert.Equal(t, d.Event.Seq, g.event.Seq)
		assert.Equal(t, d.Event.Type, g.Headers[types.WebhookEventHeader])
		assert.Equal(t, d.Attempts, g.attempt, "delivery %d: the try that arrived is the log's last", d.ID)
		assert.Equal(t, http.StatusNoContent, d.ResponseCode)
		if i > 0 {
			assert.Greater(t, g.event.Seq, got[i-1].event.Seq, "seqs increase")
		}
	}
	assert.GreaterOrEqual(t, got[up].attempt, 2, "the first event after the outage was tried while the receiver was down")
	assert.Equal(t, types.WebhookTest, got[len(got)-1].event.Type)

	// Every signature verifies with the documented snippet; a tampered
	// body, or the wrong secret, does not.
	for i, ok := range verifyAll(t, hook.Secret, got) {
		assert.True(t, ok, "delivery %d: signature", i)
	}
	tampered := got[0]
	tampered.Body = base64.StdEncoding.EncodeToString([]byte(`{"seq":1,"type":"forged"}`))
	assert.Equal(t, []bool{false}, verifyAll(t, hook.Secret, []received{tampered}))
	assert.Equal(t, []bool{false}, verifyAll(t, "whsec_wrong", got[:1]))

	// URLs the node must not reach, with their stable code and reason.
	running, err := tc.StartInstance(c, in.ID)
	require.NoError(t, err)
	require.NotEmpty(t, running.Address, "a running instance has an address")
	for _, bad := range []struct{ url, reason string }{
		{"http://169.254.169.254/latest/meta-data/", "address"},
		{"http://[fe80::1]/hook", "address"},
		{"ftp://" + r.addr + "/hook", "scheme"},
		{"http://" + running.Address + ":8080/hook", "address"},
	} {
		_, err := tc.CreateWebhook(c, types.WebhookRequest{URL: bad.url})
		var e *types.Error
		require.True(t, errors.As(err, &e), "%s: %v", bad.url, err)
		assert.Equal(t, http.StatusBadRequest, e.Status, bad.url)
		assert.Equal(t, "invalid_argument", e.Code, bad.url)
		assert.Equal(t, map[string]any{"field": "url", "reason": bad.reason}, e.Details, bad.url)
	}
	_, err = tc.CreateWebhook(c, types.WebhookRequest{URL: "http://" + r.addr + "/", Events: []string{"instance.created"}})
	var e *types.Error
	require.True(t, errors.As(err, &e), "%v", err)
	assert.Equal(t, "invalid_argument", e.Code)

	// Removing the hook removes its log; another tenant cannot.
	_, err = env.c.DeleteWebhook(c, hook.ID)
	require.True(t, errors.As(err, &e), "%v", err)
	assert.Equal(t, "not_found", e.Code)
	_, err = tc.DeleteWebhook(c, hook.ID)
	require.NoError(t, err)
	_, err = tc.WebhookDeliveries(c, hook.ID)
	require.True(t, errors.As(err, &e), "%v", err)
	assert.Equal(t, "not_found", e.Code)
}
