package types

import (
	"context"
	"time"
)

// Idle actions of IdleSetting.
const (
	IdleActionStop      = "stop"
	IdleActionHibernate = "hibernate"
	// IdleActionHibernateMemory hibernates with the instance's processes:
	// their memory image is kept with the version, and any access resumes
	// them. Where memory cannot be kept (runtime class runc, an external
	// TCP connection, the engine refuses) it hibernates as
	// IdleActionHibernate and says why (Instance.MemoryNotKept).
	IdleActionHibernateMemory = "hibernate-memory"
)

// IdleSetting is a project's idle stop: an instance Running After (a Go
// duration; "0" = never) without activity is stopped (Action stop: a
// retained one keeps its layer on the node) or saved as a non-current
// version and stopped, its layer freed (hibernate; always so for an
// instance that is not retained, so that idle stop never loses work), or
// hibernated with its processes (hibernate-memory). Any access wakes it. After "" and Action "" take the node's defaults. The
// body of PUT /v1/projects/{p}/idle.
type IdleSetting struct {
	After  string `json:"after,omitempty"`
	Action string `json:"action,omitempty"`
}

type wakeWaitKey struct{}

// WithWakeWait is ctx for a WakeInstance that waits at most d for the
// instance to run (0: not at all, only start it) when d is shorter than
// the node's wake wait (the API sets it from a request's ?wait=).
func WithWakeWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, wakeWaitKey{}, max(d, 0))
}

// WakeWait returns the wait WithWakeWait put in ctx, if any.
func WakeWait(ctx context.Context) (time.Duration, bool) {
	d, ok := ctx.Value(wakeWaitKey{}).(time.Duration)
	return d, ok
}
