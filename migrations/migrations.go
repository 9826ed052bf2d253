// Package migrations holds envd's database schema as numbered SQL files
// (NNNN_name.sql, embedded) and applies them.
//
// Rules for migration files: a file, once released, never changes; a change
// is a new file with the next number. Each file runs in one transaction, so it
// must not contain statements that refuse to run in one (CREATE INDEX
// CONCURRENTLY, VACUUM).
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/envd-dev/envd/errdefs"
)

//go:embed *.sql
var files embed.FS

// lockKey is the pg_advisory_xact_lock key that serialises concurrent
// starters (several envd sharing one database). Arbitrary, fixed: "envd" in ASCII.
const lockKey int64 = 0x656e7664

// Migration is one numbered SQL file.
type Migration struct {
	Version int
	Name    string // file name, e.g. 0001_init.sql
	SQL     string
}

// All returns the embedded migrations in version order.
func All() ([]Migration, error) {
	entries, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	seen := map[int]string{}
	for _, name := range entries {
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration file %q: want NNNN_name.sql: %w", name, errdefs.ErrInvalidArgument)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %q and %q share version %d: %w", prev, name, v, errdefs.ErrInvalidArgument)
		}
		seen[v] = name
		b, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// Apply applies every migration not yet applied, each in its own transaction,
// recording it in schema_migrations. Concurrent starters are serialised with
// pg_advisory_xact_lock, so each migration runs exactly once; re-running
// Apply is a no-op.
func Apply(ctx context.Context, db *pgxpool.Pool) error {
	ms, err := All()
	if err != nil {
		return err
	}
	// A node's database role (envd_node, 0028) may not change the schema:
	// when every migration is applied, nothing is written.
	if done, err := applied(ctx, db, ms); err != nil {
		return translate(err, "read schema_migrations")
	} else if done {
		return nil
	}
	// The bookkeeping table, under the same lock: concurrent CREATE TABLE IF
	// NOT EXISTS can otherwise fail on pg_type's unique index.
	err = inTx(ctx, db, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    int PRIMARY KEY,
			name       text NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`)
		return err
	})
	if err != nil {
		return translate(err, "create schema_migrations")
	}
	for _, m := range ms {
		err := inTx(ctx, db, func(tx pgx.Tx) error {
			var done bool
			if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", m.Version).Scan(&done); err != nil {
				return err
			}
			if done {
				return nil
			}
			// No arguments: pgx sends the file with the simple protocol,
			// which accepts several statements.
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name)
			return err
		})
		if err != nil {
			return translate(err, "migration "+m.Name)
		}
	}
	return nil
}

// applied reports whether every migration of ms is recorded as applied.
func applied(ctx context.Context, db *pgxpool.Pool, ms []Migration) (bool, error) {
	var exists bool
	if err := db.QueryRow(ctx, "SELECT to_regclass('schema_migrations') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return false, err
	}
	versions := make([]int32, len(ms))
	for i, m := range ms {
		versions[i] = int32(m.Version)
	}
	var n int
	err := db.QueryRow(ctx, "SELECT count(*) FROM schema_migrations WHERE version = ANY($1)", versions).Scan(&n)
	return n == len(ms), err
}

// inTx runs fn in a transaction holding the migrations advisory lock.
func inTx(ctx context.Context, db *pgxpool.Pool, fn func(pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey); err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// translate keeps pgx types from leaking: a server-side error is a bug in the
// migration (internal), anything else means the database is unreachable.
func translate(err error, what string) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, err)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "57P"), strings.HasPrefix(pgErr.Code, "53"):
			// connection exception, shutdown, insufficient resources
			return fmt.Errorf("%s: %s (SQLSTATE %s): %w", what, pgErr.Message, pgErr.Code, errdefs.ErrUnavailable)
		case pgErr.Code == "42501": // insufficient_privilege: a node's role (0028)
			return fmt.Errorf("%s: %s: this database role may not change the schema; start a node that uses the admin's database role with this version first: %w",
				what, pgErr.Message, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("%s: %s (SQLSTATE %s)", what, pgErr.Message, pgErr.Code)
	}
	return fmt.Errorf("%s: %v: %w", what, err, errdefs.ErrUnavailable)
}
