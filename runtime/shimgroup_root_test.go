package runtime

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/internal/proc"
)

// shimOf is the pid of the shim process serving instance id's task: the
// parent of its init (the shim is the subreaper its init is left to once
// runc or runsc has exited).
func shimOf(t *testing.T, rt *Runtime, id string) int {
	t.Helper()
	st, err := rt.Status(context.Background(), id)
	require.NoError(t, err)
	require.NotZero(t, st.Pid, "instance %s has no task", id)
	ppid, comm, err := proc.Parent(int(st.Pid))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(comm, "containerd-shim"), "parent of %s's init is %q", id, comm)
	return ppid
}

// Instances of one group key share a shim, at most ShimGroupSize of them;
// other keys, no key and the other class get shims of their own; an
// instance keeps its group across Stop/Start.
func TestRootShimGroups(t *testing.T) {
	env := newTestEnvWith(t, NetworkConfig{Subnet: freeSubnet(t)}, func(c *Config) { c.ShimGroupSize = 2 })
	ctx := context.Background()
	rt := env.rt
	for _, s := range []InstanceSpec{
		{ID: "a1", ShimGroup: "a"}, {ID: "a2", ShimGroup: "a"}, {ID: "a3", ShimGroup: "a"},
		{ID: "b1", ShimGroup: "b"}, {ID: "n1"}, {ID: "n2"},
	} {
		env.create(t, s)
	}
	a1, a2, a3, b1, n1, n2 := shimOf(t, rt, "a1"), shimOf(t, rt, "a2"), shimOf(t, rt, "a3"), shimOf(t, rt, "b1"), shimOf(t, rt, "n1"), shimOf(t, rt, "n2")
	assert.Equal(t, a1, a2, "two instances of group a share a shim")
	assert.NotEqual(t, a1, a3, "the third of group a is past the group size: a second shim")
	assert.Len(t, map[int]bool{a1: true, a3: true, b1: true, n1: true, n2: true}, 5, "group b and ungrouped instances have shims of their own")
	g1, err := rt.ShimGroupOf(ctx, "a1")
	require.NoError(t, err)
	g2, err := rt.ShimGroupOf(ctx, "a2")
	require.NoError(t, err)
	assert.NotEmpty(t, g1)
	assert.Equal(t, g1, g2)

	t.Run("removal frees a place", func(t *testing.T) {
		require.NoError(t, rt.Remove(ctx, "a2"))
		env.create(t, InstanceSpec{ID: "a4", ShimGroup: "a"})
		assert.Equal(t, shimOf(t, rt, "a1"), shimOf(t, rt, "a4"))
	})
	t.Run("kept across stop and start", func(t *testing.T) {
		require.NoError(t, rt.Stop(ctx, "a1"))
		require.NoError(t, rt.Start(ctx, "a1"))
		assert.Equal(t, shimOf(t, rt, "a4"), shimOf(t, rt, "a1"))
		echoes(t, env, "a1")
	})
}

// A shim's death ends the tasks of its own group's instances and no
// other's: they are left with their containers and no task (what envd
// reports as shim_lost), the others keep running and answer execs, and a
// dead group's instance starts again (in a new shim).
func TestRootShimDeathFailsOnlyItsGroup(t *testing.T) {
	env := newTestEnvWith(t, NetworkConfig{Subnet: freeSubnet(t)}, func(c *Config) { c.ShimGroupSize = 4 })
	ctx := context.Background()
	rt := env.rt
	for _, s := range []InstanceSpec{
		{ID: "a1", ShimGroup: "tenant-a"}, {ID: "a2", ShimGroup: "tenant-a"},
		{ID: "b1", ShimGroup: "tenant-b"}, {ID: "b2", ShimGroup: "tenant-b"}, {ID: "n1"},
	} {
		env.create(t, s)
	}
	dead := shimOf(t, rt, "a1")
	require.Equal(t, dead, shimOf(t, rt, "a2"))
	others := map[string]int{"b1": shimOf(t, rt, "b1"), "b2": shimOf(t, rt, "b2"), "n1": shimOf(t, rt, "n1")}

	inits := map[string]uint32{}
	for id := range others {
		st, err := rt.Status(ctx, id)
		require.NoError(t, err)
		inits[id] = st.Pid
	}

	require.NoError(t, syscall.Kill(dead, syscall.SIGKILL))
	for _, id := range []string{"a1", "a2"} {
		// containerd forgets the task once its shim's delete has run.
		require.Eventually(t, func() bool {
			st, err := rt.Status(ctx, id)
			return err == nil && st.Exists && st.Task == ""
		}, 30*time.Second, 50*time.Millisecond, "instance %s: container kept, task gone", id)
	}
	for id, shim := range others {
		st, err := rt.Status(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, "running", st.Task, "instance %s of another group", id)
		assert.Equal(t, inits[id], st.Pid, "instance %s: the same init", id)
		assert.Equal(t, shim, shimOf(t, rt, id), "instance %s kept its shim", id)
		echoes(t, env, id)
	}

	require.NoError(t, rt.Start(ctx, "a1"), "an instance of the dead group starts again")
	assert.NotEqual(t, dead, shimOf(t, rt, "a1"))
	echoes(t, env, "a1")
}

// echoes checks that a command runs in instance id.
func echoes(t *testing.T, env *testEnv, id string) {
	t.Helper()
	out, _, code := env.run(t, id, "echo", "hi from "+id)
	assert.Equal(t, 0, code, "exec in %s", id)
	assert.Equal(t, "hi from "+id+"\n", out, "exec in %s", id)
}

// A group emptied and joined again at once: each worker creates an
// instance in the group, runs a command in it and removes it, over and
// over, so the group's last task is often deleted (its shim told to exit)
// while another worker's task is being created in it; one more worker's
// creates fail in runc (a file bound over a directory), which containerd
// cleans up with a shutdown too. Every other create succeeds and every
// instance answers: a task never joins a shim on its way out (which
// failed creates with "ttrpc: closed", or lost the task with the shim).
func TestRootShimGroupChurn(t *testing.T) {
	env := newTestEnvWith(t, NetworkConfig{Subnet: freeSubnet(t)}, func(c *Config) { c.ShimGroupSize = 8 })
	ctx := context.Background()
	// The gate's wait, alone: the group's shim listens where the runtime
	// computes, and is gone once the removal of its last instance returns.
	env.create(t, InstanceSpec{ID: "probe", ShimGroup: "churn"})
	group, err := env.rt.ShimGroupOf(ctx, "probe")
	require.NoError(t, err)
	addr := shimSocketAddress(env.rt.cfg.Namespace, env.rt.cfg.Address, group)
	require.True(t, socketAnswers(addr), "the group's shim listens on %s", addr)
	require.NoError(t, env.rt.Remove(ctx, "probe"))
	require.False(t, socketAnswers(addr), "the emptied group's shim has exited when the removal returns")

	const workers, rounds = 3, 12
	errs := make(chan error, workers*rounds)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				id := fmt.Sprintf("churn%d-%d", w, i)
				if err := env.rt.Create(ctx, InstanceSpec{ID: id, Image: env.ref, ShimGroup: "churn"}); err != nil {
					errs <- fmt.Errorf("create %s: %w", id, err)
					continue
				}
				var out bytes.Buffer
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				code, err := env.rt.Exec(cctx, id, ExecSpec{Args: []string{"echo", id}, Stdout: &out})
				cancel()
				if err != nil || code != 0 || out.String() != id+"\n" {
					errs <- fmt.Errorf("exec in %s: code %d, %q, %v", id, code, out.String(), err)
				}
				if err := env.rt.Remove(ctx, id); err != nil {
					errs <- fmt.Errorf("remove %s: %w", id, err)
				}
			}
		})
	}
	notDir := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(notDir, nil, 0o644))
	wg.Go(func() {
		for i := range rounds {
			id := fmt.Sprintf("fails-%d", i)
			err := env.rt.Create(ctx, InstanceSpec{ID: id, Image: env.ref, ShimGroup: "churn",
				Mounts: []Mount{{Source: notDir, Destination: "/bin"}}})
			if err == nil {
				errs <- fmt.Errorf("create %s: a file bound over /bin was accepted", id)
			}
			if err := env.rt.Remove(ctx, id); err != nil {
				errs <- fmt.Errorf("remove %s: %w", id, err)
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	assert.False(t, socketAnswers(addr), "no shim is left for the emptied group")
}
