package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// A docker instance on runc is refused before anything is made, with the
// reason and the way out; the node's default class counts when the spec
// names none.
func TestRootDockerRefusedOnRunc(t *testing.T) {
	env := newTestEnv(t, freeSubnet(t))
	for _, class := range []Class{"", ClassRunc} {
		err := env.rt.Create(context.Background(), InstanceSpec{ID: "d", Image: env.ref, Class: class, Docker: true})
		require.Error(t, err, "class %q", class)
		assert.ErrorIs(t, err, ErrDockerNeedsGVisor)
		assert.ErrorIs(t, err, ErrNotOnClass)
		assert.Equal(t, "failed_precondition", errdefs.Code(err))
		assert.Contains(t, err.Error(), "needs runtime class gvisor")
		assert.Equal(t, map[string]any{"feature": "docker", "runtime_class": "runc", "required_runtime_class": "gvisor"}, errdefs.Details(err))
		st, serr := env.rt.Status(context.Background(), "d")
		require.NoError(t, serr)
		assert.False(t, st.Exists, "nothing is made")
	}
	ids, err := env.rt.List(context.Background())
	require.NoError(t, err)
	assert.Empty(t, ids)
}

// A docker instance on gVisor gets, inside its sandbox, what dockerd needs
// (every capability, mounts, writable cgroups, a tmpfs for its data); the
// node's side of the sandbox holds no more capability than a plain gVisor
// instance's, and a plain gVisor instance keeps its restrictions.
func TestRootDockerGVisorSandbox(t *testing.T) {
	env := newGVisorEnv(t, nil)
	env.create(t, InstanceSpec{ID: "d", Docker: true})
	env.create(t, InstanceSpec{ID: "g"})

	capEff := func(id string) string {
		out, errOut, code := env.run(t, id, "sh", "-c", "grep CapEff /proc/self/status")
		require.Equal(t, 0, code, errOut)
		return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "CapEff:"))
	}
	assert.NotEqual(t, capEff("g"), capEff("d"), "the docker instance has more capabilities inside")

	// Mounts, as dockerd's overlay2 driver and nested runc make them.
	out, errOut, code := env.run(t, "d", "sh", "-c", "mkdir -p /mnt/t && mount -t tmpfs none /mnt/t && echo mounted")
	require.Equal(t, 0, code, "mount in the docker instance: %s %s", out, errOut)
	assert.Equal(t, "mounted", strings.TrimSpace(out))
	_, _, code = env.run(t, "g", "sh", "-c", "mkdir -p /mnt/t && mount -t tmpfs none /mnt/t")
	assert.NotEqual(t, 0, code, "a plain gVisor instance cannot mount")

	out, errOut, code = env.run(t, "d", "stat", "-f", "-c", "%T", DockerDataPath)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, "tmpfs", strings.TrimSpace(out), "dockerd's data is on a tmpfs of the sandbox")
	out, errOut, code = env.run(t, "d", "sh", "-c", "mkdir /sys/fs/cgroup/memory/nested && echo ok")
	require.Equal(t, 0, code, "cgroups writable in the docker instance: %s %s", out, errOut)
	out, errOut, code = env.run(t, "d", "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward && cat /proc/sys/net/ipv4/ip_forward")
	require.Equal(t, 0, code, "ip_forward of the sandbox's stack: %s %s", out, errOut)
	assert.Equal(t, "1", strings.TrimSpace(out))

	// Raw sockets stay off (runsc without --net-raw): no packet crafting
	// on the bridge. busybox ping falls back to an ICMP datagram socket,
	// so ask for a raw one directly through arping.
	out, errOut, code = env.run(t, "d", "arping", "-c", "1", "-w", "1", "-I", "eth0", env.addr(t, "g"))
	t.Logf("arping: %d %s %s", code, out, errOut)
	assert.NotEqual(t, 0, code, "arping (a packet socket) must not work")
	assert.Contains(t, errOut, "Operation not permitted")

	// The node's side: the sandbox and gofer processes of both instances
	// hold the same host capabilities.
	hostCaps := func(id string) (sandbox, gofer string) {
		st, err := env.rt.Status(context.Background(), id)
		require.NoError(t, err)
		require.NotZero(t, st.Pid)
		require.NotZero(t, st.RootPid)
		assert.Equal(t, id == "d", st.Docker, "Status.Docker of %s", id)
		return procCapEff(t, st.Pid), procCapEff(t, st.RootPid)
	}
	ds, dg := hostCaps("d")
	gs, gg := hostCaps("g")
	assert.Equal(t, gs, ds, "the sandbox process holds no more on the node")
	assert.Equal(t, gg, dg, "the gofer holds no more on the node")
}

func procCapEff(t *testing.T, pid uint32) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			return strings.TrimSpace(v)
		}
	}
	require.NoError(t, errors.New("no CapEff"))
	return ""
}
