package runtime

import (
	"context"
	"sync"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/core/events"
)

// oomLog remembers when containerd last reported an OOM kill in each
// instance's cgroup (the /tasks/oom event, for the init or any exec'd
// process), since this Runtime connected.
type oomLog struct {
	mu     sync.Mutex
	last   map[string]time.Time
	notify []func(id string)
	cancel context.CancelFunc
}

// OnOOM registers fn, called (in its own goroutine) with the instance ID
// each time the OOM killer kills a process of an instance.
func (r *Runtime) OnOOM(fn func(id string)) {
	r.ooms.mu.Lock()
	defer r.ooms.mu.Unlock()
	r.ooms.notify = append(r.ooms.notify, fn)
}

// OOMKilledSince reports whether a process of instance id was killed by the
// OOM killer at or after t (as far as this Runtime has seen).
func (r *Runtime) OOMKilledSince(id string, t time.Time) bool {
	r.ooms.mu.Lock()
	defer r.ooms.mu.Unlock()
	at, ok := r.ooms.last[id]
	return ok && !at.Before(t)
}

// watchOOM follows containerd's OOM events of our namespace until Close,
// subscribing again after a disconnect.
func (r *Runtime) watchOOM() {
	ctx, cancel := context.WithCancel(r.ctx(context.Background()))
	r.ooms.cancel = cancel
	r.ooms.last = map[string]time.Time{}
	r.follow(ctx, "/tasks/oom", func(env *events.Envelope, v any) {
		if ev, ok := v.(*apievents.TaskOOM); ok {
			r.recordOOM(ev.ContainerID, env.Timestamp)
		}
	})
}

func (r *Runtime) recordOOM(id string, at time.Time) {
	if at.IsZero() {
		at = time.Now()
	}
	r.ooms.mu.Lock()
	r.ooms.last[id] = at
	fns := append([]func(string){}, r.ooms.notify...)
	r.ooms.mu.Unlock()
	for _, fn := range fns {
		go fn(id)
	}
}
