package envd_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/versions"
)

// peerRecorder stands for the instance firewall (runtime.SetPeerNodes,
// tested against iptables in runtime's TestRootPeerNodesDenied): it keeps
// each list it is given.
type peerRecorder struct {
	mu    sync.Mutex
	lists [][]string
	calls chan struct{}
}

func (r *peerRecorder) SetPeerNodes(_ context.Context, hosts []string) error {
	r.mu.Lock()
	r.lists = append(r.lists, slices.Sorted(slices.Values(hosts)))
	r.mu.Unlock()
	select {
	case r.calls <- struct{}{}:
	default:
	}
	return nil
}

// waitFor waits for a list equal to want.
func (r *peerRecorder) waitFor(t *testing.T, want []string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		last := r.lists[len(r.lists)-1:]
		r.mu.Unlock()
		if len(last) == 1 && slices.Equal(last[0], want) {
			return
		}
		select {
		case <-r.calls:
		case <-deadline:
			t.Fatalf("the firewall was never given %v; last: %v", want, last)
		}
	}
}

// Every other node of the cluster is denied to instances from the node's
// join on, and one that joins later is added within a sweep; the node's own
// address is not in the list.
func TestPeerNodesDeniedAsTheyJoin(t *testing.T) {
	rec := &peerRecorder{calls: make(chan struct{}, 1)}
	e := newCoreEnv(t, func(c *envd.Config) {
		c.Cluster.Peers = rec
		c.Cluster.SweepInterval = 100 * time.Millisecond
	})
	_, err := e.store.Nodes.Join(e.ctx, versions.Registration{Name: "node-b", APIURL: "https://198.18.0.7:7443", Lease: time.Minute})
	require.NoError(t, err)
	require.NoError(t, e.svc.RegisterNode(e.ctx, "http://198.18.0.1:7443"))
	rec.mu.Lock()
	require.NotEmpty(t, rec.lists, "denied at join, before the first sweep")
	assert.Equal(t, []string{"198.18.0.7"}, rec.lists[0])
	rec.mu.Unlock()

	_, err = e.store.Nodes.Join(e.ctx, versions.Registration{Name: "node-c", APIURL: "https://peer-c.example.test:7443", Lease: time.Minute})
	require.NoError(t, err)
	rec.waitFor(t, []string{"198.18.0.7", "peer-c.example.test"})
}

// The node's room for new disk limits (by its real free disk) is recorded
// at join and with its lease, where placement reads it.
func TestDiskRoomReported(t *testing.T) {
	var room atomic.Int64
	room.Store(7 << 30)
	e := newCoreEnv(t, func(c *envd.Config) {
		c.Cluster.DiskRoom = func() (int64, bool) { return room.Load(), true }
		c.Cluster.Lease = 600 * time.Millisecond
	})
	require.NoError(t, e.svc.RegisterNode(e.ctx, "http://127.0.0.1:1"))
	m, err := e.store.Nodes.GetMember(e.ctx, testNode)
	require.NoError(t, err)
	require.NotNil(t, m.DiskRoom, "reported at join")
	assert.Equal(t, int64(7<<30), *m.DiskRoom)

	room.Store(1 << 30)
	require.Eventually(t, func() bool {
		m, err := e.store.Nodes.GetMember(e.ctx, testNode)
		return err == nil && m.DiskRoom != nil && *m.DiskRoom == 1<<30
	}, 30*time.Second, 50*time.Millisecond, "refreshed with the lease")
}
