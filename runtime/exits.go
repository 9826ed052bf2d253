package runtime

import (
	"context"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/typeurl/v2"
)

// OnInitExit calls fn, in its own goroutine, with the instance ID each time
// the init process of an instance's task exits (containerd's /tasks/exit
// event of the task's own process; exits of exec'd processes are not
// reported), until ctx ends. It subscribes again after a disconnect; an
// exit during a disconnect is missed, and left to the caller's periodic
// reconciliation.
func (r *Runtime) OnInitExit(ctx context.Context, fn func(id string)) {
	ctx = r.ctx(ctx)
	go func() {
		for ctx.Err() == nil {
			evC, errC := r.client.Subscribe(ctx, `topic=="/tasks/exit",namespace==`+r.cfg.Namespace)
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
					v, err := typeurl.UnmarshalAny(env.Event)
					if err != nil {
						continue
					}
					if ev, ok := v.(*apievents.TaskExit); ok && ev.ID == ev.ContainerID {
						go fn(ev.ContainerID)
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
