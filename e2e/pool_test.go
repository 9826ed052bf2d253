package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

// A claim from a warm pool on the real runtime: the claimed instance is of
// the current version, answers its first commands with exec's usual
// semantics (127 for a missing command), and is as clean as a fresh
// instance: a save of it records exactly what a save of an untouched cold
// instance does.
func TestRootPoolClaim(t *testing.T) {
	// Not parallel: nodes that parallel tests join to the shared database
	// refill every project's pool too, and a pooled instance may then live
	// (and die) on another test's node (CI, 2026-12-02).
	c := ctx(t)
	p := newProject(t, "pool")

	cold := up(t, p, 0)
	require.NotEqual(t, "claimed from the pool", cold.Message)
	_, coldSave := save(t, cold.ID, "untouched cold instance")
	require.True(t, coldSave.Current)

	_, err := env.c.SetProjectPool(c, p, types.PoolSetting{Size: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.SetProjectPool(context.Background(), p, types.PoolSetting{Size: 0}) })
	waitPooled(t, p, coldSave.Version)

	in := up(t, p, 0)
	require.Equal(t, "claimed from the pool", in.Message)
	assert.Equal(t, coldSave.Version, in.Version, "the current version")
	assert.Equal(t, "hi", mustSh(t, in.ID, "echo hi"))
	res, err := env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"nosuch"}})
	require.NoError(t, err)
	assert.Equal(t, 127, res.ExitCode)
	assert.Equal(t, "nosuch: executable file not found in $PATH\n", res.Stderr)

	_, claimedSave := save(t, in.ID, "untouched claimed instance")
	assert.Equal(t, coldSave.Entries, claimedSave.Entries, "a claimed instance's layer holds what a fresh one's does")
}

// waitPooled waits until project has a Running pooled instance of version.
func waitPooled(t *testing.T, project string, version int) {
	t.Helper()
	conn, err := pgx.Connect(ctx(t), env.node.DSN())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n int
		require.NoError(t, conn.QueryRow(ctx(t), `SELECT count(*) FROM pool_instances pi
			JOIN instances i ON i.id = pi.instance_id JOIN projects p ON p.id = pi.project_id
			WHERE p.name = $1 AND pi.version = $2 AND i.state = 'Running'`, project, version).Scan(&n))
		if n > 0 {
			return
		}
		require.True(t, time.Now().Before(deadline), "waited 2 min for a pooled instance of %s version %d", project, version)
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRootPoolClaimSkipsDeadInstance: a pooled instance whose init has just
// died, while its row still says Running (its exit is settled a moment
// after the event), is never handed out: the claim passes it over, the
// create starts a fresh instance that answers, and the dead one is marked
// Failed and replaced in the pool.
func TestRootPoolClaimSkipsDeadInstance(t *testing.T) {
	// Not parallel: nodes that parallel tests join to the shared database
	// refill every project's pool too, and a pooled instance may then live
	// (and die) on another test's node (CI, 2026-12-02).
	c := ctx(t)
	p := newProject(t, "pooldead")
	_, err := env.c.SetProjectPool(c, p, types.PoolSetting{Size: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = env.c.SetProjectPool(context.Background(), p, types.PoolSetting{Size: 0}) })
	proj, err := env.c.GetProject(c, p)
	require.NoError(t, err)
	waitPooled(t, p, proj.Current)

	conn, err := pgx.Connect(c, env.node.DSN())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var pooled string
	require.NoError(t, conn.QueryRow(c, `SELECT pi.instance_id FROM pool_instances pi JOIN projects pr ON pr.id = pi.project_id
		WHERE pr.name = $1`, p).Scan(&pooled))
	st, err := env.node.Runtime().Status(c, pooled)
	require.NoError(t, err)
	require.NotZero(t, st.Pid)

	// Kill the init; once the runtime shows the task stopped, claim at
	// once: the node settles an exit 100 ms after its event, so the row
	// still says Running. (Claimed before the shim saw the exit, the
	// instance would still run at the check: a race no check can close.)
	require.NoError(t, syscall.Kill(int(st.Pid), syscall.SIGKILL))
	require.Eventually(t, func() bool {
		st, err := env.node.Runtime().Status(c, pooled)
		return err == nil && st.Task != "running"
	}, 5*time.Second, time.Millisecond, "the killed init's task still runs")
	in := up(t, p, 0)
	assert.NotEqual(t, pooled, in.ID, "the dead pooled instance was handed out")
	assert.NotEqual(t, "claimed from the pool", in.Message)
	assert.Equal(t, "hi", mustSh(t, in.ID, "echo hi"))

	require.Eventually(t, func() bool {
		var state string
		err := conn.QueryRow(c, `SELECT state FROM instances WHERE id = $1`, pooled).Scan(&state)
		return err == pgx.ErrNoRows || (err == nil && state != string(types.StateRunning))
	}, 30*time.Second, 50*time.Millisecond, "the dead pooled instance still says Running")
	waitPooled(t, p, proj.Current) // refilled
}
