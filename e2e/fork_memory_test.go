package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// memHolder counts in a shell variable and keeps a value in another, both
// in memory only; each tick it writes "COUNT VALUE" to /root/state. SIGUSR1
// makes it read a new value from /root/set (then the file can go: the
// value lives in the shell's memory). Its pid is in /root/pid.
const memHolder = `(v=start; i=0; trap 'v=$(cat /root/set)' USR1; while :; do i=$((i+1)); echo "$i $v" > /root/state.tmp; mv /root/state.tmp /root/state; sleep 0.1; done) </dev/null >/dev/null 2>&1 & echo $! > /root/pid`

// holderState is memHolder's last count and value in instance id.
func holderState(t *testing.T, id string) (int, string) {
	t.Helper()
	out := strings.Fields(mustSh(t, id, "cat /root/state"))
	require.Len(t, out, 2, "state of %s", id)
	n, err := strconv.Atoi(out[0])
	require.NoError(t, err)
	return n, out[1]
}

// holderSet gives memHolder in id a new value through its memory (the file
// it reads is removed at once) and waits until it writes it.
func holderSet(t *testing.T, id, value string) {
	t.Helper()
	mustSh(t, id, fmt.Sprintf("echo %s > /root/set && kill -USR1 $(cat /root/pid)", value))
	require.Eventually(t, func() bool { _, v := holderState(t, id); return v == value }, 2*time.Minute, 100*time.Millisecond,
		"the holder in %s does not take %s", id, value)
	mustSh(t, id, "rm /root/set")
}

// holderPast waits until memHolder's count in id is past n and returns it.
func holderPast(t *testing.T, id string, n int) int {
	t.Helper()
	var c int
	require.Eventually(t, func() bool { c, _ = holderState(t, id); return c > n }, 2*time.Minute, 100*time.Millisecond,
		"the holder in %s does not go past %d", id, n)
	return c
}

// A running gVisor instance whose program holds its state in memory only
// is forked with its memory into 4: each copy's program goes on from the
// fork point (its count does not start again, its value is the one set in
// memory before the fork), each copy is an instance of its own (id,
// address, generation, hostname) and what each then changes, in memory and in files,
// the others do not see; the original runs on. The fork's checkpoint stays
// free: a start from it later resumes it once, with the one-winner rule.
// A memory fork of a runc instance is refused before anything is made.
func TestRootForkMemory(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := fmt.Sprintf("forkmem-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase, RuntimeClass: "gvisor"})
	require.NoError(t, err)
	a := up(t, p, 0)
	mustSh(t, a.ID, memHolder)
	holderSet(t, a.ID, "original")
	mustSh(t, a.ID, "echo shared > /root/point")
	before := holderPast(t, a.ID, 5)

	asked := time.Now()
	op, err := env.c.Fork(c, a.ID, types.ForkRequest{Memory: true, Count: 4, TTL: "30m"}, "")
	require.NoError(t, err)
	res := succeeded[types.ForkResult](t, op, err)
	done := time.Since(asked)
	for _, in := range res.Instances {
		t.Cleanup(func() { _, _ = env.c.DeleteInstance(context.Background(), in.ID) })
	}
	require.Len(t, res.Instances, 4)
	answered := make(chan time.Duration, 4)
	for _, in := range res.Instances {
		go func() { // every copy answers an exec
			if _, err := env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"true"}}); err == nil {
				answered <- time.Since(asked)
			} else {
				answered <- -1
			}
		}()
	}
	var last time.Duration
	for range 4 {
		d := <-answered
		require.Positive(t, d, "a copy did not answer an exec")
		last = max(last, d)
	}
	t.Logf("fork into 4 with memory: operation done %s after the request, all 4 answered an exec %s after it", done.Round(time.Millisecond), last.Round(time.Millisecond))

	events, err := env.c.OperationEvents(c, op.ID, 0)
	require.NoError(t, err)
	var kinds []string
	started := 0
	for _, e := range events {
		kinds = append(kinds, e.Type)
		if e.Type == "started" {
			started++
		}
		t.Logf("event +%s %s: %s", e.At.Sub(asked).Round(time.Millisecond), e.Type, e.Message)
	}
	assert.Subset(t, kinds, []string{"spooled", "pushed", "memory", "committed"})
	assert.Equal(t, 4, started, "one started event per copy")

	require.NotZero(t, res.Checkpoint, "a memory fork names its checkpoint")
	cp, err := env.c.GetCheckpoint(c, p, res.Checkpoint)
	require.NoError(t, err)
	require.NotNil(t, cp.Memory)
	assert.Equal(t, res.Version, cp.Version)
	assert.Empty(t, cp.Memory.ResumedBy, "the copies do not claim the checkpoint")
	proj, err := env.c.GetProject(c, p)
	require.NoError(t, err)
	assert.NotEqual(t, res.Version, proj.Current, "a fork does not move current")

	// Identity: ids, addresses and generations of their own.
	ids, addrs := map[string]bool{a.ID: true}, map[string]bool{getInstance(t, a.ID).Address: true}
	for _, in := range res.Instances {
		assert.Equal(t, types.StateRunning, in.State)
		assert.Equal(t, res.Version, in.Version)
		assert.Equal(t, int64(1), in.Generation, "a copy is a new instance with its own generation")
		assert.False(t, ids[in.ID], "id %s twice", in.ID)
		ids[in.ID] = true
		require.NotEmpty(t, in.Address)
		assert.False(t, addrs[in.Address], "address %s twice", in.Address)
		addrs[in.Address] = true
		// The copy's kernel took its new address (gVisor's netstack) and
		// its own hostname, the instance id (runsc takes the restore
		// spec's), which /etc/hosts maps to its address.
		assert.Contains(t, mustSh(t, in.ID, "ip -4 addr"), in.Address+"/")
		assert.Equal(t, in.ID, mustSh(t, in.ID, "hostname"))
		assert.Equal(t, in.ID, mustSh(t, in.ID, "cat /etc/hostname"))
		assert.Contains(t, mustSh(t, in.ID, "cat /etc/hosts"), in.Address+"\t"+in.ID)
	}
	assert.Equal(t, int64(1), getInstance(t, a.ID).Generation, "the original keeps its own generation")
	assert.Equal(t, p, mustSh(t, a.ID, "hostname"), "the original keeps its project's name")

	// The programs go on from the fork point: counts from where they were,
	// the value set in memory before the fork.
	for _, in := range res.Instances {
		n, v := holderState(t, in.ID)
		assert.GreaterOrEqual(t, n, before, "copy %s counts on from the fork point, not from 1", in.ID)
		assert.Equal(t, "original", v, "copy %s has the value held in memory at the fork", in.ID)
		assert.Equal(t, "shared", mustSh(t, in.ID, "cat /root/point"))
		t.Logf("copy %s (%s): count %d at first look (%d before the fork)", in.ID, in.Address, n, before)
	}

	// Each copy diverges on its own: a value in memory and a file.
	for i, in := range res.Instances {
		holderSet(t, in.ID, fmt.Sprintf("copy%d", i))
		mustSh(t, in.ID, fmt.Sprintf("echo %d > /root/mine", i))
	}
	holderSet(t, a.ID, "original2")
	for i, in := range res.Instances {
		n, v := holderState(t, in.ID)
		assert.Equal(t, fmt.Sprintf("copy%d", i), v, "copy %s keeps its own value in memory", in.ID)
		assert.Equal(t, strconv.Itoa(i), mustSh(t, in.ID, "cat /root/mine"), "copy %s sees its own file", in.ID)
		holderPast(t, in.ID, n)
	}
	_, v := holderState(t, a.ID)
	assert.Equal(t, "original2", v)
	assert.NotZero(t, sh(t, a.ID, "test -e /root/mine").ExitCode, "the original does not see the copies' files")
	holderPast(t, a.ID, holderPast(t, a.ID, before)) // the original runs on

	// The fork's checkpoint resumes once more as any checkpoint: one
	// instance at a time runs it.
	resumed, err := env.c.CreateInstance(c, p, types.CreateInstanceRequest{Checkpoint: res.Checkpoint})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(context.Background(), resumed.ID) })
	n, v := holderState(t, resumed.ID)
	assert.GreaterOrEqual(t, n, before)
	assert.Equal(t, "original", v)
	_, err = env.c.CreateInstance(c, p, types.CreateInstanceRequest{Checkpoint: res.Checkpoint})
	assert.ErrorIs(t, err, errdefs.ErrConflict, "a second resume while the first lives is refused, forks or not")
	cp, err = env.c.GetCheckpoint(c, p, res.Checkpoint)
	require.NoError(t, err)
	assert.Equal(t, resumed.ID, cp.Memory.ResumedBy)

	// A runc instance: refused before anything is made.
	rp := newProject(t, "forkmemrunc")
	r := up(t, rp, 0)
	vs, err := env.c.ListVersions(c, rp)
	require.NoError(t, err)
	_, err = env.c.Fork(c, r.ID, types.ForkRequest{Memory: true, Count: 4}, "")
	require.ErrorIs(t, err, errdefs.ErrMemoryUnsupported)
	var apiErr *types.Error
	if assert.ErrorAs(t, err, &apiErr) {
		assert.Equal(t, "class", apiErr.Details["reason"])
	}
	ins, err := env.c.ListInstances(c, rp)
	require.NoError(t, err)
	require.Len(t, ins, 1, "no instance made")
	after, err := env.c.ListVersions(c, rp)
	require.NoError(t, err)
	assert.Len(t, after, len(vs), "no version made")
}

// A fork with memory into 8 (issue 25: N up to at least 8): all 8 run,
// each at an address of its own, each program counting on from the fork
// point.
func TestRootForkMemoryIntoEight(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := fmt.Sprintf("forkmem8-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase, RuntimeClass: "gvisor"})
	require.NoError(t, err)
	a := up(t, p, 0)
	mustSh(t, a.ID, memHolder)
	holderSet(t, a.ID, "original")
	before := holderPast(t, a.ID, 5)

	asked := time.Now()
	op, err := env.c.Fork(c, a.ID, types.ForkRequest{Memory: true, Count: 8, TTL: "30m"}, "")
	res := succeeded[types.ForkResult](t, op, err)
	for _, in := range res.Instances {
		t.Cleanup(func() { _, _ = env.c.DeleteInstance(context.Background(), in.ID) })
	}
	t.Logf("fork into 8 with memory: operation done %s after the request", time.Since(asked).Round(time.Millisecond))
	require.Len(t, res.Instances, 8)
	addrs := map[string]bool{}
	for _, in := range res.Instances {
		assert.Equal(t, types.StateRunning, in.State)
		assert.False(t, addrs[in.Address], "address %s twice", in.Address)
		addrs[in.Address] = true
		n, v := holderState(t, in.ID)
		assert.GreaterOrEqual(t, n, before, "copy %s counts on from the fork point", in.ID)
		assert.Equal(t, "original", v)
		holderPast(t, in.ID, n)
	}
}

// The copies of a memory fork of a project with a volume mount the
// project's volume as every instance does: what one writes there, the
// others and the original read; the fork's checkpoint has no archive.
func TestRootForkMemorySharesVolumes(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := fmt.Sprintf("forkmemvol-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase, RuntimeClass: "gvisor",
		Volumes: []string{p + "-work:/workspace"}})
	require.NoError(t, err)
	a := up(t, p, 0)
	mustSh(t, a.ID, memHolder)
	before := holderPast(t, a.ID, 5)

	op, err := env.c.Fork(c, a.ID, types.ForkRequest{Memory: true, Count: 2, TTL: "30m"}, "")
	res := succeeded[types.ForkResult](t, op, err)
	for _, in := range res.Instances {
		t.Cleanup(func() { _, _ = env.c.DeleteInstance(context.Background(), in.ID) })
	}
	require.Len(t, res.Instances, 2)
	cp, err := env.c.GetCheckpoint(c, p, res.Checkpoint)
	require.NoError(t, err)
	assert.Empty(t, cp.Volumes, "a fork's checkpoint archives no volume")
	x, y := res.Instances[0], res.Instances[1]
	assert.GreaterOrEqual(t, holderPast(t, x.ID, 0), before)
	mustSh(t, x.ID, "echo from-x > /workspace/shared")
	assert.Equal(t, "from-x", mustSh(t, y.ID, "cat /workspace/shared"))
	assert.Equal(t, "from-x", mustSh(t, a.ID, "cat /workspace/shared"))
}
