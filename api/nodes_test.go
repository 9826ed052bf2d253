package api_test

import (
	"context"
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

// placingCore places every new instance on node-b (at url), but those
// asked with node_selector zone=none, which no node takes.
type placingCore struct {
	*apitest.Cluster
	url string
}

func (p *placingCore) PlaceInstance(ctx context.Context, _ types.Principal, project string, req types.CreateInstanceRequest) (string, string, string, bool, error) {
	if req.NodeSelector["zone"] == "none" {
		return "", "", "", false, errdefs.ErrResourceExhausted
	}
	return "node-b", p.url, "placed on node-b: test", false, nil
}

// A create asked on one node is sent, body and key included, to the node
// placement picks, which records the decision; the node asked creates
// nothing; placement's refusal is the client's answer.
func TestPlacementForwardsTheCreate(t *testing.T) {
	owner := apitest.New()
	var seen string
	owner.Instances.CreateInstanceFunc = func(ctx context.Context, project string, req types.CreateInstanceRequest, key string) (types.Instance, error) {
		seen = types.PlacementFrom(ctx)
		return types.Instance{ID: "i-b", Project: project, Node: "node-b", State: types.StateRunning, Placement: seen}, nil
	}
	oh, err := api.New(owner.Parts(), api.WithForwardKey(testClusterKey))
	require.NoError(t, err)
	ownerSrv := httptest.NewServer(oh)
	t.Cleanup(ownerSrv.Close)

	near := apitest.New()
	parts := near.Parts()
	parts.Cluster = &placingCore{Cluster: near.Cluster, url: ownerSrv.URL}
	nh, err := api.New(parts, api.WithForwardKey(testClusterKey))
	require.NoError(t, err)
	nearSrv := httptest.NewServer(nh)
	t.Cleanup(nearSrv.Close)

	c, err := client.New(nearSrv.URL, "test-token")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	in, err := c.CreateInstance(ctx, "web", types.CreateInstanceRequest{Retain: true, NodeSelector: map[string]string{"zone": "b"}}, client.WithIdempotencyKey("k1"))
	require.NoError(t, err)
	assert.Equal(t, "node-b", in.Node)
	assert.Equal(t, "placed on node-b: test", seen, "the chosen node records the decision")
	call, ok := owner.LastCall("CreateInstance")
	require.True(t, ok)
	assert.Equal(t, "web", call.Args[0])
	assert.Equal(t, types.CreateInstanceRequest{Retain: true, NodeSelector: map[string]string{"zone": "b"}}, call.Args[1], "the body went along")
	assert.Equal(t, "k1", call.Args[2], "and the Idempotency-Key")
	_, ok = near.LastCall("CreateInstance")
	assert.False(t, ok, "the node asked created nothing")

	_, err = c.CreateInstance(ctx, "web", types.CreateInstanceRequest{NodeSelector: map[string]string{"zone": "none"}})
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted)

	// A client that says it is a node (forged headers) is placed like any
	// other: it cannot pick the node nor write the placement reason.
	for _, forged := range []string{"1", "v1.1700000000.00", "v1.9999999999.deadbeef"} {
		req, err := http.NewRequest(http.MethodPost, nearSrv.URL+"/v1/projects/web/instances", strings.NewReader(`{"node_selector":{"zone":"none"}}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer test-token")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(api.ForwardedHeader, forged)
		req.Header.Set(api.PlacementHeader, "placed here: I said so")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "forged %q: placement ran and found no node", forged)
	}
	_, ok = near.LastCall("CreateInstance")
	assert.False(t, ok, "the node asked never created an instance for a forged forward")
}

// cancelCore says operation "op-far" runs on the node at url.
type cancelCore struct {
	*apitest.Cluster
	url string
}

func (c *cancelCore) OperationOwner(ctx context.Context, _ types.Principal, id string) (string, string, bool, error) {
	if id == "op-far" {
		return "node-b", c.url, false, nil
	}
	return "node-a", "", true, nil
}

// The cancel of an operation reaches the node that runs it; another
// operation's is answered here.
func TestOperationCancelReachesItsNode(t *testing.T) {
	owner, ownerSrv := newServer(t)
	near := apitest.New()
	parts := near.Parts()
	parts.Cluster = &cancelCore{Cluster: near.Cluster, url: ownerSrv.URL}
	nh, err := api.New(parts, api.WithForwardKey(testClusterKey))
	require.NoError(t, err)
	nearSrv := httptest.NewServer(nh)
	t.Cleanup(nearSrv.Close)
	c, err := client.New(nearSrv.URL, "test-token")
	require.NoError(t, err)
	ctx := context.Background()

	_, _ = c.CancelOperation(ctx, "op-far")
	call, ok := owner.LastCall("CancelOperation")
	require.True(t, ok, "the running node got the cancel")
	assert.Equal(t, "op-far", call.Args[0])
	_, ok = near.LastCall("CancelOperation")
	assert.False(t, ok)

	_, _ = c.CancelOperation(ctx, "op-here")
	_, ok = near.LastCall("CancelOperation")
	assert.True(t, ok, "an operation of this node is canceled here")
}
