package runtime

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// TestRootNetworkLeftovers: a new instance's attachment skips the teardown
// only when nothing of an earlier attachment of its id is left: each of
// the network namespace file, the firewall state and libcni's cached
// result (root: libcni's cache is /var/lib/cni) brings the teardown back.
func TestRootNetworkLeftovers(t *testing.T) {
	t.Parallel()
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

// A start that fails after the network was attached (beside the
// container's creation) leaves no network namespace, firewall state or CNI
// result behind: here an image without /bin/sh, whose init cannot exec.
func TestRootFailedStartLeavesNoNetwork(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, freeSubnet(t))
	ctx := context.Background()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}))
	passwd := []byte("root:x:0:0:root:/:/bin/false\n")
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(passwd))}))
	_, err := tw.Write(passwd)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	ref := pushRootfsImage(t, env.reg, "test/nosh", buf.Bytes())
	require.NoError(t, env.rt.Pull(ctx, ref))

	const id = "nosh"
	err = env.rt.Create(ctx, InstanceSpec{ID: id, Image: ref})
	require.Error(t, err)
	assert.ErrorIs(t, err, errdefs.ErrStartFailed, "%v", err)
	assert.False(t, env.rt.net.leftovers(id), "network state of the failed start is gone")
	_, statErr := os.Stat(env.rt.instanceDir(id))
	assert.ErrorIs(t, statErr, os.ErrNotExist)
	ids, err := env.rt.List(ctx)
	require.NoError(t, err)
	assert.NotContains(t, ids, id)
	// The id can be used again.
	env.create(t, InstanceSpec{ID: id})
}
