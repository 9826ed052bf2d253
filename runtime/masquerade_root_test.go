package runtime

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/internal/netns"
)

// TestRootMasquerade: an instance's connection to an address outside its
// subnet arrives from the host's address (source NAT) with no rule per
// instance; instances still reach each other; the nat rules go with the
// network.
func TestRootMasquerade(t *testing.T) {
	t.Parallel()
	svc := newServiceNetns(t)
	env := newTestEnvNet(t, NetworkConfig{Subnet: freeSubnet(t)})
	ln, err := netns.Listen(svc.path, "tcp4", svc.addr+":8080")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var from []string
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			from = append(from, c.RemoteAddr().(*net.TCPAddr).IP.String())
			mu.Unlock()
			c.Close()
		}
	}()
	// The service's address is private: open egress excludes it.
	allow, err := ParseEgress("allow:" + svc.addr)
	require.NoError(t, err)
	env.create(t, InstanceSpec{ID: "m1", Network: NetworkPolicy{Group: "A", Egress: allow}})
	env.create(t, InstanceSpec{ID: "m2", Network: NetworkPolicy{Group: "A"}})
	env.listenIn(t, "m2", 7000)
	require.True(t, env.reach(t, "m1", svc.addr, 8080))
	mu.Lock()
	assert.Equal(t, []string{svc.hostAddr}, from, "the service sees the host's address")
	mu.Unlock()

	// Between instances traffic stays routed (and unrewritten).
	assert.True(t, env.reach(t, "m1", env.addr(t, "m2"), 7000))

	chain := env.rt.net.natChain()
	rules, err := exec.Command("iptables", "-w", "5", "-t", "nat", "-S", "POSTROUTING").Output()
	require.NoError(t, err)
	assert.Contains(t, string(rules), fmt.Sprintf("-s %s -j %s", env.rt.net.cfg.Subnet, chain))
	assert.NotContains(t, string(rules), "-s "+env.addr(t, "m1")+"/32", "no per-instance rule of the bridge plugin")

	require.NoError(t, env.rt.Remove(context.Background(), "m1"))
	require.NoError(t, env.rt.Remove(context.Background(), "m2"))
	require.NoError(t, env.rt.DestroyNetwork())
	rules, err = exec.Command("iptables", "-w", "5", "-t", "nat", "-S").Output()
	require.NoError(t, err)
	assert.False(t, strings.Contains(string(rules), chain), "the nat chain outlives the network:\n%s", rules)
}
