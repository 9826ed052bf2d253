package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m) }

func TestWithDatabase(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"url", "postgres://u:p@h:5432/postgres?sslmode=disable", "postgres://u:p@h:5432/test_x?sslmode=disable"},
		{"url without path", "postgresql://h", "postgresql://h/test_x"},
		{"keywords", "host=/run dbname=postgres", "host=/run dbname=postgres dbname=test_x"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := withDatabase(c.in, "test_x")
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
			cfg, err := pgx.ParseConfig(got)
			require.NoError(t, err)
			assert.Equal(t, "test_x", cfg.Database)
		})
	}
}

// Each DSN is its own empty database.
func TestDSNIsolated(t *testing.T) {
	ctx := context.Background()
	a, b := DSN(t), DSN(t)
	assert.NotEqual(t, a, b)
	ca, err := pgx.Connect(ctx, a)
	require.NoError(t, err)
	defer ca.Close(ctx)
	_, err = ca.Exec(ctx, "CREATE TABLE t (x int)")
	require.NoError(t, err)
	cb, err := pgx.Connect(ctx, b)
	require.NoError(t, err)
	defer cb.Close(ctx)
	var n int
	require.NoError(t, cb.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE tablename = 't'").Scan(&n))
	assert.Zero(t, n)
}
