package runtime

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A namespace attached as BuildKit's RUN steps are, whose maker died
// without detaching it: DetachStaleNetNS by the maker's prefix removes its
// firewall rules and state and leaves other ids' alone.
func TestRootDetachStaleNetNS(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, freeSubnet(t))
	ctx := context.Background()
	attach := func(id string) string {
		name := "envd-test-" + randomHex(6)
		sh(t, "ip", "netns", "add", name)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", name).Run() })
		_, err := env.rt.AttachNetNS(ctx, id, "/run/netns/"+name, NetworkPolicy{Group: "g", Isolated: true})
		require.NoError(t, err)
		require.NotNil(t, env.rt.net.fw.attached(id))
		return env.rt.net.fw.hashChain("I", id)
	}
	stale := attach("bk_" + randomHex(6))
	kept := attach("bk-" + randomHex(6))
	t.Cleanup(func() { _ = env.rt.DetachStaleNetNS(ctx, "bk-") })

	require.NoError(t, env.rt.DetachStaleNetNS(ctx, "bk_"))
	assert.Error(t, exec.Command("iptables", "-S", stale).Run(), "the stale attachment's chain is gone")
	assert.NoError(t, exec.Command("iptables", "-S", kept).Run(), "an instance of a project named bk keeps its chain")
	ents, err := os.ReadDir(env.rt.net.fw.stateDir)
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	assert.Len(t, names, 1, "only the other id's state is left: %v", names)
}
