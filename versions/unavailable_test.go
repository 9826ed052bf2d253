package versions_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/pgserver"
	"github.com/envd-dev/envd/versions"
)

// A database that goes away is ErrUnavailable, both for a pool holding
// connections that the server closed and for a fresh connection attempt.
func TestStoppedDatabaseIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	for p := dir; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755)) // the postgres user must traverse it
	}
	srv, err := pgserver.Start(ctx, dir, pgserver.WithNoSync())
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })

	s, err := versions.Open(ctx, srv.DSN())
	require.NoError(t, err)
	defer s.Close()
	newProject(t, s)

	require.NoError(t, srv.Stop(ctx))

	_, err = s.Projects.GetProject(ctx, tenant, "p")
	assert.ErrorIs(t, err, errdefs.ErrUnavailable, "pooled connection: %v", err)
	t.Logf("pooled connection to a stopped database: %v", err)
	_, _, err = s.Versions.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Expected: 1, Image: "x"})
	assert.ErrorIs(t, err, errdefs.ErrUnavailable, "transaction: %v", err)
	_, err = s.Access.Authenticate(ctx, "tok")
	assert.ErrorIs(t, err, errdefs.ErrUnavailable, "fresh connection: %v", err)

	_, err = versions.Open(ctx, srv.DSN())
	assert.ErrorIs(t, err, errdefs.ErrUnavailable, "open: %v", err)
	t.Logf("open a stopped database: %v", err)
}

// Opening a store twice re-runs migrations: a no-op that keeps the data.
func TestOpenTwice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtestDSN(t)
	s1, err := versions.Open(ctx, dsn)
	require.NoError(t, err)
	defer s1.Close()
	newProject(t, s1)
	s2, err := versions.Open(ctx, dsn)
	require.NoError(t, err)
	defer s2.Close()
	p, err := s2.Projects.GetProject(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, 1, p.Current)

	_, err = versions.Open(ctx, "host=/nonexistent port=notanumber")
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}
