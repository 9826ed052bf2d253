package runtime

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

func hostFree(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &st))
	return int64(st.Bavail) * st.Bsize
}

// TestRootDiskLimit: an instance with a writable-layer limit that fills its
// rootfs gets ENOSPC, stays usable, keeps its limit and files across
// stop/start and an unmount behind the runtime's back, and costs the node
// no more than the limit; an instance without a limit is unaffected.
func TestRootDiskLimit(t *testing.T) {
	env := newTestEnv(t, freeSubnet(t))
	ctx := context.Background()
	rt := env.rt
	require.NoError(t, rt.DiskLimitErr())
	const limit = 64 << 20

	env.create(t, InstanceSpec{ID: "full", Limits: Limits{DiskBytes: limit}})
	env.create(t, InstanceSpec{ID: "free"})

	_, _, code := env.run(t, "full", "sh", "-c", "echo kept > /root/marker")
	require.Equal(t, 0, code)

	// Inside, the root filesystem's size is the limit, less the ext4
	// metadata.
	out, _, code := env.run(t, "full", "sh", "-c", "df -k / | tail -1")
	require.Equal(t, 0, code)
	f := strings.Fields(out)
	require.GreaterOrEqual(t, len(f), 2, out)
	sizeKiB, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err, out)
	assert.LessOrEqual(t, sizeKiB, int64(limit>>10), "df of / in the instance: %s", out)
	assert.GreaterOrEqual(t, sizeKiB, int64(limit>>10)*85/100, "df of / in the instance: %s", out)

	fill := func(t *testing.T, id string) (string, int) {
		t.Helper()
		// 1 GiB attempted against a 64 MiB limit.
		_, stderr, code := env.run(t, id, "dd", "if=/dev/zero", "of=/big", "bs=1M", "count=1024")
		return stderr, code
	}

	t.Run("fill gets ENOSPC", func(t *testing.T) {
		before := hostFree(t, env.dir)
		stderr, code := fill(t, "full")
		assert.NotEqual(t, 0, code)
		assert.Contains(t, stderr, "No space left on device")
		// The node lost at most the limit (with room for other writers on
		// the machine; without the limit it would lose 1 GiB).
		assert.Less(t, before-hostFree(t, env.dir), int64(512<<20), "node free space consumed past the limit")
		u, err := rt.DiskUsage("full")
		require.NoError(t, err)
		assert.Equal(t, int64(limit), u.LimitBytes)
		assert.LessOrEqual(t, u.UsedBytes, int64(limit))

		// Still usable: commands run, and after a delete writes work again.
		out, _, code := env.run(t, "full", "sh", "-c", "cat /root/marker; rm /big; echo again > /root/f2 && cat /root/f2")
		assert.Equal(t, 0, code)
		assert.Equal(t, "kept\nagain\n", out)
	})

	t.Run("an instance without a limit is unaffected", func(t *testing.T) {
		out, stderr, code := env.run(t, "free", "sh", "-c", "dd if=/dev/zero of=/big bs=1M count=128 2>&1 && ls -l /big | awk '{print $5}' && rm /big")
		assert.Equal(t, 0, code, stderr)
		assert.Contains(t, out, strconv.Itoa(128<<20))
	})

	t.Run("stop and start keep the limit and the files", func(t *testing.T) {
		require.NoError(t, rt.Stop(ctx, "full"))
		require.NoError(t, rt.Start(ctx, "full"))
		out, _, _ := env.run(t, "full", "cat", "/root/marker")
		assert.Equal(t, "kept\n", out)
		stderr, code := fill(t, "full")
		assert.NotEqual(t, 0, code)
		assert.Contains(t, stderr, "No space left on device")
		_, _, code = env.run(t, "full", "rm", "/big")
		assert.Equal(t, 0, code)
	})

	t.Run("a disk unmounted behind the runtime is attached again", func(t *testing.T) {
		// As after a reboot: the image is no longer mounted, the
		// snapshot's own empty directories show through.
		require.NoError(t, rt.Stop(ctx, "full"))
		require.NoError(t, rt.detachDisk("full"))
		upper := upperDir(t, rt, "full") // Mounts attaches it again, for saves
		b, err := os.ReadFile(filepath.Join(upper, "root", "marker"))
		require.NoError(t, err)
		assert.Equal(t, "kept\n", string(b))

		require.NoError(t, rt.detachDisk("full"))
		rt2, err := New(ctx, rt.cfg) // a restarted envd
		require.NoError(t, err)
		defer rt2.Close()
		ok, err := diskMounted(filepath.Dir(upper), rt.diskImage("full"))
		require.NoError(t, err)
		assert.True(t, ok, "New did not attach the recorded disk")

		require.NoError(t, rt.Start(ctx, "full"))
		out, _, _ := env.run(t, "full", "cat", "/root/marker")
		assert.Equal(t, "kept\n", out)
	})

	t.Run("a disk detached while in use is never mounted twice", func(t *testing.T) {
		require.NoError(t, rt.detachDisk("full")) // the running overlay keeps it alive
		_, err := rt.Mounts(ctx, "full")
		assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
		out, _, _ := env.run(t, "full", "cat", "/root/marker")
		assert.Equal(t, "kept\n", out, "the running instance still has its layer")
		require.NoError(t, rt.Stop(ctx, "full")) // releases the loop device
		require.NoError(t, rt.Start(ctx, "full"))
		out, _, _ = env.run(t, "full", "cat", "/root/marker")
		assert.Equal(t, "kept\n", out)
	})

	t.Run("bad limits are refused and leave nothing", func(t *testing.T) {
		err := rt.Create(ctx, InstanceSpec{ID: "tiny", Image: env.ref, Limits: Limits{DiskBytes: 4096}})
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
		err = rt.Create(ctx, InstanceSpec{ID: "huge", Image: env.ref, Limits: Limits{DiskBytes: 1 << 60}})
		assert.ErrorIs(t, err, errdefs.ErrInsufficientCapacity, "the node's disk, not the tenant's quota")
		st, err := rt.Status(ctx, "huge")
		require.NoError(t, err)
		assert.False(t, st.Exists)
		assert.NoFileExists(t, rt.diskImage("huge"))
	})

	t.Run("remove unmounts and deletes the image", func(t *testing.T) {
		upper := upperDir(t, rt, "full")
		require.NoError(t, rt.Remove(ctx, "full"))
		assert.NoFileExists(t, rt.diskImage("full"))
		assert.NoFileExists(t, rt.diskRecord("full"))
		// containerd's garbage collector removes the snapshot itself soon after.
		assert.Eventually(t, func() bool { _, err := os.Stat(filepath.Dir(upper)); return os.IsNotExist(err) },
			20*time.Second, 100*time.Millisecond, "snapshot directory left")
		assert.NotContains(t, mountsUnder(t, env.dir), filepath.Dir(upper))
	})
}

// TestRootDiskThinProvisioning: writable-layer limits are provisioned
// thinly. On a 1 GiB filesystem (a tmpfs standing in for the node's disk)
// with a 256 MiB reserve, full reservation (overcommit 1) takes one 512 MiB
// layer; overcommit 10 takes twelve; and once real writes use up the free
// space, the next layer is refused with the node-level code, naming the
// free bytes it measured.
func TestRootDiskThinProvisioning(t *testing.T) {
	t.Parallel()
	requireRoot(t)
	const size, reserve = 512 << 20, 256 << 20
	ctx := context.Background()
	newRuntime := func(t *testing.T, overcommit float64) *Runtime {
		dir := t.TempDir()
		disks := filepath.Join(dir, "disks")
		require.NoError(t, os.MkdirAll(disks, 0o700))
		require.NoError(t, unix.Mount("tmpfs", disks, "tmpfs", 0, "size=1g"))
		t.Cleanup(func() { _ = unix.Unmount(disks, unix.MNT_DETACH) })
		r := &Runtime{cfg: Config{StateDir: dir, DiskReserveBytes: reserve, DiskOvercommit: overcommit}}
		r.checkDiskLimit()
		require.NoError(t, r.diskErr)
		return r
	}

	t.Run("full reservation", func(t *testing.T) {
		r := newRuntime(t, 1)
		require.NoError(t, r.makeDiskImage(ctx, "a", size))
		err := r.makeDiskImage(ctx, "b", size)
		require.ErrorIs(t, err, errdefs.ErrInsufficientCapacity)
		assert.NotErrorIs(t, err, errdefs.ErrQuotaExceeded)
		assert.NoFileExists(t, r.diskImage("b"))
	})

	t.Run("overcommit 10", func(t *testing.T) {
		r := newRuntime(t, 10)
		for i := range 12 {
			require.NoError(t, r.makeDiskImage(ctx, fmt.Sprintf("i%d", i), size), "layer %d of 12", i)
		}
		room, ok := r.DiskRoom()
		require.True(t, ok)
		assert.GreaterOrEqual(t, room, int64(size), "what placement is told: one more fits")
		// Real use of the disk: 600 MiB written leave less than the
		// reserve plus the set-aside share.
		require.NoError(t, os.WriteFile(filepath.Join(r.disksDir(), "written"), make([]byte, 600<<20), 0o600))
		room, ok = r.DiskRoom()
		require.True(t, ok)
		assert.Less(t, room, int64(size), "what placement is told: no more")
		err := r.makeDiskImage(ctx, "late", size)
		require.ErrorIs(t, err, errdefs.ErrInsufficientCapacity)
		assert.ErrorContains(t, err, "bytes free")
		assert.Equal(t, "disk", errdefs.Details(err)["resource"])
		assert.NoFileExists(t, r.diskImage("late"))
	})
}

// BenchmarkRootCreateDiskLimit is the time to first command of a new
// instance (Create, then `true`) with a plain writable layer and with one on
// a 10 GiB disk image, alternating in every iteration; it reports each
// variant's mean and their ratio.
//
//	go test -run '^$' -bench BenchmarkRootCreateDiskLimit -benchtime 10x ./runtime/
func BenchmarkRootCreateDiskLimit(b *testing.B) {
	env := newTestEnv(b, freeSubnet(b))
	ctx := context.Background()
	variants := []struct {
		name   string
		limits Limits
		total  time.Duration
	}{{name: "plain"}, {name: "image", limits: Limits{DiskBytes: 10 << 30}}}
	b.ResetTimer()
	for i := range b.N {
		for k := range variants {
			v := &variants[(i+k)%2]
			id := fmt.Sprintf("bench-%s-%d", v.name, i)
			start := time.Now()
			if err := env.rt.Create(ctx, InstanceSpec{ID: id, Image: env.ref, Limits: v.limits}); err != nil {
				b.Fatal(err)
			}
			if code, err := env.rt.Exec(ctx, id, ExecSpec{Args: []string{"true"}}); err != nil || code != 0 {
				b.Fatalf("exec: %d %v", code, err)
			}
			v.total += time.Since(start)
			if err := env.rt.Remove(ctx, id); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, v := range variants {
		b.ReportMetric(v.total.Seconds()/float64(b.N), v.name+"-s/op")
	}
	b.ReportMetric(variants[1].total.Seconds()/variants[0].total.Seconds(), "image/plain")
}
