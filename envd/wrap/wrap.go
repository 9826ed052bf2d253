// Package wrap holds the behaviour that cuts across envd's features as
// decorators of the small interfaces the features implement, each applied
// once where the parts are composed instead of repeated in every method:
//
//   - wake on access: an exec that asks for it (ExecRequest.Wake) wakes
//     its instance first (WakeOnExec);
//   - touch on use: a renew or a save is activity, which resets the
//     instance's idle clock (TouchOnRenew, TouchOnSave);
//   - the newer-current check: an instance read says which migration is
//     current when the instance neither runs nor saved it
//     (WithNewerCurrent).
//
// A decorator passes errors through unchanged and adds its behaviour only
// where the call it wraps succeeded (touch) or before the call (wake).
package wrap

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// Waker starts a stopped or hibernated instance and returns it once it
// runs (envd's WakeInstance: errdefs.ErrWaking past the wake wait).
type Waker interface {
	WakeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
}

// Toucher records activity on an instance now; it never blocks.
type Toucher interface {
	TouchInstance(id string)
}

// Execer runs commands in instances (command.Runner).
type Execer interface {
	Exec(ctx context.Context, p types.Principal, id string, req types.ExecRequest) (types.ExecResult, error)
	Stream(ctx context.Context, p types.Principal, id string, req types.ExecRequest, stdio types.Stdio) (int, error)
}

// WakeOnExec is e where a request with Wake set wakes its instance first:
// a request types.CheckExecRequest refuses is refused before anything
// starts, and a wake that fails is the exec's error.
func WakeOnExec(e Execer, w Waker) Execer { return wakingExec{e, w} }

type wakingExec struct {
	Execer
	w Waker
}

func (x wakingExec) wake(ctx context.Context, p types.Principal, id string, req types.ExecRequest) error {
	if !req.Wake {
		return nil
	}
	if err := types.CheckExecRequest(req); err != nil {
		return err
	}
	_, err := x.w.WakeInstance(ctx, p, id)
	return err
}

func (x wakingExec) Exec(ctx context.Context, p types.Principal, id string, req types.ExecRequest) (types.ExecResult, error) {
	if err := x.wake(ctx, p, id, req); err != nil {
		return types.ExecResult{}, err
	}
	return x.Execer.Exec(ctx, p, id, req)
}

func (x wakingExec) Stream(ctx context.Context, p types.Principal, id string, req types.ExecRequest, stdio types.Stdio) (int, error) {
	if err := x.wake(ctx, p, id, req); err != nil {
		return -1, err
	}
	return x.Execer.Stream(ctx, p, id, req, stdio)
}

// Renewer sets an instance's expiry (lifecycle.Manager).
type Renewer interface {
	RenewInstance(ctx context.Context, p types.Principal, id, ttl string) (types.Instance, error)
}

// TouchOnRenew is r where a renew that succeeded touches the instance:
// asking for more time is use.
func TouchOnRenew(r Renewer, t Toucher) Renewer { return touchingRenew{r, t} }

type touchingRenew struct {
	Renewer
	t Toucher
}

func (x touchingRenew) RenewInstance(ctx context.Context, p types.Principal, id, ttl string) (types.Instance, error) {
	in, err := x.Renewer.RenewInstance(ctx, p, id, ttl)
	if err == nil {
		x.t.TouchInstance(id)
	}
	return in, err
}

// Saver starts saves of instances (save.Saver).
type Saver interface {
	Save(ctx context.Context, p types.Principal, id string, req types.SaveRequest, idempotencyKey string) (types.Operation, error)
}

// TouchOnSave is s where a save that started touches the instance: a
// user's save is use.
func TouchOnSave(s Saver, t Toucher) Saver { return touchingSave{s, t} }

type touchingSave struct {
	Saver
	t Toucher
}

func (x touchingSave) Save(ctx context.Context, p types.Principal, id string, req types.SaveRequest, idempotencyKey string) (types.Operation, error) {
	op, err := x.Saver.Save(ctx, p, id, req, idempotencyKey)
	if err == nil {
		x.t.TouchInstance(id)
	}
	return op, err
}

// InstanceGetter reads one instance (lifecycle.Manager).
type InstanceGetter interface {
	GetInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
}

// NewerCurrentFunc returns the version of in's project that is current
// when it is a migration in neither runs nor saved, else 0.
type NewerCurrentFunc func(ctx context.Context, tenant string, in types.Instance) int

// WithNewerCurrent is g whose instances carry NewerCurrent (newer's
// answer for them).
func WithNewerCurrent(g InstanceGetter, newer NewerCurrentFunc) InstanceGetter {
	return newerCurrent{g, newer}
}

type newerCurrent struct {
	InstanceGetter
	newer NewerCurrentFunc
}

func (x newerCurrent) GetInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	in, err := x.InstanceGetter.GetInstance(ctx, p, id)
	if err == nil {
		in.NewerCurrent = x.newer(ctx, p.Tenant, in)
	}
	return in, err
}
