package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
	envdruntime "github.com/envd-dev/envd/runtime"
)

// memCounter counts in a shell variable, its state in memory only, and
// writes each value to /root/count: nothing would start it again after a
// restart, and a new start would count from 1.
const memCounter = "(i=0; while :; do i=$((i+1)); echo $i > /root/count.tmp; mv /root/count.tmp /root/count; sleep 0.1; done) </dev/null >/dev/null 2>&1 &"

// countIn is the counter's last value in instance id (0 before its first).
func countIn(t *testing.T, c *client.Client, id string) int {
	t.Helper()
	res, err := c.Exec(ctx(t), id, types.ExecRequest{Args: []string{"cat", "/root/count"}})
	require.NoError(t, err)
	n, _ := strconv.Atoi(strings.TrimSpace(res.Stdout))
	return n
}

// countPast waits until instance id's counter is past n and returns it.
func countPast(t *testing.T, c *client.Client, id string, n int) int {
	t.Helper()
	var v int
	require.Eventually(t, func() bool { v = countIn(t, c, id); return v > n }, 2*time.Minute, 100*time.Millisecond,
		"the counter in %s does not go past %d", id, n)
	return v
}

// memCheckpoint takes a checkpoint with memory of id through c and waits
// for it.
func memCheckpoint(t *testing.T, c *client.Client, id string) types.CheckpointResult {
	t.Helper()
	op, err := c.Checkpoint(ctx(t), id, types.CheckpointRequest{Message: "with memory", Memory: true})
	require.NoError(t, err)
	done, err := c.WaitOperation(ctx(t), op.ID, nil)
	require.NoError(t, err)
	require.Equalf(t, types.OpSucceeded, done.State, "checkpoint %s: %+v", done.ID, done.Error)
	var res types.CheckpointResult
	require.NoError(t, json.Unmarshal(done.Result, &res))
	return res
}

// A process whose state lives only in memory is checkpointed with its
// memory on one gVisor node, its instance removed, and resumed on another
// node from the registry: the counter goes on from where it was, it does
// not begin again. Two resumes of the checkpoint at once, one per node,
// give one winner and a conflict; the checkpoint's size and freeze are
// reported, and its memory image counts in the tenant's stored bytes.
func TestRootCheckpointMemoryResumesOnAnotherNode(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	cfg := &node.Config{DefaultTTL: time.Hour, RuntimeClass: "gvisor"}
	na, _ := startJoiningNode(t, "mem-a", cfg)
	nb, _ := startJoiningNode(t, "mem-b", cfg)
	// A tenant of its own: the stored bytes it checks are the tenant's, and
	// other tests checkpoint with memory beside it (in CI another one's
	// image was counted in between).
	tok, ca := tenantOn(t, na, "memresume")
	cb, err := client.New(nb.URL, tok)
	require.NoError(t, err)
	p := fmt.Sprintf("memresume-%d", projectSeq.Add(1))
	_, err = ca.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase})
	require.NoError(t, err)

	a, err := ca.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	_, err = ca.Exec(c, a.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c", memCounter}})
	require.NoError(t, err)
	before := countPast(t, ca, a.ID, 5)
	usage, err := ca.Usage(c, "")
	require.NoError(t, err)

	res := memCheckpoint(t, ca, a.ID)
	cp := res.Checkpoint
	require.NotNil(t, cp.Memory, "the checkpoint holds a memory image")
	assert.Positive(t, cp.Memory.Bytes)
	assert.Positive(t, cp.Memory.NewBytes)
	assert.LessOrEqual(t, cp.Memory.NewBytes, cp.Memory.Bytes+64<<10)
	assert.Contains(t, cp.Memory.Image, "@sha256:")
	assert.Positive(t, res.FreezeMS)
	assert.GreaterOrEqual(t, res.FreezeMS, cp.Memory.FreezeMS, "the engine's part is inside the one freeze")
	assert.Equal(t, cp.VersionBytes+cp.Memory.NewBytes, cp.Bytes)
	t.Logf("checkpoint with memory: freeze %d ms (engine %d ms), memory image %d bytes (%d new), pushed in %d ms, total %d ms",
		res.FreezeMS, cp.Memory.FreezeMS, cp.Memory.Bytes, cp.Memory.NewBytes, res.MemoryPushMS, res.TotalMS)
	after, err := ca.Usage(c, "")
	require.NoError(t, err)
	assert.Equal(t, usage.CheckpointBytes+cp.Memory.NewBytes, after.CheckpointBytes, "the memory image counts in stored bytes")
	got, err := cb.GetCheckpoint(c, p, cp.ID)
	require.NoError(t, err)
	assert.Equal(t, cp.Memory, got.Memory, "listed the same from any node")

	// The instance ran on, then is removed: only the checkpoint is left.
	countPast(t, ca, a.ID, before)
	_, err = ca.DeleteInstance(c, a.ID)
	require.NoError(t, err)

	// Two resumes at once, one on each node: one wins.
	type result struct {
		in  types.Instance
		err error
	}
	results := make([]result, 2)
	var wg sync.WaitGroup
	for i, cl := range []*client.Client{ca, cb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, err := cl.CreateInstance(c, p, types.CreateInstanceRequest{Checkpoint: cp.ID})
			results[i] = result{in, err}
		}()
	}
	wg.Wait()
	var winner types.Instance
	var winnerClient *client.Client
	losers := 0
	for i, r := range results {
		if r.err == nil {
			require.Empty(t, winner.ID, "two resumes of one checkpoint both won")
			winner, winnerClient = r.in, []*client.Client{ca, cb}[i]
			t.Cleanup(func() { _, _ = winnerClient.DeleteInstance(context.Background(), r.in.ID) })
			continue
		}
		losers++
		assert.ErrorIs(t, r.err, errdefs.ErrConflict, "the loser is told another instance runs the checkpoint's processes")
	}
	require.Equal(t, 1, losers)
	require.Equal(t, types.StateRunning, winner.State)
	assert.NotEqual(t, a.ID, winner.ID)

	// The counter goes on from the checkpoint, not from 1.
	first := countIn(t, winnerClient, winner.ID)
	assert.GreaterOrEqual(t, first, before, "the resumed counter starts from its checkpointed value")
	next := countPast(t, winnerClient, winner.ID, first)
	t.Logf("resumed on %s: counter %d then %d (%d before the checkpoint)", winner.Node, first, next, before)

	// A resume while the winner lives is refused from either node.
	_, err = cb.CreateInstance(c, p, types.CreateInstanceRequest{Checkpoint: cp.ID})
	assert.ErrorIs(t, err, errdefs.ErrConflict)
	got, err = ca.GetCheckpoint(c, p, cp.ID)
	require.NoError(t, err)
	assert.Equal(t, winner.ID, got.Memory.ResumedBy)

	// The second node resumes it once the winner is gone: any node can.
	_, err = winnerClient.DeleteInstance(c, winner.ID)
	require.NoError(t, err)
	other := cb
	if winnerClient == cb {
		other = ca
	}
	again, err := other.CreateInstance(c, p, types.CreateInstanceRequest{Checkpoint: cp.ID})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = other.DeleteInstance(context.Background(), again.ID) })
	assert.NotEqual(t, winner.Node, again.Node)
	assert.GreaterOrEqual(t, countPast(t, other, again.ID, 0), before)
}

// A checkpoint with memory of a runc instance, or of a stopped one, is
// refused with memory_checkpoint_unsupported before anything is made: no
// checkpoint, no version, the instance as it was.
func TestRootCheckpointMemoryRefusals(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := newProject(t, "memrefuse")
	in, err := env.c.CreateInstance(c, p, types.CreateInstanceRequest{Retain: true})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.DeleteInstance(context.Background(), in.ID) })
	require.Equal(t, envdruntime.ClassRunc, env.node.Runtime().DefaultClass(), "the shared node runs runc (ENVD_E2E_RUNTIME_CLASS unset)")
	vs, err := env.c.ListVersions(c, p)
	require.NoError(t, err)

	_, err = env.c.Checkpoint(c, in.ID, types.CheckpointRequest{Memory: true})
	require.ErrorIs(t, err, errdefs.ErrMemoryUnsupported)
	assert.Contains(t, err.Error(), "gvisor", "the answer says which class can")
	cs, err := env.c.ListCheckpoints(c, p)
	require.NoError(t, err)
	assert.Empty(t, cs)
	after, err := env.c.ListVersions(c, p)
	require.NoError(t, err)
	assert.Len(t, after, len(vs), "no version made")
	assert.Equal(t, types.StateRunning, getInstance(t, in.ID).State)

	_, err = env.c.StopInstance(c, in.ID)
	require.NoError(t, err)
	_, err = env.c.Checkpoint(c, in.ID, types.CheckpointRequest{Memory: true})
	require.ErrorIs(t, err, errdefs.ErrMemoryUnsupported, "a stopped instance has no processes to keep")
}

// envd killed with SIGKILL during a checkpoint with memory, once right
// after the freeze and once after the memory image's push (racing the
// commit): no half-made checkpoint is listed for either, the instance runs on and
// is not left frozen, and the checkpoint taken before both still resumes
// its processes.
func TestRootKillDuringMemoryCheckpoint(t *testing.T) {
	t.Parallel()
	bin := buildEnvd(t)
	dataDir := killDataDir(t, bin)
	gvisor := []string{"ENVD_RUNTIME_CLASS=gvisor"}
	c := context.Background()
	p, cl := startEnvdEnv(t, bin, dataDir, gvisor)
	defer func() { p.kill(t) }()
	_, err := cl.ImportImage(c, "fixture", bytes.NewReader(env.fixtureTar))
	require.NoError(t, err)
	_, err = cl.CreateProject(c, types.CreateProjectRequest{Name: "memkilled", Base: "fixture"})
	require.NoError(t, err)
	in, err := cl.CreateInstance(c, "memkilled", types.CreateInstanceRequest{})
	require.NoError(t, err)
	_, err = cl.Exec(c, in.ID, types.ExecRequest{Args: []string{"/bin/sh", "-c", memCounter}})
	require.NoError(t, err)
	before := countPast(t, cl, in.ID, 5)
	first := memCheckpoint(t, cl, in.ID)
	require.NotNil(t, first.Checkpoint.Memory)

	for _, at := range []string{"spooled", "memory"} {
		op, err := cl.Checkpoint(c, in.ID, types.CheckpointRequest{Memory: true})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			evs, err := cl.OperationEvents(c, op.ID, 0)
			if err != nil {
				return false
			}
			for _, e := range evs {
				if e.Type == at {
					return true
				}
			}
			return false
		}, 2*time.Minute, 20*time.Millisecond, "no %s event", at)
		p.kill(t)
		p, cl = startEnvdEnv(t, bin, dataDir, gvisor)

		done, err := cl.WaitOperation(c, op.ID, nil)
		require.NoError(t, err)
		if at == "spooled" {
			assert.Equal(t, types.OpFailed, done.State, "killed at %s: the checkpoint is not finished by the next envd", at)
		} else {
			// The kill after the push can land after the commit, even after
			// the operation's end (seen in CI): then it succeeded, whole.
			assert.Contains(t, []types.OpState{types.OpFailed, types.OpSucceeded}, done.State, "killed at %s", at)
		}
		cs, err := cl.ListCheckpoints(c, "memkilled")
		require.NoError(t, err)
		// The kill after the "memory" event races the row's commit, which
		// follows the push at once: either no new checkpoint is listed, or
		// the new one is whole (its memory image recorded). Never one
		// without its image.
		require.NotEmpty(t, cs)
		if done.State == types.OpSucceeded {
			require.Len(t, cs, 2, "killed at %s after the operation ended: its checkpoint is listed", at)
		}
		for _, ck := range cs {
			if ck.ID != first.Checkpoint.ID {
				require.Equal(t, "memory", at, "killed at %s: no checkpoint is listed but the first", at)
				require.NotNil(t, ck.Memory, "killed at %s: a listed checkpoint is whole", at)
				assert.NotEmpty(t, ck.Memory.Image, "killed at %s: a listed checkpoint is whole", at)
			}
		}
		got, err := cl.GetInstance(c, in.ID)
		require.NoError(t, err)
		assert.Equal(t, types.StateRunning, got.State)
		seen := countIn(t, cl, in.ID)
		countPast(t, cl, in.ID, seen) // runs on: not left frozen
	}

	_, err = cl.DeleteInstance(c, in.ID)
	require.NoError(t, err)
	resumed, err := cl.CreateInstance(c, "memkilled", types.CreateInstanceRequest{Checkpoint: first.Checkpoint.ID})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, countPast(t, cl, resumed.ID, 0), before, "the earlier checkpoint resumes its counter")
}
