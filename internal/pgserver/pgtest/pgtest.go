// Package pgtest gives each test a fresh, empty PostgreSQL database.
//
// With TEST_DATABASE_URL set, databases are created on that server (its user
// needs CREATEDB). Otherwise one private cluster (internal/pgserver, no fsync)
// is started per test binary, in a fresh directory under os.TempDir(); call
// Main from TestMain to stop it when the tests end:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/internal/pgserver"
)

var (
	once     sync.Once
	server   *pgserver.Server
	adminDSN string
	startErr error
)

// setup finds or starts the server once per test binary.
func setup() {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		adminDSN = u
		return
	}
	dir, err := os.MkdirTemp("", "envdpg")
	if err != nil {
		startErr = err
		return
	}
	// MkdirTemp makes 0700 dirs; the postgres user must traverse it.
	if err := os.Chmod(dir, 0o755); err != nil {
		startErr = err
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server, startErr = pgserver.Start(ctx, dir, pgserver.WithNoSync())
	if startErr == nil {
		adminDSN = server.DSNFor("postgres")
	}
}

// Main runs the tests and stops the private cluster, if one was started.
func Main(m *testing.M) {
	code := m.Run()
	if server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := server.Stop(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest:", err)
		}
		cancel()
		_ = os.RemoveAll(server.Dir())
	}
	os.Exit(code)
}

// DSN creates an empty database test_<random> and returns a connection string
// for it. The database is dropped (with FORCE, closing leftover connections)
// when the test ends.
func DSN(t testing.TB) string {
	t.Helper()
	once.Do(setup)
	if startErr != nil {
		t.Fatalf("pgtest: no database server: %v", startErr)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "test_" + hex.EncodeToString(b[:])

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := admin(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := admin(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	dsn, err := withDatabase(adminDSN, name)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return dsn
}

func admin(ctx context.Context, sql string) error {
	c, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = c.Exec(ctx, sql)
	return err
}

// withDatabase returns dsn pointing at database db. URL and keyword/value
// forms are both accepted; in the latter a later keyword overrides an earlier.
func withDatabase(dsn, db string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		u.Path = "/" + db
		return u.String(), nil
	}
	return dsn + " dbname=" + db, nil
}
