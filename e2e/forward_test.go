package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// asker is a node a client talks to: its URL and admin token (for the
// raw HTTP routes), and its client.
type asker struct {
	url, token string
	c          *client.Client
}

// assertForwarded checks one endpoint: a client that talks to node ask
// only reaches the retained instance id that node owner runs, for every
// instance route an IDE uses: exec (buffered and over its WebSocket), the
// file API and its watch stream, the port proxy (path form, host form with
// a preview token, the TCP tunnel), the SSH tunnel, save with its event
// stream, changes, pause, resume, renew, stop and start. Both nodes serve
// previewDomain. The instance is left Running on owner.
func assertForwarded(t *testing.T, ask asker, owner *client.Client, ownerName, id string) {
	t.Helper()
	c := ctx(t)
	a := ask.c
	raw := func(method, path string, body io.Reader) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(c, method, ask.url+path, body)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+ask.token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	// Exec, buffered and over the WebSocket both ways.
	res, err := a.Exec(c, id, types.ExecRequest{Args: []string{"sh", "-c", "echo hi > /root/f && cat /root/f"}})
	require.NoError(t, err)
	assert.Equal(t, "hi\n", res.Stdout)
	var out bytes.Buffer
	code, err := a.ExecStream(c, id, types.ExecRequest{Args: []string{"cat", "/root/f", "-"}},
		types.Stdio{Stdin: strings.NewReader("streamed\n"), Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "hi\nstreamed\n", out.String())

	// The file API: its watch stream (events), a write, a read, a list.
	wctx, stopWatch := context.WithCancel(c)
	var (
		mu      sync.Mutex
		watched []string
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		_ = a.WatchFiles(wctx, id, "/root", func(e types.FileEvent) error {
			mu.Lock()
			watched = append(watched, e.Path)
			mu.Unlock()
			return nil
		})
	})
	require.Eventually(t, func() bool {
		_, err := a.WriteFile(c, id, "/root/w", strings.NewReader("written through the asker\n"))
		require.NoError(t, err)
		mu.Lock()
		defer mu.Unlock()
		for _, p := range watched {
			if p == "/root/w" {
				return true
			}
		}
		return false
	}, 20*time.Second, 500*time.Millisecond, "a watch through the asker sees a write through the asker")
	stopWatch()
	wg.Wait()
	status, body := raw(http.MethodGet, "/v1/instances/"+id+"/files?path=/root/w", nil)
	assert.Equal(t, http.StatusOK, status, body)
	assert.Equal(t, "written through the asker\n", body)
	list, err := a.ListFiles(c, id, "/root")
	require.NoError(t, err)
	var listed []string
	for _, e := range list.Entries {
		listed = append(listed, e.Name)
	}
	assert.Subset(t, listed, []string{"f", "w"})

	// The port proxy: path form, host form with a preview token the owner
	// signed, the TCP tunnel; and the list of listening ports.
	mustShOn(t, owner, id, "mkdir -p /www && echo served-by-"+ownerName+" > /www/index.html && (httpd -p 127.0.0.1:8080 -h /www &)")
	want := "served-by-" + ownerName + "\n"
	require.Eventually(t, func() bool {
		status, body := raw(http.MethodGet, "/v1/instances/"+id+"/ports/8080/index.html", nil)
		return status == http.StatusOK && body == want
	}, 20*time.Second, 200*time.Millisecond, "the dev server through the asker's proxy")
	ports, err := a.ListPorts(c, id)
	require.NoError(t, err)
	var on8080 bool
	for _, p := range ports {
		on8080 = on8080 || p.Port == 8080
	}
	assert.True(t, on8080, "listening ports through the asker: %+v", ports)
	tok, err := a.PreviewToken(c, id, 8080, "10m")
	require.NoError(t, err)
	u, err := url.Parse(ask.url)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(c, http.MethodGet, ask.url+"/index.html", nil)
	require.NoError(t, err)
	req.Host = fmt.Sprintf("8080-%s.%s:%s", id, previewDomain, u.Port())
	req.AddCookie(&http.Cookie{Name: "envd_preview", Value: tok.Token})
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	assert.Equal(t, want, string(b), "the preview host form through the asker")
	conn, err := a.DialPort(c, id, 8080)
	require.NoError(t, err)
	_, err = io.WriteString(conn, "GET /index.html HTTP/1.0\r\n\r\n")
	require.NoError(t, err)
	got, _ := io.ReadAll(conn)
	conn.Close()
	assert.Contains(t, string(got), want, "the TCP tunnel through the asker")

	// The SSH tunnel reaches the owner's SSH endpoint.
	sshConn, err := a.SSHTunnel(c, id)
	require.NoError(t, err)
	banner := make([]byte, 8)
	_, err = io.ReadFull(sshConn, banner)
	sshConn.Close()
	require.NoError(t, err)
	assert.Equal(t, "SSH-2.0-", string(banner))

	// Save and its event stream, the changes since.
	var events []string
	op, err := a.Save(c, id, types.SaveRequest{Message: "through the asker"}, "")
	require.NoError(t, err)
	done, err := a.WaitOperation(c, op.ID, func(e types.Event) { events = append(events, e.Type) })
	require.NoError(t, err)
	assert.Equal(t, types.OpSucceeded, done.State, "%+v", done.Error)
	assert.Contains(t, events, "committed", "the save's events through the asker: %v", events)
	mustShOn(t, a, id, "echo after > /root/after")
	ch, err := a.InstanceChanges(c, id, 100)
	require.NoError(t, err)
	var changed []string
	for _, e := range ch.Added {
		changed = append(changed, e.Path)
	}
	assert.Contains(t, strings.Join(changed, " "), "root/after", "changes since the save through the asker")

	// Lifecycle: pause, resume, renew, stop, start; the owner keeps it.
	st, err := a.PauseInstance(c, id)
	require.NoError(t, err)
	assert.Equal(t, types.StatePaused, st.State)
	st, err = a.ResumeInstance(c, id)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, st.State)
	st, err = a.RenewInstance(c, id, "2h")
	require.NoError(t, err)
	require.NotNil(t, st.ExpiresAt)
	assert.True(t, st.ExpiresAt.After(time.Now().Add(time.Hour)), "renewed through the asker")
	st, err = a.StopInstance(c, id)
	require.NoError(t, err)
	assert.Equal(t, types.StateStopped, st.State)
	st, err = a.StartInstance(c, id)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, st.State)
	assert.Equal(t, ownerName, st.Node, "it stays where its layer is")
	res, err = a.Exec(c, id, types.ExecRequest{Args: []string{"cat", "/root/f", "/root/w"}})
	require.NoError(t, err)
	assert.Equal(t, "hi\nwritten through the asker\n", res.Stdout)
}

// mustShOn runs a script through client cl and requires success.
func mustShOn(t *testing.T, cl *client.Client, id, script string) {
	t.Helper()
	res, err := cl.Exec(ctx(t), id, types.ExecRequest{Args: []string{"sh", "-c", script}})
	require.NoError(t, err)
	require.Equalf(t, 0, res.ExitCode, "%s: %s", script, res.Stderr)
}
