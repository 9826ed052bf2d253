package runtime

import (
	"context"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/core/events"
	"github.com/containerd/typeurl/v2"
)

// OnInitExit calls fn, in its own goroutine, with the instance ID each time
// the init process of an instance's task exits (containerd's /tasks/exit
// event of the task's own process; exits of exec'd processes are not
// reported), until ctx ends. It subscribes again after a disconnect; an
// exit during a disconnect is missed, and left to the caller's periodic
// reconciliation.
func (r *Runtime) OnInitExit(ctx context.Context, fn func(id string)) {
	r.follow(r.ctx(ctx), "/tasks/exit", func(_ *events.Envelope, v any) {
		if ev, ok := v.(*apievents.TaskExit); ok && ev.ID == ev.ContainerID {
			go fn(ev.ContainerID)
		}
	})
}

// follow calls fn with each event of topic in our namespace, decoded,
// until ctx ends, in a goroutine of its own; it subscribes again a second
// after a disconnect (events in between are missed).
func (r *Runtime) follow(ctx context.Context, topic string, fn func(env *events.Envelope, v any)) {
	go func() {
		for ctx.Err() == nil {
			evC, errC := r.client.Subscribe(ctx, `topic==`+`"`+topic+`"`+`,namespace==`+r.cfg.Namespace)
		recv:
			for {
				select {
				case <-ctx.Done():
					return
				case <-errC:
					break recv
				case env := <-evC:
					if env == nil {
						break recv
					}
					if v, err := typeurl.UnmarshalAny(env.Event); err == nil {
						fn(env, v)
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
}
