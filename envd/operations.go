package envd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/versions"
)

// An operation runs in a goroutine of the process that created it. Its
// state and ordered events live in the store, so a client can follow it
// from any envd and after any restart. If envd stops while an operation
// runs, the row stays unfinished and Resume, at the next start, runs it
// again: every operation kind is written so that running it twice is safe
// (a save commits its version in the last step only).

// opFunc does an operation's work; its result becomes the operation's result.
type opFunc func(ctx context.Context, oc *opCtx) (any, error)

// opCtx is what an operation's work uses to report progress.
type opCtx struct {
	s  *Service
	id string
}

// event appends to the operation's log. A failed append is logged, never
// fatal: progress reporting must not fail the work.
func (o *opCtx) event(ctx context.Context, typ, msg string, data any) {
	if o == nil {
		return // work done outside an operation (hibernation)
	}
	if _, err := o.s.store.AppendEvent(ctx, o.id, typ, msg, data); err != nil {
		o.s.log.Warn("append operation event", "op", o.id, "type", typ, "err", err)
	}
}

// startOp records an operation (or finds the one with the same idempotency
// key) and runs it in the background. asked is the client's request, which
// identifies a retry; job is what the operation will do, kept to run it
// again after a crash.
//
// The idempotency digest covers kind, scope and asked: scope is what the
// request names (the instance of a save, the project of a restore), while
// target may be made anew by each request (a restore's new instance id).
func (s *Service) startOp(ctx context.Context, p types.Principal, kind types.OpKind, target, scope, idemKey string, asked, job any, run opFunc) (types.Operation, error) {
	return s.startOpIn(ctx, p, kind, target, scope, idemKey, asked, job, run, nil)
}

// startOpIn is startOp; with exclusive set, the operation is refused while
// one of those kinds is unfinished on the same target (startExclusiveOp).
// Both paths check the key and take the tenant's admission slot alike.
func (s *Service) startOpIn(ctx context.Context, p types.Principal, kind types.OpKind, target, scope, idemKey string, asked, job any, run opFunc, exclusive []types.OpKind) (types.Operation, error) {
	askedBody, err := json.Marshal(asked)
	if err != nil {
		return types.Operation{}, err
	}
	body, err := json.Marshal(job)
	if err != nil {
		return types.Operation{}, err
	}
	sum := sha256.Sum256(append([]byte(string(kind)+"\x00"+scope+"\x00"), askedBody...))
	if err := versions.CheckIdempotencyKey(idemKey); err != nil {
		return types.Operation{}, err
	}
	release, existing, err := s.admitOp(ctx, p, kind, idemKey, hex.EncodeToString(sum[:]))
	if err != nil {
		return types.Operation{}, err
	}
	if existing != nil {
		return *existing, nil
	}
	rec := versions.Operation{
		ID: newID("op"), Tenant: p.Tenant, Kind: kind, Target: target, State: types.OpPending,
		IdempotencyKey: idemKey, RequestHash: hex.EncodeToString(sum[:]), Request: body, Node: s.cfg.Node,
	}
	var op versions.Operation
	var created bool
	if exclusive != nil {
		op, created, err = s.store.CreateExclusiveOperation(ctx, rec, exclusive)
	} else {
		op, created, err = s.store.CreateOperation(ctx, rec)
	}
	if err != nil || !created {
		release()
	}
	if err != nil {
		return types.Operation{}, err
	}
	if created {
		// The slot is held while the work runs and freed however it ends.
		s.launch(op, func(ctx context.Context, oc *opCtx) (any, error) {
			defer release()
			return run(ctx, oc)
		})
	}
	return toOperation(op), nil
}

func (s *Service) launch(op versions.Operation, run opFunc) {
	ctx, cancel := context.WithCancel(s.ctx)
	s.mu.Lock()
	s.ops[op.ID] = cancel
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.ops, op.ID)
			s.mu.Unlock()
			cancel()
		}()
		oc := &opCtx{s: s, id: op.ID}
		if err := s.store.SetOperationState(ctx, op.ID, types.OpRunning); err != nil {
			s.log.Warn("mark operation running", "op", op.ID, "err", err)
		}
		res, err := run(ctx, oc)
		if err != nil && s.ctx.Err() != nil {
			// envd is shutting down: leave the operation unfinished so the
			// next start resumes it.
			s.log.Info("operation interrupted by shutdown", "op", op.ID)
			return
		}
		fctx, fcancel := detach(ctx, 30*time.Second)
		defer fcancel()
		state, opErr := types.OpSucceeded, (*versions.OpError)(nil)
		if err != nil {
			state = types.OpFailed
			if ctx.Err() != nil && errors.Is(err, context.Canceled) {
				state = types.OpCanceled
			}
			opErr = &versions.OpError{Code: errdefs.Code(err), Message: err.Error()}
			res = nil
		}
		if ferr := s.store.FinishOperation(fctx, op.ID, state, res, opErr); ferr != nil {
			s.log.Error("finish operation", "op", op.ID, "err", ferr)
		}
	}()
}

// resumeOperations runs again the operations that a previous envd process on this
// node left unfinished, or settles them when they cannot run again.
func (s *Service) resumeOperations(ctx context.Context) error {
	ops, err := s.store.UnfinishedOperations(ctx, s.cfg.Node)
	if err != nil {
		return fmt.Errorf("unfinished operations: %w", err)
	}
	for _, op := range ops {
		oc := &opCtx{s: s, id: op.ID}
		switch op.Kind {
		case types.OpKindSave:
			var job saveJob
			if err := json.Unmarshal(op.Request, &job); err != nil {
				s.settle(ctx, op, fmt.Errorf("unreadable request: %v: %w", err, errdefs.ErrFailedPrecondition))
				continue
			}
			oc.event(ctx, "resumed", "envd restarted during the save; running it again", nil)
			s.launch(op, func(ctx context.Context, oc *opCtx) (any, error) { return s.runSave(ctx, oc, job) })
		case types.OpKindRestore:
			s.settleRestore(ctx, op)
		case types.OpKindBuild:
			s.settleBuild(ctx, op)
		case types.OpKindMigrate:
			s.settleMigrate(ctx, op)
		case types.OpKindGC:
			var job gcJob
			if err := json.Unmarshal(op.Request, &job); err != nil {
				s.settle(ctx, op, fmt.Errorf("unreadable request: %v: %w", err, errdefs.ErrFailedPrecondition))
				continue
			}
			oc.event(ctx, "resumed", "envd restarted during the gc; running it again", nil)
			s.launch(op, func(ctx context.Context, oc *opCtx) (any, error) { return s.runGC(ctx, oc, job) })
		default:
			s.settle(ctx, op, fmt.Errorf("operation kind %q cannot be resumed after a restart: %w", op.Kind, errdefs.ErrFailedPrecondition))
		}
	}
	return nil
}

func (s *Service) settle(ctx context.Context, op versions.Operation, err error) {
	if ferr := s.store.FinishOperation(ctx, op.ID, types.OpFailed, nil,
		&versions.OpError{Code: "interrupted", Message: err.Error()}); ferr != nil {
		s.log.Error("settle operation", "op", op.ID, "err", ferr)
	}
}

func toOperation(op versions.Operation) types.Operation {
	out := types.Operation{ID: op.ID, Kind: op.Kind, Target: op.Target, State: op.State,
		Result: op.Result, CreatedAt: op.CreatedAt, UpdatedAt: op.UpdatedAt}
	if op.Error != nil {
		out.Error = &types.OpError{Code: op.Error.Code, Message: op.Error.Message}
	}
	return out
}

func validateOpID(id string) error {
	if !instanceIDRE.MatchString(id) {
		return fmt.Errorf("operation id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	return nil
}

// GetOperation returns an operation of the caller's tenant.
func (s *Service) GetOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error) {
	if err := validateOpID(id); err != nil {
		return types.Operation{}, err
	}
	op, err := s.store.GetOperation(ctx, p.Tenant, id)
	if err != nil {
		return types.Operation{}, err
	}
	return toOperation(op), nil
}

// CancelOperation asks an operation to stop. The operation's state says
// when it actually stopped.
func (s *Service) CancelOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error) {
	if err := validateOpID(id); err != nil {
		return types.Operation{}, err
	}
	op, err := s.store.RequestCancel(ctx, p.Tenant, id)
	if err != nil {
		return types.Operation{}, err
	}
	s.mu.Lock()
	cancel := s.ops[id]
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return toOperation(op), nil
}

// OperationEvents returns the operation's events after seq after.
func (s *Service) OperationEvents(ctx context.Context, p types.Principal, id string, after int) ([]types.Event, error) {
	if _, err := s.GetOperation(ctx, p, id); err != nil {
		return nil, err
	}
	evs, err := s.store.Events(ctx, id, after, 1000)
	if err != nil {
		return nil, err
	}
	out := make([]types.Event, 0, len(evs))
	for _, e := range evs {
		out = append(out, types.Event{Seq: e.Seq, At: e.At, Type: e.Type, Message: e.Message, Data: e.Data})
	}
	return out, nil
}

// thawInterruptedSaves resumes the tasks of Running instances that are
// frozen: only a save freezes a Running instance, so a frozen one was left
// by a process that died during a save's freeze window.
func (s *Service) thawInterruptedSaves(ctx context.Context) error {
	ins, err := s.store.ListNodeInstances(ctx, s.cfg.Node)
	if err != nil {
		return fmt.Errorf("instances of node %q: %w", s.cfg.Node, err)
	}
	for _, in := range ins {
		if in.State != types.StateRunning {
			continue
		}
		st, err := s.rt.Status(ctx, in.ID)
		if err != nil || st.Task != "paused" {
			continue
		}
		if err := s.rt.Resume(ctx, in.ID); err != nil {
			s.log.Warn("thaw instance frozen by an interrupted save", "instance", in.ID, "err", err)
			continue
		}
		s.log.Info("thawed instance frozen by an interrupted save", "instance", in.ID)
	}
	return nil
}
