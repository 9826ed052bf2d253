package versions

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/migrations"
)

// DB is an executor: what both the pool and a transaction offer
// (*pgxpool.Pool and pgx.Tx satisfy it, as River's driver executor does).
// Every aggregate runs its statements on one; Begin on a transaction opens
// a savepoint, so an aggregate's own multi-statement writes nest inside a
// caller's transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Aggregates are the store's parts, one per group of tables that change
// together (doc.go lists them), all on one executor: the pool for a Store,
// one transaction for a Tx.
type Aggregates struct {
	Projects   Projects   // projects and their settings
	Versions   Versions   // versions, the current pointer, checkpoints, builds, squashes
	Instances  Instances  // instances, generations, activity, warm pools, placement
	Operations Operations // operations, events, idempotency keys
	Volumes    Volumes    // volume archives and homes
	Access     Access     // API tokens and SSH keys
	Tenants    Tenants    // quotas, usage, limit maxima, idle maxima
	Nodes      Nodes      // nodes, membership, join tokens, cluster keys, image caches
	Rollouts   Rollouts   // base-image rollouts and their projects
	Webhooks   Webhooks   // tenants' webhooks, events and deliveries
	Content    Content    // imported images, upload leases, sweeps, ownership of registry content
}

func aggregates(db DB, pool *pgxpool.Pool, conns *lockConnPool) Aggregates {
	return Aggregates{
		Projects: Projects{db: db}, Versions: Versions{db: db}, Instances: Instances{db: db},
		Operations: Operations{db: db}, Volumes: Volumes{db: db}, Access: Access{db: db},
		Tenants: Tenants{db: db}, Nodes: Nodes{db: db}, Rollouts: Rollouts{db: db},
		Webhooks: Webhooks{db: db},
		Content:  Content{db: db, pool: pool, conns: conns},
	}
}

// Store is the PostgreSQL metadata store: its aggregates on the pool, and
// InTx to run several aggregates' writes in one transaction. It is safe for
// concurrent use.
type Store struct {
	Aggregates
	db        *pgxpool.Pool
	lockConns *lockConnPool // upload leases' connections (uploads.go)
}

// Tx is the aggregates on one transaction (Store.InTx). It is valid only
// during the function InTx runs.
type Tx struct {
	Aggregates
}

// New returns a store on db. The schema must be current (migrations.Apply).
func New(db *pgxpool.Pool) *Store {
	conns := &lockConnPool{}
	return &Store{Aggregates: aggregates(db, db, conns), db: db, lockConns: conns}
}

// Open connects to dsn (keyword/value or URL form), checks the connection
// and applies pending migrations.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// The parse error may quote the password: do not include it.
		return nil, fmt.Errorf("database connection string: %w", errdefs.ErrInvalidArgument)
	}
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, translate(err, "open database")
	}
	if err := db.Ping(ctx); err != nil {
		db.Close()
		return nil, translate(err, "connect to database")
	}
	if err := migrations.Apply(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	return New(db), nil
}

// Pool returns the underlying pool.
func (s *Store) Pool() *pgxpool.Pool { return s.db }

// Close closes the pool and the connections kept for upload leases.
func (s *Store) Close() {
	s.lockConns.close()
	s.db.Close()
}

// InTx runs fn with the aggregates on one transaction: everything fn
// writes commits together, or nothing does (fn failed or panicked). An
// error of fn's own is returned as it is; driver errors are translated as
// every aggregate's are. Upload leases and sweeps (Content.BeginUpload,
// Content.Sweep) hold connections of their own and are not part of the
// transaction.
func (s *Store) InTx(ctx context.Context, fn func(tx Tx) error) error {
	var own error
	err := WithTx(ctx, s.db, func(tx pgx.Tx) error {
		own = fn(Tx{aggregates(tx, s.db, s.lockConns)})
		return own
	})
	if own != nil && !isDriverError(own) {
		return own
	}
	return err
}

// isDriverError reports whether err comes from pgx or PostgreSQL
// untranslated.
func isDriverError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) || errors.Is(err, pgx.ErrNoRows) || isConnectionError(err)
}

// WithTx runs fn in a transaction on db: begin, fn, commit; rolled back if fn
// fails or panics. On a transaction, db.Begin opens a savepoint. Errors fn
// returns are passed through translate, so a pgx error does not escape.
func WithTx(ctx context.Context, db DB, fn func(tx pgx.Tx) error) error {
	_, err := WithTxV(ctx, db, func(tx pgx.Tx) (struct{}, error) { return struct{}{}, fn(tx) })
	return err
}

// WithTxV is WithTx for a function returning a value (River's dbutil.WithTxV).
func WithTxV[T any](ctx context.Context, db DB, fn func(tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	tx, err := db.Begin(ctx)
	if err != nil {
		return zero, translate(err, "begin transaction")
	}
	// After Commit, Rollback is a no-op. WithoutCancel: a canceled ctx must
	// not skip the rollback (pgx would then close the connection anyway).
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
	v, err := fn(tx)
	if err != nil {
		return zero, translate(err, "transaction")
	}
	if err := tx.Commit(ctx); err != nil {
		return zero, translate(err, "commit")
	}
	return v, nil
}

// translate maps a pgx/PostgreSQL error to an errdefs kind, prefixed with
// what was being done. Errors already carrying a kind (or a context error)
// pass unchanged. The driver error's text is kept, its type is not.
func translate(err error, what string) error {
	if err == nil {
		return nil
	}
	if hasKind(err) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", what, context.Canceled)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", what, context.DeadlineExceeded)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, errdefs.ErrNotFound)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		msg := pgErr.Message
		if pgErr.Detail != "" {
			msg += " (" + pgErr.Detail + ")"
		}
		var kind error
		switch c := pgErr.Code; {
		case c == "23505": // unique_violation
			kind = errdefs.ErrAlreadyExists
		case c == "23503": // foreign_key_violation: a referenced row is missing or still referenced
			kind = errdefs.ErrFailedPrecondition
		case c == "40001", c == "40P01": // serialization_failure, deadlock_detected: retry
			kind = errdefs.ErrConflict
		case c == "57014": // query_canceled (statement_timeout or cancel request)
			kind = errdefs.ErrCanceled
		case c == "42501": // insufficient_privilege: a node's database role (migrations/0028_node_role.sql)
			return fmt.Errorf("%s: %s: this node's database role may not do this; ask a node that uses the admin's database role: %w", what, msg, errdefs.ErrFailedPrecondition)
		case strings.HasPrefix(c, "22"), strings.HasPrefix(c, "23"): // data exception, other integrity violations (check, not null)
			kind = errdefs.ErrInvalidArgument
		case strings.HasPrefix(c, "08"), strings.HasPrefix(c, "57P"), strings.HasPrefix(c, "53"):
			// connection exception, admin/crash shutdown, cannot connect now, too many connections
			kind = errdefs.ErrUnavailable
		default:
			return fmt.Errorf("%s: %s (SQLSTATE %s)", what, msg, pgErr.Code)
		}
		return fmt.Errorf("%s: %s: %w", what, msg, kind)
	}
	if isConnectionError(err) {
		return fmt.Errorf("%s: database: %v: %w", what, err, errdefs.ErrUnavailable)
	}
	return fmt.Errorf("%s: %v", what, err)
}

// isConnectionError reports whether err means the server could not be
// reached or the connection broke: a failed dial (socket missing, refused),
// a closed pool, an I/O error on the wire.
func isConnectionError(err error) bool {
	var connErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connErr), errors.As(err, &netErr):
		return true
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.ENOENT):
		return true
	case pgconn.SafeToRetry(err), pgconn.Timeout(err):
		return true
	}
	// pgxpool reports a closed pool with a plain error.
	return strings.Contains(err.Error(), "closed pool")
}

func hasKind(err error) bool {
	return errdefs.Code(err) != "internal" &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
