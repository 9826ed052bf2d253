package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
)

// idleNodeConfig is a node whose idle reaper and activity flush look
// often, so an idle setting of seconds is honoured within a fraction.
func idleNodeConfig() *node.Config {
	return &node.Config{DefaultTTL: time.Hour, IdleInterval: 250 * time.Millisecond, ActivityFlush: 250 * time.Millisecond}
}

// waitIdleStopped waits for the idle reaper to stop and hibernate
// instance id.
func waitIdleStopped(t *testing.T, c *client.Client, id string) types.Instance {
	t.Helper()
	var got types.Instance
	require.Eventually(t, func() bool {
		var err error
		got, err = c.GetInstance(ctx(t), id)
		return err == nil && got.State == types.StateStopped && got.Reason == envd.ReasonIdle && got.HibernatedVersion > 0
	}, 90*time.Second, 250*time.Millisecond, "the idle reaper stops and saves the instance")
	return got
}

// An instance left idle is saved as a non-current version and stopped by
// the node; an exec with wake brings it back Running with its files, on
// the same node and on another; a client that does not wait gets 503
// waking with a Retry-After.
func TestRootIdleStopAndWake(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	a, ca := startJoiningNode(t, "node-idle-a", idleNodeConfig())
	b, cb := startJoiningNode(t, "node-idle-b", idleNodeConfig())
	p := fmt.Sprintf("idle-%d", projectSeq.Add(1))
	proj, err := ca.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase,
		Idle: &types.IdleSetting{After: "3s", Action: types.IdleActionHibernate}})
	require.NoError(t, err)
	require.Equal(t, &types.IdleSetting{After: "3s", Action: types.IdleActionHibernate}, proj.Idle)

	in, err := ca.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = ca.DeleteInstance(context.Background(), in.ID) })
	res, err := ca.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "echo work in progress > /root/idle.txt"}})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, res.Stderr)
	shown, err := ca.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, "3s", shown.IdleAfter)
	require.NotNil(t, shown.IdleActionAt, "show tells when the idle action runs")

	// Left idle: saved, stopped, freed.
	got := waitIdleStopped(t, ca, in.ID)
	vs, err := ca.ListVersions(c, p)
	require.NoError(t, err)
	idx := slices.IndexFunc(vs, func(v types.Version) bool { return v.Number == got.HibernatedVersion })
	require.GreaterOrEqual(t, idx, 0, "the idle version is listed")
	assert.False(t, vs[idx].Current, "and not current")
	assert.Contains(t, vs[idx].Message, "idle stop")
	require.Eventually(t, func() bool {
		st, err := a.Runtime().Status(c, in.ID)
		return err == nil && !st.Exists
	}, 30*time.Second, 100*time.Millisecond, "its container and layer are freed")

	// Exec with wake on the same node: Running again, the file intact.
	res, err = ca.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/root/idle.txt"}, Wake: true})
	require.NoError(t, err)
	assert.Equal(t, "work in progress\n", res.Stdout)
	now, err := ca.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, now.State)
	assert.Equal(t, "node-idle-a", now.Node)

	// Without wake, a stopped instance is refused as before.
	waitIdleStopped(t, ca, in.ID)
	_, err = ca.Exec(c, in.ID, types.ExecRequest{Args: []string{"true"}})
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)

	// A client that does not wait: 503 waking with Retry-After; the wake
	// goes on, here on node B, and the retry answers.
	body, _ := json.Marshal(types.ExecRequest{Args: []string{"cat", "/root/idle.txt"}, Wake: true})
	req, err := http.NewRequestWithContext(c, http.MethodPost, b.URL+"/v1/instances/"+in.ID+"/exec", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+b.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Prefer", "wait=0")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	var eb types.ErrorBody
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&eb))
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "waking", eb.Error.Code)
	assert.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Eventually(t, func() bool {
		res, err = cb.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/root/idle.txt"}, Wake: true})
		return err == nil
	}, 60*time.Second, time.Second, "the retry answers once the instance runs")
	assert.Equal(t, "work in progress\n", res.Stdout, "woken on the other node with its files")
	now, err = cb.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, "node-idle-b", now.Node)

	// An open terminal keeps it running past the idle setting.
	stdinR, stdinW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := cb.ExecStream(c, in.ID, types.ExecRequest{Args: []string{"cat"}, Wake: true},
			types.Stdio{Stdin: stdinR, Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}})
		done <- err
	}()
	time.Sleep(6 * time.Second)
	now, err = cb.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, now.State, "an open session is use")
	assert.Equal(t, 1, now.ActiveSessions)
	require.NoError(t, stdinW.Close())
	require.NoError(t, <-done)
	waitIdleStopped(t, cb, in.ID)
}

// A proxied request to an idle-stopped (hibernated) instance wakes it: the
// instance runs again with its files, and once its dev server is started
// again the proxy answers with them.
func TestRootIdleWokenByProxiedRequest(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	n, cl := startJoiningNode(t, "node-idle-proxy", idleNodeConfig())
	p := fmt.Sprintf("idle-proxy-%d", projectSeq.Add(1))
	_, err := cl.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase,
		Idle: &types.IdleSetting{After: "3s", Action: types.IdleActionHibernate}})
	require.NoError(t, err)
	in, err := cl.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cl.DeleteInstance(context.Background(), in.ID) })
	res, err := cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "mkdir -p /www && echo kept > /www/index.html"}})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, res.Stderr)
	waitIdleStopped(t, cl, in.ID)

	get := func() (int, string) {
		req, err := http.NewRequestWithContext(c, http.MethodGet, n.URL+"/v1/instances/"+in.ID+"/ports/8080/index.html", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+n.Token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	status, body := get()
	assert.Equal(t, http.StatusBadGateway, status, "woken, but its dev server did not survive the stop: %s", body)
	assert.Contains(t, body, "port_unreachable")
	now, err := cl.GetInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, now.State, "the proxied request woke it")

	res, err = cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "httpd -p 127.0.0.1:8080 -h /www"}})
	require.NoError(t, err)
	require.Zero(t, res.ExitCode, res.Stderr)
	require.Eventually(t, func() bool {
		status, body := get()
		return status == http.StatusOK && body == "kept\n"
	}, 20*time.Second, 200*time.Millisecond, "its files are intact")
}
