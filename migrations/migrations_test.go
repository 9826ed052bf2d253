package migrations_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/internal/pgserver/pgtest"
	"github.com/envd-dev/envd/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func pool(t *testing.T) *pgxpool.Pool {
	db, err := pgxpool.New(context.Background(), pgtest.DSN(t))
	require.NoError(t, err)
	t.Cleanup(db.Close)
	return db
}

func applied(t *testing.T, db *pgxpool.Pool) []int {
	rows, err := db.Query(context.Background(), "SELECT version FROM schema_migrations ORDER BY version")
	require.NoError(t, err)
	var vs []int
	for rows.Next() {
		var v int
		require.NoError(t, rows.Scan(&v))
		vs = append(vs, v)
	}
	require.NoError(t, rows.Err())
	return vs
}

func TestApplyTwiceIsNoop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pool(t)
	all, err := migrations.All()
	require.NoError(t, err)
	require.NotEmpty(t, all)

	require.NoError(t, migrations.Apply(ctx, db))
	first := applied(t, db)
	assert.Len(t, first, len(all))

	require.NoError(t, migrations.Apply(ctx, db))
	assert.Equal(t, first, applied(t, db))
}

// Several envd starting at once against one database: the advisory lock
// serialises them and each migration is applied once.
func TestApplyConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pool(t)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = migrations.Apply(ctx, db) })
	}
	wg.Wait()
	for _, err := range errs {
		assert.NoError(t, err)
	}
	all, err := migrations.All()
	require.NoError(t, err)
	assert.Len(t, applied(t, db), len(all))
}
