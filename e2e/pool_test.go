package e2e

import (
	"context"
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
