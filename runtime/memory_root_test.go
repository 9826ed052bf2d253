package runtime

import (
	"bufio"
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// counterLoop counts in a shell variable (memory only) and writes each value
// to /root/count: a restart would begin at 1 again, or not run at all.
const counterLoop = "(i=0; while :; do i=$((i+1)); echo $i > /root/count.tmp; mv /root/count.tmp /root/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 &"

// readCount is the counter's last value in instance id, 0 before its first.
func (env *testEnv) readCount(t *testing.T, id string) int {
	t.Helper()
	out, _, _ := env.run(t, id, "cat", "/root/count")
	n, _ := strconv.Atoi(strings.TrimSpace(out))
	return n
}

// awaitCount waits until instance id's counter is past n and returns it.
func (env *testEnv) awaitCount(t *testing.T, id string, n int) int {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if v := env.readCount(t, id); v > n {
			return v
		}
		require.True(t, time.Now().Before(deadline), "counter of %s not past %d in two minutes", id, n)
		time.Sleep(100 * time.Millisecond)
	}
}

// A gVisor instance's processes are checkpointed while it is paused (the
// save path's freeze) and stay paused, then run on; a second instance
// restored from the image continues the counter a process held in memory,
// and answers exec. A runc instance is refused before anything is written.
func TestRootGVisorMemoryCheckpoint(t *testing.T) {
	env := newGVisorEnv(t, nil)
	ctx := context.Background()
	rt := env.rt
	env.create(t, InstanceSpec{ID: "ma"})
	_, errOut, code := env.run(t, "ma", "sh", "-c", counterLoop)
	require.Equal(t, 0, code, errOut)
	env.awaitCount(t, "ma", 5)

	dir := filepath.Join(t.TempDir(), "mem")
	require.NoError(t, rt.Pause(ctx, "ma"))
	start := time.Now()
	require.NoError(t, rt.CheckpointMemory(ctx, "ma", dir))
	t.Logf("memory checkpoint of a paused gVisor instance: %v", time.Since(start))
	st, err := rt.Status(ctx, "ma")
	require.NoError(t, err)
	assert.Equal(t, "paused", st.Task, "the checkpoint leaves a paused instance paused")
	b, err := os.ReadFile(filepath.Join(upperDir(t, rt, "ma"), "root", "count"))
	require.NoError(t, err)
	frozenAt, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	require.NoError(t, rt.Resume(ctx, "ma"))
	at := env.readCount(t, "ma")
	env.awaitCount(t, "ma", at)

	start = time.Now()
	env.create(t, InstanceSpec{ID: "mb", RestoreFrom: dir})
	got := env.awaitCount(t, "mb", 0)
	t.Logf("restored to the counter's first write: %v (value %d, checkpointed at %d)", time.Since(start), got, frozenAt)
	assert.Greater(t, got, frozenAt, "the restored counter goes on from its checkpointed value, it does not begin again")
	assert.Less(t, got, at+50, "and from the checkpoint's value")

	env.create(t, InstanceSpec{ID: "r", Class: ClassRunc})
	err = rt.CheckpointMemory(ctx, "r", filepath.Join(t.TempDir(), "runc"))
	require.ErrorIs(t, err, ErrNotOnClass)
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	err = rt.Create(ctx, InstanceSpec{ID: "r2", Image: env.ref, Class: ClassRunc, RestoreFrom: dir})
	require.ErrorIs(t, err, ErrNotOnClass)
}

// A memory checkpoint of a gVisor instance with an established TCP
// connection from the node is refused before anything is written (the
// resumed copy would not have it); once the connection is closed the
// checkpoint is taken.
func TestRootGVisorMemoryRefusesTCP(t *testing.T) {
	env := newGVisorEnv(t, nil)
	ctx := context.Background()
	rt := env.rt
	env.create(t, InstanceSpec{ID: "ca"})
	_, _, code := env.run(t, "ca", "sh", "-c", "(while :; do nc -l -p 7000 -e sh -c 'while read l; do echo got-$l; done'; done </dev/null >/dev/null 2>&1 &) ; sleep 0.3")
	require.Equal(t, 0, code)
	addr := net.JoinHostPort(rt.Address("ca"), "7000")
	var conn net.Conn
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		conn = c
		return err == nil
	}, time.Minute, 100*time.Millisecond)
	rd := bufio.NewReader(conn)
	_, err := conn.Write([]byte("one\n"))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(30*time.Second)))
	l, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "got-one\n", l, "the connection is established")

	dir := filepath.Join(t.TempDir(), "mem")
	err = rt.CheckpointMemory(ctx, "ca", dir)
	require.ErrorIs(t, err, ErrExternalConnection)
	require.ErrorIs(t, err, errdefs.ErrMemoryUnsupported)
	assert.Contains(t, err.Error(), addr, "the answer names the connection")
	_, serr := os.Stat(dir)
	assert.ErrorIs(t, serr, os.ErrNotExist, "nothing written")

	require.NoError(t, conn.Close())
	require.Eventually(t, func() bool {
		conns, err := rt.ExternalConnections(ctx, "ca")
		return err == nil && len(conns) == 0
	}, time.Minute, 100*time.Millisecond, "the closed connection is no longer established")
	require.NoError(t, rt.CheckpointMemory(ctx, "ca", dir))
}
