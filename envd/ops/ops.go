// Package ops runs operations: long jobs (saves, restores, builds,
// migrations, GCs) that a client starts, follows and may cancel. It owns
// their idempotency (a retry with the same key gets the same operation),
// their admission (a tenant's slots), their event log, and what happens to
// those a previous process left unfinished (run again or settled). It
// needs the store's operations table (Store) and a tenant limiter
// (Admission); what an operation does is the caller's Func.
//
// An operation runs in a goroutine of the process that created it. Its
// state and ordered events live in the store, so a client can follow it
// from any envd and after any restart. If envd stops while an operation
// runs, the row stays unfinished and Resume, at the next start, runs it
// again or settles it: every kind that is run again is written so that
// running it twice is safe (a save commits its version in the last step
// only).
package ops

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Store is what operations need of the store.
type Store interface {
	CreateOperation(ctx context.Context, op versions.Operation) (versions.Operation, bool, error)
	CreateExclusiveOperation(ctx context.Context, op versions.Operation, kinds []types.OpKind) (versions.Operation, bool, error)
	SetOperationState(ctx context.Context, id string, state types.OpState) error
	FinishOperation(ctx context.Context, id string, state types.OpState, result any, opErr *versions.OpError) error
	AppendEvent(ctx context.Context, opID, typ, message string, data any) (versions.Event, error)
	UnfinishedOperations(ctx context.Context, node string) ([]versions.Operation, error)
	GetOperation(ctx context.Context, tenant, id string) (versions.Operation, error)
	OperationByIdempotencyKey(ctx context.Context, tenant, key string) (versions.Operation, error)
	RequestCancel(ctx context.Context, tenant, id string) (versions.Operation, error)
	Events(ctx context.Context, opID string, afterSeq, limit int) ([]versions.Event, error)
	ClaimIdempotencyKey(ctx context.Context, tenant, key, kind, requestHash, objectID string) (versions.Claim, error)
	ReleaseIdempotencyKey(ctx context.Context, tenant, key string) error
	RepointIdempotencyKey(ctx context.Context, tenant, key, objectID string) error
}

// Admission takes one of tenant's slots for a new operation of kind; the
// release frees it. A kind no limit applies to gets a no-op release.
type Admission interface {
	AdmitOp(tenant string, kind types.OpKind) (release func(), err error)
}

// Func does an operation's work; its result becomes the operation's result.
type Func func(ctx context.Context, op *Op) (any, error)

// Op is a running operation as its work sees it.
type Op struct {
	ID string
	r  *Runner
}

// Event appends to the operation's log. A failed append is logged, never
// fatal: progress reporting must not fail the work.
func (o *Op) Event(ctx context.Context, typ, msg string, data any) {
	if _, err := o.r.store.AppendEvent(ctx, o.ID, typ, msg, data); err != nil {
		o.r.log.Warn("append operation event", "op", o.ID, "type", typ, "err", err)
	}
}

// Runner starts, runs and settles this node's operations.
type Runner struct {
	store Store
	admit Admission
	obs   Observer
	node  string
	log   *slog.Logger
	ctx   context.Context // parents every operation; done when the service stops

	mu      sync.Mutex
	running map[string]context.CancelFunc
	wg      sync.WaitGroup
}

// Observer is told how each operation this runner launched ended, for the
// node's metrics.
type Observer interface {
	OperationFinished(kind types.OpKind, state types.OpState, d time.Duration)
}

// NewRunner makes the runner of node's operations; they run under ctx,
// whose end leaves them unfinished for the next start to resume. obs is
// told of every operation that finishes.
func NewRunner(ctx context.Context, store Store, admit Admission, obs Observer, node string, log *slog.Logger) *Runner {
	return &Runner{store: store, admit: admit, obs: obs, node: node, log: log, ctx: ctx, running: map[string]context.CancelFunc{}}
}

// Wait returns when every operation launched by this runner has returned.
func (r *Runner) Wait() { r.wg.Wait() }

// Running reports whether operation id runs in this process.
func (r *Runner) Running(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.running[id] != nil
}

// Spec is an operation to start.
type Spec struct {
	Kind types.OpKind
	// Target is what the operation acts on (an instance id, a project); it
	// may be made anew by each request (a restore's new instance id).
	Target string
	// Scope is what the request names (the instance of a save, the project
	// of a restore): with Kind and Asked it identifies a retry.
	Scope string
	// IdempotencyKey is the client's key; "" = none.
	IdempotencyKey string
	// Asked is the client's request, which identifies a retry; Job is what
	// the operation will do, kept to run it again after a crash.
	Asked, Job any
	// Exclusive, when set, refuses the operation while one of those kinds
	// is unfinished on the same Target, on any node (ErrFailedPrecondition
	// naming it); a retry with the same key still gets its operation.
	Exclusive []types.OpKind
	Run       Func
}

// Start records an operation (or finds the one with the same idempotency
// key) and runs it in the background. Both the exclusive and the plain
// path check the key and take the tenant's admission slot alike.
func (r *Runner) Start(ctx context.Context, p types.Principal, spec Spec) (types.Operation, error) {
	rec, err := r.Record(p, spec)
	if err != nil {
		return types.Operation{}, err
	}
	if err := types.CheckIdempotencyKey(spec.IdempotencyKey); err != nil {
		return types.Operation{}, err
	}
	release, existing, err := r.admitOp(ctx, p, spec.Kind, spec.IdempotencyKey, rec.RequestHash)
	if err != nil {
		return types.Operation{}, err
	}
	if existing != nil {
		return *existing, nil
	}
	var op versions.Operation
	var created bool
	if spec.Exclusive != nil {
		op, created, err = r.store.CreateExclusiveOperation(ctx, rec, spec.Exclusive)
	} else {
		op, created, err = r.store.CreateOperation(ctx, rec)
	}
	if err != nil || !created {
		release()
	}
	if err != nil {
		return types.Operation{}, err
	}
	if created {
		// The slot is held while the work runs and freed however it ends.
		r.Launch(op, func(ctx context.Context, o *Op) (any, error) {
			defer release()
			return spec.Run(ctx, o)
		})
	}
	return View(op), nil
}

// Record is the row Start records for spec (a new id, this node, the job
// kept to run it again after a crash), for a caller that inserts it in a
// transaction of its own and then launches it (Launch). Spec's Exclusive
// and Run are not used, nor is a tenant's slot taken.
func (r *Runner) Record(p types.Principal, spec Spec) (versions.Operation, error) {
	askedBody, err := json.Marshal(spec.Asked)
	if err != nil {
		return versions.Operation{}, err
	}
	body, err := json.Marshal(spec.Job)
	if err != nil {
		return versions.Operation{}, err
	}
	sum := sha256.Sum256(append([]byte(string(spec.Kind)+"\x00"+spec.Scope+"\x00"), askedBody...))
	return versions.Operation{
		ID: names.NewID("op"), Tenant: p.Tenant, Kind: spec.Kind, Target: spec.Target, State: types.OpPending,
		IdempotencyKey: spec.IdempotencyKey, RequestHash: hex.EncodeToString(sum[:]), Request: body, Node: r.node,
	}, nil
}

// admitOp takes a slot for a new operation of kind. A retry of an accepted
// request (same idempotency key and request hash) is never refused: it gets
// the operation it started (existing), whatever the tenant holds now.
func (r *Runner) admitOp(ctx context.Context, p types.Principal, kind types.OpKind, idemKey, requestHash string) (release func(), existing *types.Operation, err error) {
	release, err = r.admit.AdmitOp(p.Tenant, kind)
	if err == nil || idemKey == "" || !errors.Is(err, errdefs.ErrResourceExhausted) {
		return release, nil, err
	}
	op, lerr := r.store.OperationByIdempotencyKey(ctx, p.Tenant, idemKey)
	if lerr != nil || op.Kind != kind || op.RequestHash != requestHash {
		return nil, nil, err
	}
	out := View(op)
	return nil, &out, nil
}

// Launch runs a recorded operation in the background and records how it
// ended. When the service stops meanwhile, the operation is left
// unfinished for the next start.
func (r *Runner) Launch(op versions.Operation, run Func) {
	ctx, cancel := context.WithCancel(r.ctx)
	r.mu.Lock()
	r.running[op.ID] = cancel
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			delete(r.running, op.ID)
			r.mu.Unlock()
			cancel()
		}()
		if err := r.store.SetOperationState(ctx, op.ID, types.OpRunning); err != nil {
			r.log.Warn("mark operation running", "op", op.ID, "err", err)
		}
		start := time.Now()
		res, err := run(ctx, &Op{ID: op.ID, r: r})
		if err != nil && r.ctx.Err() != nil {
			r.log.Info("operation interrupted by shutdown", "op", op.ID)
			return
		}
		fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer fcancel()
		state, opErr := types.OpSucceeded, (*versions.OpError)(nil)
		if err != nil {
			state = types.OpFailed
			if ctx.Err() != nil && errors.Is(err, context.Canceled) {
				state = types.OpCanceled
			}
			opErr = &versions.OpError{Code: errdefs.Code(err), Message: err.Error()}
			res = partialResult(err)
		}
		if ferr := r.store.FinishOperation(fctx, op.ID, state, res, opErr); ferr != nil {
			r.log.Error("finish operation", "op", op.ID, "err", ferr)
		}
		r.obs.OperationFinished(op.Kind, state, time.Since(start))
	}()
}

// Resumer handles an operation of its kind that a previous process on this
// node left unfinished: it launches it again (Rerun) or settles it.
type Resumer func(ctx context.Context, op versions.Operation)

// Resume hands each operation a previous process on this node left
// unfinished to the Resumer of its kind; one of no known kind is settled.
func (r *Runner) Resume(ctx context.Context, kinds map[types.OpKind]Resumer) error {
	unfinished, err := r.store.UnfinishedOperations(ctx, r.node)
	if err != nil {
		return fmt.Errorf("unfinished operations: %w", err)
	}
	for _, op := range unfinished {
		if resume, ok := kinds[op.Kind]; ok {
			resume(ctx, op)
			continue
		}
		r.Settle(ctx, op, fmt.Errorf("operation kind %q cannot be resumed after a restart: %w", op.Kind, errdefs.ErrFailedPrecondition))
	}
	return nil
}

// Rerun is the Resumer of a kind whose work is safe to run twice: it
// decodes the job the operation recorded and runs it again.
func Rerun[J any](r *Runner, run func(ctx context.Context, op *Op, job J) (any, error)) Resumer {
	return func(ctx context.Context, op versions.Operation) {
		var job J
		if err := json.Unmarshal(op.Request, &job); err != nil {
			r.Settle(ctx, op, fmt.Errorf("unreadable request: %v: %w", err, errdefs.ErrFailedPrecondition))
			return
		}
		(&Op{ID: op.ID, r: r}).Event(ctx, "resumed", fmt.Sprintf("envd restarted during the %s; running it again", op.Kind), nil)
		r.Launch(op, func(ctx context.Context, o *Op) (any, error) { return run(ctx, o, job) })
	}
}

// Settle fails an unfinished operation that will not run again, with code
// "interrupted" and err's message.
func (r *Runner) Settle(ctx context.Context, op versions.Operation, err error) {
	if ferr := r.store.FinishOperation(ctx, op.ID, types.OpFailed, nil,
		&versions.OpError{Code: "interrupted", Message: err.Error()}); ferr != nil {
		r.log.Error("settle operation", "op", op.ID, "err", ferr)
	}
}

// Succeed finishes an unfinished operation as succeeded with result: its
// work was done, only the record of its end was lost.
func (r *Runner) Succeed(ctx context.Context, op versions.Operation, result any) {
	if ferr := r.store.FinishOperation(ctx, op.ID, types.OpSucceeded, result, nil); ferr != nil {
		r.log.Error("settle operation", "op", op.ID, "err", ferr)
	}
}

// View is an operation as the API answers it.
func View(op versions.Operation) types.Operation {
	out := types.Operation{ID: op.ID, Kind: op.Kind, Target: op.Target, State: op.State,
		Result: op.Result, CreatedAt: op.CreatedAt, UpdatedAt: op.UpdatedAt}
	if op.Error != nil {
		out.Error = &types.OpError{Code: op.Error.Code, Message: op.Error.Message}
	}
	return out
}

// GetOperation returns an operation of the caller's tenant.
func (r *Runner) GetOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error) {
	if err := names.ValidateOpID(id); err != nil {
		return types.Operation{}, err
	}
	op, err := r.store.GetOperation(ctx, p.Tenant, id)
	if err != nil {
		return types.Operation{}, err
	}
	return View(op), nil
}

// CancelOperation asks an operation to stop. The operation's state says when it
// actually stopped.
func (r *Runner) CancelOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error) {
	if err := names.ValidateOpID(id); err != nil {
		return types.Operation{}, err
	}
	op, err := r.store.RequestCancel(ctx, p.Tenant, id)
	if err != nil {
		return types.Operation{}, err
	}
	r.mu.Lock()
	cancel := r.running[id]
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return View(op), nil
}

// OperationEvents returns the operation's events after seq after.
func (r *Runner) OperationEvents(ctx context.Context, p types.Principal, id string, after int) ([]types.Event, error) {
	if _, err := r.GetOperation(ctx, p, id); err != nil {
		return nil, err
	}
	evs, err := r.store.Events(ctx, id, after, 1000)
	if err != nil {
		return nil, err
	}
	out := make([]types.Event, 0, len(evs))
	for _, e := range evs {
		out = append(out, types.Event{Seq: e.Seq, At: e.At, Type: e.Type, Message: e.Message, Data: e.Data})
	}
	return out, nil
}
