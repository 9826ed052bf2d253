package runtime

import (
	"context"
	"strings"

	tasks "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs/pkg/errgrpc"
)

// taskStatus is the instance's task status and pid in one containerd call:
// what LoadContainer, Task and Task.Status give in three (Status is on
// every view of the file API, ports, SSH and each reconcile pass).
func (r *Runtime) taskStatus(ctx context.Context, id string) (client.Status, uint32, error) {
	resp, err := r.client.TaskService().Get(ctx, &tasks.GetRequest{ContainerID: id})
	if err != nil {
		return client.Status{}, 0, errgrpc.ToNative(err)
	}
	p := resp.Process
	return client.Status{
		Status:     client.ProcessStatus(strings.ToLower(p.Status.String())),
		ExitStatus: p.ExitStatus,
		ExitTime:   p.ExitedAt.AsTime(),
	}, p.Pid, nil
}
