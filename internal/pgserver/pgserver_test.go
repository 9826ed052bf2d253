package pgserver_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/internal/pgserver"
)

// tempDir returns a t.TempDir() the postgres user can traverse (Go creates
// them 0700, under a 0700 parent).
func tempDir(t *testing.T) string {
	d := t.TempDir()
	for p := d; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755))
	}
	return d
}

func ping(ctx context.Context, t *testing.T, dsn string) {
	t.Helper()
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer c.Close(ctx)
	var db string
	require.NoError(t, c.QueryRow(ctx, "SELECT current_database()").Scan(&db))
	assert.Equal(t, pgserver.DatabaseName, db)
}

// TestStartReuseStop covers first start (initdb), adoption of the running
// server by a second Start (same postmaster pid, data kept), and Stop.
func TestStartReuseStop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := tempDir(t)

	s, err := pgserver.Start(ctx, dir, pgserver.WithNoSync())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	assert.False(t, s.Reused())
	pid := s.PID()
	require.NotZero(t, pid)
	ping(ctx, t, s.DSN())

	c, err := pgx.Connect(ctx, s.DSN())
	require.NoError(t, err)
	_, err = c.Exec(ctx, "CREATE TABLE kept (x int); INSERT INTO kept VALUES (42)")
	require.NoError(t, err)
	require.NoError(t, c.Close(ctx))

	// A restarted envd calls Start again: the same postmaster is adopted.
	s2, err := pgserver.Start(ctx, dir, pgserver.WithNoSync())
	require.NoError(t, err)
	assert.True(t, s2.Reused())
	assert.Equal(t, pid, s2.PID())
	assert.Equal(t, s.DSN(), s2.DSN())

	require.NoError(t, s2.Stop(ctx))
	assert.Zero(t, s.PID())
	_, err = pgx.Connect(ctx, s.DSN())
	assert.Error(t, err, "connect after stop")
	require.NoError(t, s2.Stop(ctx), "stopping a stopped server")

	// Start on the initialised dir starts it again with the data kept.
	s3, err := pgserver.Start(ctx, dir, pgserver.WithNoSync())
	require.NoError(t, err)
	assert.False(t, s3.Reused())
	c, err = pgx.Connect(ctx, s3.DSN())
	require.NoError(t, err)
	var x int
	require.NoError(t, c.QueryRow(ctx, "SELECT x FROM kept").Scan(&x))
	assert.Equal(t, 42, x)
	require.NoError(t, c.Close(ctx))
	require.NoError(t, s3.Stop(ctx))
}

func TestStartRefusesLongSocketPath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a-very-long-directory-name-that-pushes-the-socket-path-beyond-the-limit-of-sun-path")
	_, err := pgserver.Start(context.Background(), dir)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "longer than 107")
}

// The postmaster must survive the process that started it, even when that
// process's whole process group is killed (Ctrl-C, a supervisor's kill):
// a restarted envd adopts it. The starter is this test binary re-executed.
func TestServerOutlivesStarter(t *testing.T) {
	t.Parallel()
	if dir := os.Getenv("PGSERVER_TEST_STARTER_DIR"); dir != "" {
		t.Skip("starter mode")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := tempDir(t)

	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestStarterProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PGSERVER_TEST_STARTER_DIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the starter kills its own process group: %s", out)

	s, err := pgserver.Start(ctx, dir, pgserver.WithNoSync())
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	assert.True(t, s.Reused(), "the server started by the killed process is still running")
	ping(ctx, t, s.DSN())
	require.NoError(t, s.Stop(ctx))
}

// TestStarterProcess is the starter of TestServerOutlivesStarter; it does
// nothing in a normal run.
func TestStarterProcess(t *testing.T) {
	dir := os.Getenv("PGSERVER_TEST_STARTER_DIR")
	if dir == "" {
		return
	}
	if _, err := pgserver.Start(context.Background(), dir, pgserver.WithNoSync()); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(-os.Getpid(), syscall.SIGKILL) // our own process group
	select {}
}

// Two envd starting at once on a fresh dir: one initialises and starts the
// cluster, the other waits for it and adopts it.
func TestStartConcurrent(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := tempDir(t)
	servers := make([]*pgserver.Server, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() { servers[i], errs[i] = pgserver.Start(ctx, dir, pgserver.WithNoSync()) })
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	t.Cleanup(func() { _ = servers[0].Stop(context.Background()) })
	assert.NotEqual(t, servers[0].Reused(), servers[1].Reused(), "exactly one started it")
	ping(ctx, t, servers[1].DSN())
	require.NoError(t, servers[0].Stop(ctx))
}
