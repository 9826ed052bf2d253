package versions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Operation states. Succeeded, failed and canceled are terminal.
const (
	OpPending   = types.OpPending
	OpRunning   = types.OpRunning
	OpSucceeded = types.OpSucceeded
	OpFailed    = types.OpFailed
	OpCanceled  = types.OpCanceled
)

// Operation is a long-running job.
type Operation struct {
	ID     string
	Tenant string
	Kind   types.OpKind // save, restore, build, migrate, gc...
	Target string       // what it acts on, e.g. an instance id or project name
	State  types.OpState
	// IdempotencyKey ("" = none) and RequestHash identify a retry: see
	// CreateOperation.
	IdempotencyKey  string
	RequestHash     string
	Request         json.RawMessage // the request as started, to run it again after a crash
	Result          json.RawMessage // nil until succeeded; a failed one may carry a partial result (ops.FailWithResult)
	Error           *OpError        // set when failed or canceled
	CancelRequested bool
	Node            string // the node running it
	CreatedAt       time.Time
	UpdatedAt       time.Time
}

// OpError is an operation's failure: an errdefs code and a message.
type OpError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Event is one entry of an operation's event log; Seq is 1, 2, 3... without gaps.
type Event struct {
	Seq     int
	At      time.Time
	Type    string
	Message string
	Data    json.RawMessage // nil = none
}

// Terminal reports whether an operation state is final.
func Terminal(state types.OpState) bool {
	return state == OpSucceeded || state == OpFailed || state == OpCanceled
}

const operationCols = `o.id, o.tenant_id, o.kind, o.target, o.state, COALESCE(o.idempotency_key, ''), o.request_hash,
	o.request, o.result, o.error, o.cancel_requested, o.node, o.created_at, o.updated_at`

func scanOperation(row pgx.Row) (Operation, error) {
	var op Operation
	var opErr []byte
	err := row.Scan(&op.ID, &op.Tenant, &op.Kind, &op.Target, &op.State, &op.IdempotencyKey, &op.RequestHash,
		&op.Request, &op.Result, &opErr, &op.CancelRequested, &op.Node, &op.CreatedAt, &op.UpdatedAt)
	if err != nil {
		return Operation{}, err
	}
	if len(opErr) > 0 {
		op.Error = new(OpError)
		if err := json.Unmarshal(opErr, op.Error); err != nil {
			return Operation{}, fmt.Errorf("operation %q: error column: %v", op.ID, err)
		}
	}
	return op, nil
}

// CreateOperation records op (State defaults to pending) and returns it with
// created = true. If op.IdempotencyKey is set and the tenant already has an
// operation with that key, nothing is created: with the same RequestHash
// that operation is returned (created = false, a retry); with a different
// one it fails with ErrIdempotencyReuse. Concurrent creations with one key
// create exactly one operation.
func (s Operations) CreateOperation(ctx context.Context, op Operation) (Operation, bool, error) {
	if op.ID == "" {
		return Operation{}, false, fmt.Errorf("empty operation id: %w", errdefs.ErrInvalidArgument)
	}
	if op.State == "" {
		op.State = OpPending
	}
	if err := types.CheckIdempotencyKey(op.IdempotencyKey); err != nil {
		return Operation{}, false, err
	}
	// ON CONFLICT waits for a concurrent insert of the same key to commit,
	// then does nothing; the next statement sees the winner's row.
	got, err := scanOperation(s.db.QueryRow(ctx, `INSERT INTO operations AS o
			(id, tenant_id, kind, target, state, idempotency_key, request_hash, node, request)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (tenant_id, idempotency_key) DO NOTHING
		RETURNING `+operationCols,
		op.ID, op.Tenant, op.Kind, op.Target, op.State, nullString(op.IdempotencyKey), op.RequestHash, op.Node, jsonOrEmpty(op.Request)))
	if err == nil {
		return got, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Operation{}, false, translate(err, fmt.Sprintf("operation %q", op.ID))
	}
	got, err = scanOperation(s.db.QueryRow(ctx, "SELECT "+operationCols+
		" FROM operations o WHERE o.tenant_id = $1 AND o.idempotency_key = $2", op.Tenant, op.IdempotencyKey))
	if errors.Is(err, pgx.ErrNoRows) {
		// The conflicting row went away between the two statements.
		return Operation{}, false, fmt.Errorf("idempotency key %q: concurrent change, retry: %w", op.IdempotencyKey, errdefs.ErrConflict)
	}
	if err != nil {
		return Operation{}, false, translate(err, fmt.Sprintf("idempotency key %q", op.IdempotencyKey))
	}
	if got.RequestHash != op.RequestHash {
		return Operation{}, false, fmt.Errorf("idempotency key %q (operation %s): %w", op.IdempotencyKey, got.ID, errdefs.ErrIdempotencyReuse)
	}
	return got, false, nil
}

// GetOperation returns operation id of tenant; tenant "" matches any.
func (s Operations) GetOperation(ctx context.Context, tenant, id string) (Operation, error) {
	op, err := scanOperation(s.db.QueryRow(ctx, "SELECT "+operationCols+
		" FROM operations o WHERE o.id = $1 AND ($2 = '' OR o.tenant_id = $2)", id, tenant))
	if err != nil {
		return Operation{}, translate(err, fmt.Sprintf("operation %q", id))
	}
	return op, nil
}

// notTerminal explains why an update of operation id matched no row.
func (s Operations) notTerminal(ctx context.Context, id string) error {
	var state string
	if err := s.db.QueryRow(ctx, "SELECT state FROM operations WHERE id = $1", id).Scan(&state); err != nil {
		return translate(err, fmt.Sprintf("operation %q", id))
	}
	return fmt.Errorf("operation %q is already %s: %w", id, state, errdefs.ErrFailedPrecondition)
}

// SetOperationState moves an unfinished operation to pending or running.
// Terminal states are set by FinishOperation. ErrFailedPrecondition if the
// operation is already finished.
func (s Operations) SetOperationState(ctx context.Context, id string, state types.OpState) error {
	if state != OpPending && state != OpRunning {
		return fmt.Errorf("operation state %q (use FinishOperation for terminal states): %w", state, errdefs.ErrInvalidArgument)
	}
	tag, err := s.db.Exec(ctx, `UPDATE operations SET state = $2, updated_at = now()
		WHERE id = $1 AND state IN ('pending', 'running')`, id, state)
	if err != nil {
		return translate(err, fmt.Sprintf("operation %q", id))
	}
	if tag.RowsAffected() == 0 {
		return s.notTerminal(ctx, id)
	}
	return nil
}

// FinishOperation moves an unfinished operation to a terminal state with its
// result (JSON-encoded; nil = none) or error, and appends the final event
// (type = the state, data = {"error": opErr} if any), in one transaction.
// ErrFailedPrecondition if it is already finished.
func (s Operations) FinishOperation(ctx context.Context, id string, state types.OpState, result any, opErr *OpError) error {
	if !Terminal(state) {
		return fmt.Errorf("operation state %q is not terminal: %w", state, errdefs.ErrInvalidArgument)
	}
	res, err := marshalJSON(result)
	if err != nil {
		return err
	}
	var errJSON *string // a nil *OpError is SQL NULL, not JSON null
	if opErr != nil {
		if errJSON, err = marshalJSON(opErr); err != nil {
			return err
		}
	}
	msg := "operation " + string(state)
	var data any
	if opErr != nil {
		msg = opErr.Message
		data = map[string]any{"error": opErr}
	}
	return WithTx(ctx, s.db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE operations SET state = $2, result = $3::jsonb, error = $4::jsonb, updated_at = now()
			WHERE id = $1 AND state IN ('pending', 'running')`, id, state, res, errJSON)
		if err != nil {
			return translate(err, fmt.Sprintf("operation %q", id))
		}
		if tag.RowsAffected() == 0 {
			return s.notTerminal(ctx, id)
		}
		_, err = appendEvent(ctx, tx, id, string(state), msg, data, true)
		return err
	})
}

// RequestCancel records that the tenant asked to cancel operation id; the
// node running it observes CancelRequested and finishes it as canceled. A
// finished operation is returned unchanged.
func (s Operations) RequestCancel(ctx context.Context, tenant, id string) (Operation, error) {
	op, err := scanOperation(s.db.QueryRow(ctx, `UPDATE operations o SET cancel_requested = true, updated_at = now()
		WHERE o.id = $1 AND ($2 = '' OR o.tenant_id = $2) AND o.state IN ('pending', 'running')
		RETURNING `+operationCols, id, tenant))
	if errors.Is(err, pgx.ErrNoRows) {
		return s.GetOperation(ctx, tenant, id)
	}
	if err != nil {
		return Operation{}, translate(err, fmt.Sprintf("operation %q", id))
	}
	return op, nil
}

// UnfinishedOperations returns the pending and running operations of node
// (node "" = every node), oldest first: what a restarting envd resumes or
// settles.
func (s Operations) UnfinishedOperations(ctx context.Context, node string) ([]Operation, error) {
	rows, err := s.db.Query(ctx, "SELECT "+operationCols+` FROM operations o
		WHERE o.state IN ('pending', 'running') AND ($1 = '' OR o.node = $1) ORDER BY o.created_at, o.id`, node)
	if err != nil {
		return nil, translate(err, "unfinished operations")
	}
	ops, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Operation, error) { return scanOperation(r) })
	return ops, translate(err, "unfinished operations")
}

// AppendEvent appends an event (data JSON-encoded; nil = none) to an
// unfinished operation's log and returns it with its seq, the previous seq
// + 1. ErrFailedPrecondition once the operation is finished: the final event
// (FinishOperation's) is the last.
func (s Operations) AppendEvent(ctx context.Context, opID, typ, message string, data any) (Event, error) {
	return appendEvent(ctx, s.db, opID, typ, message, data, false)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func appendEvent(ctx context.Context, q querier, opID, typ, message string, data any, final bool) (Event, error) {
	d, err := marshalJSON(data)
	if err != nil {
		return Event{}, err
	}
	// One statement: the UPDATE locks the operation row and bumps its
	// counter, the INSERT uses it; concurrent appends queue on the row lock
	// and a failed insert rolls the counter back, so seqs have no gaps.
	ev := Event{Type: typ, Message: message}
	if d != nil {
		ev.Data = json.RawMessage(*d)
	}
	err = q.QueryRow(ctx, `WITH o AS (
			UPDATE operations SET last_event_seq = last_event_seq + 1, updated_at = now()
			WHERE id = $1 AND ($5 OR state IN ('pending', 'running'))
			RETURNING last_event_seq)
		INSERT INTO operation_events (operation_id, seq, type, message, data)
		SELECT $1, o.last_event_seq, $2, $3, $4::jsonb FROM o
		RETURNING seq, at`, opID, typ, message, d, final).Scan(&ev.Seq, &ev.At)
	if err == nil {
		return ev, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Event{}, translate(err, fmt.Sprintf("event of operation %q", opID))
	}
	var state string
	if err := q.QueryRow(ctx, "SELECT state FROM operations WHERE id = $1", opID).Scan(&state); err != nil {
		return Event{}, translate(err, fmt.Sprintf("operation %q", opID))
	}
	return Event{}, fmt.Errorf("operation %q is already %s: no more events: %w", opID, state, errdefs.ErrFailedPrecondition)
}

// Events returns up to limit events (limit <= 0: all) of an operation with
// seq > afterSeq, in order: a client resumes its stream from the last seq it
// saw. ErrNotFound if the operation does not exist.
func (s Operations) Events(ctx context.Context, opID string, afterSeq, limit int) ([]Event, error) {
	var lim *int
	if limit > 0 {
		lim = &limit
	}
	rows, err := s.db.Query(ctx, `SELECT seq, at, type, message, data FROM operation_events
		WHERE operation_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, opID, afterSeq, lim)
	if err != nil {
		return nil, translate(err, fmt.Sprintf("events of operation %q", opID))
	}
	evs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Event, error) {
		var ev Event
		err := r.Scan(&ev.Seq, &ev.At, &ev.Type, &ev.Message, &ev.Data)
		return ev, err
	})
	if err != nil {
		return nil, translate(err, fmt.Sprintf("events of operation %q", opID))
	}
	if len(evs) == 0 {
		var one int
		err := s.db.QueryRow(ctx, "SELECT 1 FROM operations WHERE id = $1", opID).Scan(&one)
		if err != nil {
			return nil, translate(err, fmt.Sprintf("operation %q", opID))
		}
	}
	return evs, nil
}

// jsonOrEmpty stores an absent request as an empty object.
func jsonOrEmpty(b json.RawMessage) []byte {
	if len(b) == 0 {
		return []byte("{}")
	}
	return b
}
