package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd/node"
)

// One endpoint: a client that talks to one node only reaches an instance
// that another node runs, for every instance route an IDE uses: exec
// (buffered and WebSocket), the file API, the port proxy, save and its
// events, stop and start.
func TestRootOneEndpointForwardsToTheOwningNode(t *testing.T) {
	c := ctx(t)
	nb, cb := startJoiningNode(t, "node-fwd-b", &node.Config{DefaultTTL: time.Hour, PreviewDomain: previewDomain})
	_ = nb
	p := fmt.Sprintf("forward-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	in, err := cb.CreateInstance(c, p, types.CreateInstanceRequest{Retain: true})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cb.DeleteInstance(c, in.ID) })
	require.Equal(t, "node-fwd-b", in.Node)

	a := env.c // the shared node: it does not run the instance
	res, err := a.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "echo hi > /root/f && cat /root/f"}})
	require.NoError(t, err)
	assert.Equal(t, "hi\n", res.Stdout)

	var out bytes.Buffer
	code, err := a.ExecStream(c, in.ID, types.ExecRequest{Args: []string{"cat", "/root/f", "-"}},
		types.Stdio{Stdin: strings.NewReader("streamed\n"), Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "hi\nstreamed\n", out.String())

	// The file API and the port proxy.
	req, err := http.NewRequestWithContext(c, http.MethodGet, env.node.URL+"/v1/instances/"+in.ID+"/files?path=/root/f", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+env.node.Token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, "hi\n", string(body))

	mustShOn(t, cb, in.ID, "mkdir -p /www && echo served-by-b > /www/index.html && (httpd -p 127.0.0.1:8080 -h /www &)")
	require.Eventually(t, func() bool {
		req, _ := http.NewRequestWithContext(c, http.MethodGet, env.node.URL+"/v1/instances/"+in.ID+"/ports/8080/index.html", nil)
		req.Header.Set("Authorization", "Bearer "+env.node.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK && string(b) == "served-by-b\n"
	}, 20*time.Second, 200*time.Millisecond, "the dev server on node B through node A's proxy")

	// The preview host form, asked on node A with a token node B signed.
	tok, err := a.PreviewToken(c, in.ID, 8080, "10m")
	require.NoError(t, err)
	resp, err = http.DefaultClient.Do(portsHostReq(t, 8080, in.ID, "/index.html", &http.Cookie{Name: "envd_preview", Value: tok.Token}))
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, "served-by-b\n", string(body))

	// Save (its events come from the shared database), stop and start.
	op, err := a.Save(c, in.ID, types.SaveRequest{Message: "through a"}, "")
	require.NoError(t, err)
	done, err := a.WaitOperation(c, op.ID, nil)
	require.NoError(t, err)
	assert.Equal(t, types.OpSucceeded, done.State, "%+v", done.Error)
	st, err := a.StopInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateStopped, st.State)
	st, err = a.StartInstance(c, in.ID)
	require.NoError(t, err)
	assert.Equal(t, types.StateRunning, st.State)
	assert.Equal(t, "node-fwd-b", st.Node, "it stays where its layer is")
	res, err = a.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/root/f"}})
	require.NoError(t, err)
	assert.Equal(t, "hi\n", res.Stdout)
}

// mustShOn runs a script through client cl and requires success.
func mustShOn(t *testing.T, cl *client.Client, id, script string) {
	t.Helper()
	res, err := cl.Exec(ctx(t), id, types.ExecRequest{Args: []string{"sh", "-c", script}})
	require.NoError(t, err)
	require.Equalf(t, 0, res.ExitCode, "%s: %s", script, res.Stderr)
}
