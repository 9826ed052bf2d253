package versions_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Nodes join with a lease on the database's clock; a node whose lease
// lapsed is marked lost by exactly one of the nodes that race to, its live
// instances Failed node_lost with new generations (hibernated ones kept),
// and it finds itself fenced when it renews; joining again makes it ready.
func TestMembershipLeaseAndLoss(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	p := newProject(t, s)
	join := func(name string, lease time.Duration) versions.Member {
		m, err := s.Nodes.Join(ctx, versions.Registration{Name: name, APIURL: "http://" + name, Lease: lease,
			Labels: map[string]string{"zone": name}, CPUs: 2, MemoryBytes: 1 << 30, InstanceSlots: 3})
		require.NoError(t, err)
		return m
	}
	a := join("a", time.Minute)
	assert.Equal(t, versions.NodeReady, a.State)
	assert.Equal(t, map[string]string{"zone": "a"}, a.Labels)
	assert.WithinDuration(t, time.Now().Add(time.Minute), a.LeaseExpiresAt, 10*time.Second)
	join("b", 200*time.Millisecond)

	mk := func(id string, state types.InstanceState) {
		_, err := s.Instances.CreateInstance(ctx, versions.Instance{ID: id, Tenant: tenant, Project: p.Name, Node: "b", Version: 1, State: state,
			Spec: []byte(`{"limits":{"cpus":1.5,"memory_bytes":1024}}`)})
		require.NoError(t, err)
	}
	mk("run", types.StateRunning)
	mk("gone", types.StateTerminated)
	mk("hib", types.StateStopped)
	_, err := s.Instances.Hibernated(ctx, "hib", 1, "hibernated", "")
	require.NoError(t, err)
	b, err := s.Nodes.GetMember(ctx, "b")
	require.NoError(t, err)
	assert.Equal(t, 1, b.Instances, "only the running one is live there")
	assert.InDelta(t, 1.5, b.UsedCPUs, 0.001)

	time.Sleep(400 * time.Millisecond)
	// Three nodes sweep at once: one marks b.
	var (
		mu    sync.Mutex
		marks []string
		lost  []versions.LostInstance
		wg    sync.WaitGroup
	)
	for range 3 {
		wg.Go(func() {
			nodes, ins, err := s.Nodes.MarkLost(ctx, "a", func(in versions.Instance, n versions.Member, _ *versions.InstanceCheckpoint) string {
				return "lost with " + n.Name
			})
			assert.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			for _, n := range nodes {
				marks = append(marks, n.Name)
			}
			lost = append(lost, ins...)
		})
	}
	wg.Wait()
	assert.Equal(t, []string{"b"}, marks)
	require.Len(t, lost, 1)
	assert.Equal(t, "run", lost[0].ID)
	in, err := s.Instances.GetInstance(ctx, "", "run")
	require.NoError(t, err)
	assert.Equal(t, types.StateFailed, in.State)
	assert.Equal(t, types.ReasonNodeLost, in.Reason)
	assert.Equal(t, "lost with b", in.Message)
	assert.Equal(t, int64(2), in.Generation, "fenced: the lost node's generation is older")
	hib, err := s.Instances.GetInstance(ctx, "", "hib")
	require.NoError(t, err)
	assert.Equal(t, types.StateStopped, hib.State, "a hibernated instance lives as a version: kept")

	_, err = s.Nodes.RenewLease(ctx, "b")
	assert.ErrorIs(t, err, versions.ErrFenced)
	state, err := s.Nodes.RenewLease(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, versions.NodeReady, state)
	assert.Equal(t, versions.NodeReady, join("b", time.Minute).State, "back after cleaning up")
	_, err = s.Nodes.RenewLease(ctx, "nobody")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

func TestMembershipStates(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	_, err := s.Nodes.Join(ctx, versions.Registration{Name: "a", APIURL: "http://a", Lease: time.Minute})
	require.NoError(t, err)
	m, err := s.Nodes.SetNodeState(ctx, "a", []string{versions.NodeReady}, versions.NodeCordoned)
	require.NoError(t, err)
	assert.Equal(t, versions.NodeCordoned, m.State)
	_, err = s.Nodes.SetNodeState(ctx, "a", []string{versions.NodeReady}, versions.NodeCordoned)
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	state, err := s.Nodes.RenewLease(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, versions.NodeCordoned, state)
	m, err = s.Nodes.Join(ctx, versions.Registration{Name: "a", APIURL: "http://a2", Lease: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, versions.NodeCordoned, m.State, "a restart keeps a cordon (rolling upgrades)")
	assert.Equal(t, "http://a2", m.APIURL)
	require.NoError(t, s.Nodes.LeaveNode(ctx, "a"))
	m, err = s.Nodes.GetMember(ctx, "a")
	require.NoError(t, err)
	assert.True(t, m.Stopped)
	_, err = s.Nodes.SetNodeState(ctx, "x", nil, versions.NodeReady)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	ms, err := s.Nodes.ListMembers(ctx)
	require.NoError(t, err)
	require.Len(t, ms, 1)
}

// A node records the certificate its API serves when it joins and when it
// changes; the others read exactly that one back.
func TestNodeCertificate(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	_, err := s.Nodes.Join(ctx, versions.Registration{Name: "a", APIURL: "https://a", Lease: time.Minute, TLSCert: []byte("cert-1")})
	require.NoError(t, err)
	m, err := s.Nodes.GetMember(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, []byte("cert-1"), m.TLSCert)
	got, err := s.Nodes.NodeCertificate(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, []byte("cert-1"), got)

	require.NoError(t, s.Nodes.SetNodeCertificate(ctx, "a", []byte("cert-2")))
	got, err = s.Nodes.NodeCertificate(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, []byte("cert-2"), got, "a renewed certificate replaces the recorded one")

	_, err = s.Nodes.Join(ctx, versions.Registration{Name: "a", APIURL: "http://a", Lease: time.Minute})
	require.NoError(t, err)
	got, err = s.Nodes.NodeCertificate(ctx, "a")
	require.NoError(t, err)
	assert.Nil(t, got, "a node back on plain HTTP records none")

	_, err = s.Nodes.NodeCertificate(ctx, "nobody")
	require.ErrorIs(t, err, errdefs.ErrNotFound)
	require.ErrorIs(t, s.Nodes.SetNodeCertificate(ctx, "nobody", []byte("x")), errdefs.ErrNotFound)
}

// A node records the runtime classes it runs at each join; a node that
// tells none (an earlier version) reads back nil, not an empty list.
func TestNodeRuntimeClasses(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	m, err := s.Nodes.Join(ctx, versions.Registration{Name: "a", APIURL: "http://a", Lease: time.Minute, RuntimeClasses: []string{"runc", "gvisor"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"runc", "gvisor"}, m.RuntimeClasses)
	_, err = s.Nodes.Join(ctx, versions.Registration{Name: "b", APIURL: "http://b", Lease: time.Minute})
	require.NoError(t, err)
	m, err = s.Nodes.Join(ctx, versions.Registration{Name: "a", APIURL: "http://a", Lease: time.Minute, RuntimeClasses: []string{"runc"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"runc"}, m.RuntimeClasses, "a restart without runsc says so")
	ms, err := s.Nodes.ListMembers(ctx)
	require.NoError(t, err)
	require.Len(t, ms, 2)
	assert.Equal(t, []string{"runc"}, ms[0].RuntimeClasses)
	assert.Nil(t, ms[1].RuntimeClasses)
}
