package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd/node"
)

// diskLimit is the writable-layer limit of the disk-limited node.
const diskLimit = 64 << 20

// A tenant fills its rootfs: the write fails with ENOSPC inside, the
// instance stays usable, the node's disk loses no more than the limit,
// other instances are unaffected, the full layer saves and restores, and
// the limit survives stop and start.
func TestRootHostileFillRootfs(t *testing.T) {
	c := ctx(t)
	n, cl := startJoiningNode(t, "disk", &node.Config{DefaultTTL: time.Hour, PrefetchWindow: -1,
		DefaultLimits: types.Limits{DiskBytes: diskLimit}})
	require.Empty(t, n.Runtime().LazyErr(), "the lazy snapshotter must run: its layers are tested here")
	require.NoError(t, n.Runtime().DiskLimitErr())

	p := fmt.Sprintf("hostile-disk-%d", projectSeq.Add(1))
	_, err := cl.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)
	upOn := func(t *testing.T, cl *client.Client, req types.CreateInstanceRequest) types.Instance {
		t.Helper()
		in, err := cl.CreateInstance(c, p, req)
		require.NoError(t, err)
		require.Equal(t, types.StateRunning, in.State)
		t.Cleanup(func() { _, _ = cl.DeleteInstance(context.Background(), in.ID) })
		return in
	}
	run := func(t *testing.T, cl *client.Client, id, script string) types.ExecResult {
		t.Helper()
		res, err := cl.Exec(c, id, types.ExecRequest{Args: []string{"/bin/sh", "-c", script}})
		require.NoError(t, err)
		return res
	}
	must := func(t *testing.T, cl *client.Client, id, script string) string {
		t.Helper()
		res := run(t, cl, id, script)
		require.Equalf(t, 0, res.ExitCode, "script %q\nstdout: %s\nstderr: %s", script, res.Stdout, res.Stderr)
		return strings.TrimSpace(res.Stdout)
	}
	rootSizeKiB := func(t *testing.T, id string) int64 {
		t.Helper()
		f := strings.Fields(must(t, cl, id, "df -k / | tail -1"))
		require.GreaterOrEqual(t, len(f), 2)
		kib, err := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err)
		return kib
	}
	fill := func(t *testing.T, id string) {
		t.Helper()
		// 1 GiB asked for against a 64 MiB limit.
		res := run(t, cl, id, "dd if=/dev/zero of=/root/fill bs=1M count=1024")
		assert.NotEqual(t, 0, res.ExitCode)
		assert.Contains(t, res.Stderr, "No space left on device")
	}

	x := upOn(t, cl, types.CreateInstanceRequest{Retain: true})
	upper := upperOf(t, n, x.ID)
	assert.Contains(t, upper, filepath.Join(n.DataDir(), "stargz"), "the instance's layer is the lazy snapshotter's")
	assert.LessOrEqual(t, rootSizeKiB(t, x.ID), int64(diskLimit>>10))
	blobSum := must(t, cl, x.ID, "echo kept > /root/marker && head -c 20971520 /dev/urandom > /root/blob && md5sum /root/blob | cut -d' ' -f1")

	free := func() int64 {
		var st unix.Statfs_t
		require.NoError(t, unix.Statfs(n.DataDir(), &st))
		return int64(st.Bavail) * st.Bsize
	}
	before := free()
	fill(t, x.ID)
	// Without the limit the node would lose 1 GiB; other tests on the
	// machine write meanwhile, hence the margin.
	assert.Less(t, before-free(), int64(512<<20), "the node's free space went past the limit")
	assert.Equal(t, "alive", must(t, cl, x.ID, "echo alive"), "the instance stays usable")

	t.Run("other instances are unaffected", func(t *testing.T) {
		// Another instance on the same node has its own limit ...
		y := upOn(t, cl, types.CreateInstanceRequest{})
		assert.Equal(t, strconv.Itoa(32<<20), must(t, cl, y.ID, "dd if=/dev/zero of=/root/f bs=1M count=32 2>/dev/null && wc -c < /root/f"))
		// ... and an instance without a limit writes past it.
		z := upOn(t, env.c, types.CreateInstanceRequest{})
		assert.Equal(t, strconv.Itoa(128<<20), must(t, env.c, z.ID, "dd if=/dev/zero of=/root/f bs=1M count=128 2>/dev/null && wc -c < /root/f && rm /root/f"))
	})

	t.Run("the full layer saves and restores", func(t *testing.T) {
		op, err := cl.Save(c, x.ID, types.SaveRequest{Message: "full"}, "")
		require.NoError(t, err)
		done, err := cl.WaitOperation(c, op.ID, nil)
		require.NoError(t, err)
		require.Equalf(t, types.OpSucceeded, done.State, "save: %+v", done.Error)
		var sr types.SaveResult
		require.NoError(t, json.Unmarshal(done.Result, &sr))
		filled := must(t, cl, x.ID, "wc -c < /root/fill")

		r := upOn(t, cl, types.CreateInstanceRequest{Version: sr.Version})
		assert.Equal(t, "kept", must(t, cl, r.ID, "cat /root/marker"))
		assert.Equal(t, blobSum, must(t, cl, r.ID, "md5sum /root/blob | cut -d' ' -f1"))
		assert.Equal(t, filled, must(t, cl, r.ID, "wc -c < /root/fill"))
		// The restored instance has its own, empty, limited layer.
		assert.LessOrEqual(t, rootSizeKiB(t, r.ID), int64(diskLimit>>10))
		must(t, cl, r.ID, "echo new > /root/new")
	})

	t.Run("stop and start keep the limit", func(t *testing.T) {
		_, err := cl.StopInstance(c, x.ID)
		require.NoError(t, err)
		_, err = cl.StartInstance(c, x.ID)
		require.NoError(t, err)
		assert.Equal(t, "kept", must(t, cl, x.ID, "cat /root/marker"))
		assert.LessOrEqual(t, rootSizeKiB(t, x.ID), int64(diskLimit>>10))
		must(t, cl, x.ID, "rm /root/fill")
		fill(t, x.ID)
	})
}

// upperOf is the host path of an instance's writable layer.
func upperOf(t *testing.T, n *node.Node, id string) string {
	t.Helper()
	ms, err := n.Runtime().Mounts(context.Background(), id)
	require.NoError(t, err)
	for _, m := range ms {
		for _, o := range m.Options {
			if v, ok := strings.CutPrefix(o, "upperdir="); ok {
				return v
			}
		}
	}
	t.Fatalf("no upperdir in %+v", ms)
	return ""
}
