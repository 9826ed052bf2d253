package runtime

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostOwner is the host uid and gid of path.
func hostOwner(t *testing.T, path string) (uint32, uint32) {
	t.Helper()
	fi, err := os.Lstat(path)
	require.NoError(t, err)
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

// snapshotUpper is the upper dir of id's active snapshot, read from the
// snapshotter (Mounts refuses user namespace instances).
func snapshotUpper(t *testing.T, rt *Runtime, id string) string {
	t.Helper()
	ctx := rt.ctx(context.Background())
	ms, err := rt.client.SnapshotService(snapshotter).Mounts(ctx, id)
	require.NoError(t, err)
	for _, m := range ms {
		for _, o := range m.Options {
			if v, ok := strings.CutPrefix(o, "upperdir="); ok {
				return v
			}
		}
	}
	t.Fatalf("no upperdir in mounts %+v", ms)
	return ""
}

func TestRootUserNamespace(t *testing.T) {
	t.Parallel()
	const base = 1<<30 + 7<<16 // not the default: the test's own range
	env := newTestEnvWith(t, NetworkConfig{Subnet: freeSubnet(t)}, func(c *Config) {
		c.UserNS, c.UserNSBase = true, base
	})
	ctx := context.Background()
	// runc's init, already in the user namespace, mounts the rootfs from
	// containerd's state dir: every directory above it must be searchable
	// by others, as a node's data dir is (t.TempDir makes them 0700).
	searchable(t, env.dir)
	// A host directory owned by root, bound read-write, and a volume.
	hostDir := filepath.Join(searchable(t, t.TempDir()), "host")
	require.NoError(t, os.Mkdir(hostDir, 0o755))
	hostFile := filepath.Join(hostDir, "f")
	require.NoError(t, os.WriteFile(hostFile, []byte("host\n"), 0o644))
	volDir := filepath.Join(searchable(t, t.TempDir()), "vol")
	require.NoError(t, os.Mkdir(volDir, 0o755))

	env.create(t, InstanceSpec{ID: "u1", Network: NetworkPolicy{Group: "g"}, Mounts: []Mount{
		{Source: hostDir, Destination: "/host"},
		{Source: volDir, Destination: "/vol", Owned: true},
	}})
	uidMap, _, code := env.run(t, "u1", "cat", "/proc/self/uid_map")
	require.Equal(t, 0, code)
	assert.Equal(t, []string{"0", strconv.Itoa(base), "65536"}, strings.Fields(uidMap), "uid_map: container 0 -> host base, 65536 ids")
	out, _, code := env.run(t, "u1", "id", "-u")
	require.Equal(t, 0, code)
	assert.Equal(t, "0", strings.TrimSpace(out))
	// setgroups stays allowed: apt drops to _apt with it.
	out, _, code = env.run(t, "u1", "cat", "/proc/self/setgroups")
	require.Equal(t, 0, code)
	assert.Equal(t, "allow", strings.TrimSpace(out))

	// A file made by root inside is owned by the mapped uid on the host.
	_, stderr, code := env.run(t, "u1", "sh", "-c", "echo made > /made && touch /made.1000 && chown 1000:1000 /made.1000")
	require.Equal(t, 0, code, stderr)
	upper := snapshotUpper(t, env.rt, "u1")
	uid, gid := hostOwner(t, filepath.Join(upper, "made"))
	assert.Equal(t, [2]uint32{base, base}, [2]uint32{uid, gid}, "owner of /made in the upper dir")
	uid, gid = hostOwner(t, filepath.Join(upper, "made.1000"))
	assert.Equal(t, [2]uint32{base + 1000, base + 1000}, [2]uint32{uid, gid}, "owner of /made.1000 in the upper dir")
	// The image's files, chowned into the remapped snapshot, are root's
	// inside.
	out, _, code = env.run(t, "u1", "stat", "-c", "%u:%g", "/bin/busybox")
	require.Equal(t, 0, code)
	assert.Equal(t, "0:0", strings.TrimSpace(out))

	// The host's root-owned files cannot be changed through the bind mount.
	_, _, code = env.run(t, "u1", "sh", "-c", "echo tenant > /host/f")
	assert.NotEqual(t, 0, code, "write to a host root file")
	_, _, code = env.run(t, "u1", "touch", "/host/new")
	assert.NotEqual(t, 0, code, "create in a host root dir")
	_, _, code = env.run(t, "u1", "chmod", "666", "/host/f")
	assert.NotEqual(t, 0, code, "chmod of a host root file")
	b, err := os.ReadFile(hostFile)
	require.NoError(t, err)
	assert.Equal(t, "host\n", string(b))
	assert.NoFileExists(t, filepath.Join(hostDir, "new"))
	uid, _ = hostOwner(t, hostFile)
	assert.Equal(t, uint32(0), uid)
	// An owned mount (a volume) is the instance's root's.
	_, stderr, code = env.run(t, "u1", "sh", "-c", "echo v > /vol/x")
	require.Equal(t, 0, code, stderr)
	uid, _ = hostOwner(t, filepath.Join(volDir, "x"))
	assert.Equal(t, uint32(base), uid)
	// Capabilities count only in the namespace: no way to the host's
	// network configuration either.
	_, _, code = env.run(t, "u1", "ip", "link", "set", "lo", "down")
	assert.NotEqual(t, 0, code, "ip link set in the host-owned network namespace")

	// Mounts (for saves) gives the same upper dir; the label gives the
	// mapping a save shifts back with.
	assert.Equal(t, upper, upperDir(t, env.rt, "u1"))
	st, err := env.rt.Status(ctx, "u1")
	require.NoError(t, err)
	m, err := ParseUserNSLabel(st.Labels[LabelUserNS])
	require.NoError(t, err)
	assert.Equal(t, uint32(base), m[0].HostID)

	// Stop and Start keep the layer and the mapping.
	require.NoError(t, env.rt.Stop(ctx, "u1"))
	require.NoError(t, env.rt.Start(ctx, "u1"))
	out, _, code = env.run(t, "u1", "sh", "-c", "cat /made; cat /proc/self/uid_map")
	require.Equal(t, 0, code)
	assert.Equal(t, []string{"made", "0", strconv.Itoa(base), "65536"}, strings.Fields(out))

	// A second instance of the image reuses the remapped parent.
	env.create(t, InstanceSpec{ID: "u2", Network: NetworkPolicy{Group: "g"}})
	out, _, code = env.run(t, "u2", "stat", "-c", "%u", "/bin/busybox")
	require.Equal(t, 0, code)
	assert.Equal(t, "0", strings.TrimSpace(out))

	// Its network namespace is its own (sysfs shows eth0, not the host's
	// interfaces), and the group's instances still reach each other.
	out, _, code = env.run(t, "u2", "ls", "/sys/class/net")
	require.Equal(t, 0, code)
	assert.ElementsMatch(t, []string{"eth0", "lo"}, strings.Fields(out))
	env.listenIn(t, "u2", 7000)
	assert.True(t, env.reach(t, "u1", env.addr(t, "u2"), 7000), "u1 -> u2 in the same group")

	// A writable layer on a disk image (a disk limit): its fs/ keeps the
	// mapped root's ownership, so root inside can write there.
	env.create(t, InstanceSpec{ID: "d1", Limits: Limits{DiskBytes: 64 << 20}})
	_, stderr, code = env.run(t, "d1", "sh", "-c", "echo x > /made && mkdir /dir")
	require.Equal(t, 0, code, stderr)
	uid, _ = hostOwner(t, filepath.Join(snapshotUpper(t, env.rt, "d1"), "made"))
	assert.Equal(t, uint32(base), uid)
	require.True(t, env.rt.hasDisk("d1"), "the layer is on its disk image")

	// HostIDs (builds): no user namespace, and savable.
	env.create(t, InstanceSpec{ID: "b1", HostIDs: true})
	uidMap, _, code = env.run(t, "b1", "cat", "/proc/self/uid_map")
	require.Equal(t, 0, code)
	assert.Equal(t, []string{"0", "0", "4294967295"}, strings.Fields(uidMap))
	_, err = env.rt.Mounts(ctx, "b1")
	require.NoError(t, err)
}

// searchable makes dir and its parent (t.TempDir's two levels) 0711 and
// returns dir.
func searchable(t *testing.T, dir string) string {
	t.Helper()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	require.NoError(t, os.Chmod(dir, 0o711))
	return dir
}
