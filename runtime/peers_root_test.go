package runtime

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The cluster's other nodes are unreachable from instances on every port,
// whatever the egress policy, from the moment SetPeerNodes names them
// until a call leaves them out (the node left); an envd restart keeps
// them denied. A network namespace the test makes stands for the peer
// node, with an address outside the private ranges (198.18.0.0/15, made
// here) that open egress would otherwise reach, and its private address
// that an allow list would.
func TestRootPeerNodesDenied(t *testing.T) {
	t.Parallel()
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	public := fmt.Sprintf("198.%d.%d.%d", 18+b[0]%2, b[1], 10+b[0]%200)
	peer := newServiceNetns(t, public)
	env := newTestEnv(t, freeSubnet(t))
	ctx := context.Background()
	var accepted []func() int32
	for _, addr := range []string{public, peer.addr} {
		for _, port := range []int{7443, 22, 5000} {
			n := peer.listen(t, fmt.Sprintf("%s:%d", addr, port))
			accepted = append(accepted, func() int32 { return n.Load() })
		}
	}
	allowPeer, err := ParseEgress("allow:" + peer.addr)
	require.NoError(t, err)
	env.create(t, InstanceSpec{ID: "open", Network: NetworkPolicy{Group: "A"}})
	env.create(t, InstanceSpec{ID: "allow", Network: NetworkPolicy{Group: "B", Egress: allowPeer}})

	require.True(t, env.reach(t, "open", public, 7443), "before: open egress reaches the peer's public address")
	require.True(t, env.reach(t, "allow", peer.addr, 22), "before: the allow list reaches the peer's private address")

	require.NoError(t, env.rt.SetPeerNodes(ctx, []string{public, peer.addr, "127.0.0.1"}))
	for _, port := range []int{7443, 22, 5000} {
		assert.False(t, env.reach(t, "open", public, port), "open egress -> peer port %d", port)
		assert.False(t, env.reach(t, "allow", peer.addr, port), "allow list -> peer port %d", port)
	}

	// A restarted envd keeps the rules until its first membership round.
	require.NoError(t, env.rt.Close())
	rt2, err := New(ctx, env.rt.cfg)
	require.NoError(t, err)
	env.rt = rt2
	assert.False(t, env.reach(t, "open", public, 7443), "after a restart")

	// The peer leaves the cluster: reachable again as any address.
	require.NoError(t, env.rt.SetPeerNodes(ctx, nil))
	assert.True(t, env.reach(t, "open", public, 7443), "a node that left is an address like any other")
	var total int32
	for _, n := range accepted {
		total += n()
	}
	assert.Equal(t, int32(3), total, "only the connections made while the peer was not denied arrived")
}
