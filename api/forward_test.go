package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
)

// A request about an instance another node runs is answered by that node
// through the one the client talks to: buffered calls, the exec WebSocket
// both ways; reading the instance is answered where it arrives; a forwarded
// request is never forwarded again; an owner that does not answer is 503.
func TestForwardToTheOwningNode(t *testing.T) {
	owner, ownerSrv := newServer(t)
	near, nearSrv := newServer(t)
	near.Forward.InstanceOwnerFunc = func(_ context.Context, id string) (string, string, bool, error) {
		switch id {
		case "far-1":
			return "node-b", ownerSrv.URL, false, nil
		case "gone-1":
			return "node-c", "http://127.0.0.1:1", false, nil
		}
		return "", "", true, nil
	}
	c, err := client.New(nearSrv.URL, "test-token")
	require.NoError(t, err)
	ctx := context.Background()

	_, err = c.Exec(ctx, "far-1", types.ExecRequest{Args: []string{"echo", "hi"}})
	require.NoError(t, err)
	call, ok := owner.LastCall("Exec")
	require.True(t, ok, "the owner ran the exec")
	assert.Equal(t, "far-1", call.Args[0])
	_, ok = near.LastCall("Exec")
	assert.False(t, ok, "the node asked did not")

	var out bytes.Buffer
	code, err := c.ExecStream(ctx, "far-1", types.ExecRequest{Args: []string{"cat"}}, types.Stdio{Stdin: strings.NewReader("through two nodes"), Stdout: &out})
	require.NoError(t, err)
	assert.Equal(t, 0, code)
	assert.Equal(t, "through two nodes", out.String(), "the WebSocket passes both ways")
	_, ok = owner.LastCall("ExecStream")
	assert.True(t, ok)

	_, err = c.GetInstance(ctx, "far-1")
	require.NoError(t, err)
	_, ok = owner.LastCall("GetInstance")
	assert.False(t, ok, "reads are answered where they arrive")

	_, err = c.Exec(ctx, "local-1", types.ExecRequest{Args: []string{"true"}})
	require.NoError(t, err)
	_, ok = near.LastCall("Exec")
	assert.True(t, ok, "this node's instance is served here")

	req, err := http.NewRequest(http.MethodPost, nearSrv.URL+"/v1/instances/far-1/stop", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer test-token")
	req.Header.Set(api.ForwardedHeader, "1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	_, ok = owner.LastCall("InstanceVerb")
	assert.True(t, ok, "a client that says it is a node is forwarded like any client")
	_, ok = near.LastCall("InstanceVerb")
	assert.False(t, ok, "the header a client set is not believed")

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = c.Exec(cctx, "gone-1", types.ExecRequest{Args: []string{"true"}})
	require.ErrorIs(t, err, errdefs.ErrUnavailable)
	assert.Contains(t, err.Error(), `node "node-c"`)
	req, err = http.NewRequestWithContext(cctx, http.MethodPost, nearSrv.URL+"/v1/instances/gone-1/exec", strings.NewReader(`{"args":["true"]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer test-token")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, "5", resp.Header.Get("Retry-After"), "a 503 says when to retry")
}

// The node forwards through the transport its peer transport gives for
// the owner, by name (TLS trust of that node, for one); a peer it cannot
// get a transport for is 503 with a Retry-After, and the owner is not
// reached.
func TestForwardThroughThePeerTransport(t *testing.T) {
	owner, ownerSrv := newServer(t)
	near := apitest.New()
	near.Forward.InstanceOwnerFunc = func(_ context.Context, id string) (string, string, bool, error) {
		if id == "refused-1" {
			return "node-c", ownerSrv.URL, false, nil
		}
		return "node-b", ownerSrv.URL, false, nil
	}
	var asked []string
	h, err := api.New(near.Parts(), api.WithForwardKey(testClusterKey), api.WithPeerTransport(func(_ context.Context, node string) (http.RoundTripper, error) {
		asked = append(asked, node)
		if node == "node-c" {
			return nil, fmt.Errorf("node %q recorded a certificate that does not parse: %w", node, errdefs.ErrUnavailable)
		}
		return http.DefaultTransport, nil
	}))
	require.NoError(t, err)
	nearSrv := httptest.NewServer(h)
	t.Cleanup(nearSrv.Close)
	c, err := client.New(nearSrv.URL, "test-token")
	require.NoError(t, err)
	ctx := context.Background()

	_, err = c.Exec(ctx, "far-1", types.ExecRequest{Args: []string{"echo", "hi"}})
	require.NoError(t, err)
	_, ok := owner.LastCall("Exec")
	assert.True(t, ok, "the owner ran the exec")
	assert.Equal(t, []string{"node-b"}, asked)

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, nearSrv.URL+"/v1/instances/refused-1/stop", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer test-token")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(body))
	assert.Equal(t, "5", resp.Header.Get("Retry-After"))
	assert.Contains(t, string(body), "does not parse")
	_, ok = owner.LastCall("InstanceVerb")
	assert.False(t, ok, "the owner was not reached")
}
