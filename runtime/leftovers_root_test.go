package runtime

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRootNetworkLeftovers: a new instance's attachment skips the teardown
// only when nothing of an earlier attachment of its id is left: each of
// the network namespace file, the firewall state and libcni's cached
// result (root: libcni's cache is /var/lib/cni) brings the teardown back.
func TestRootNetworkLeftovers(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	n := &network{name: "envd-leftovers-test", nsDir: filepath.Join(dir, "netns"), fw: &firewall{stateDir: filepath.Join(dir, "firewall")}}
	require.NoError(t, os.MkdirAll(n.nsDir, 0o700))
	require.NoError(t, os.MkdirAll(n.fw.stateDir, 0o700))
	results := filepath.Join(libcni.CacheDir, "results")
	require.NoError(t, os.MkdirAll(results, 0o700))
	id := "leftovers-" + randomHex(6)
	assert.False(t, n.leftovers(id), "a new id")
	assert.False(t, n.leftovers("other"))

	for _, p := range []string{
		n.nsPath(id),
		n.fw.statePath(id),
		filepath.Join(results, n.name+"-"+id+"-eth0"),
	} {
		require.NoError(t, os.WriteFile(p, nil, 0o600))
		assert.True(t, n.leftovers(id), "with %s", p)
		require.NoError(t, os.Remove(p))
		assert.False(t, n.leftovers(id), "after removing %s", p)
	}
	// Another instance's cached result (an id this one is a prefix of)
	// is not this one's.
	other := filepath.Join(results, n.name+"-"+id+"x-eth0")
	require.NoError(t, os.WriteFile(other, nil, 0o600))
	t.Cleanup(func() { os.Remove(other) })
	assert.False(t, n.leftovers(id))
}
