package runtime

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"

	tasks "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/v2/client"
	cerrdefs "github.com/containerd/errdefs"
)

// Shim group gates.
//
// A group's shim exits when containerd asks it to shut down after a task
// delete and it serves no task any more (containerd's runc shim,
// task service Shutdown). containerd does not order that with a task
// created in the group meanwhile: the new task's shim start finds the
// group's socket still answering and joins the shim on its way out, and
// the create fails with "ttrpc: closed", or the task is made and dies with
// the shim (its instance shim_lost). A create that fails is cleaned up by
// containerd the same way (a shutdown), so it can take a concurrent
// create in an empty group down with it. The runtime orders them per
// group: a task's create and a task's delete each hold the group's gate
// alone, and one that leaves the group without a task keeps it until the
// shim's socket stops answering (at most shimExitWait), so the next
// create starts a new shim. Creates in one group are serial: a task's
// create is 50-200 ms, and a group is 16 instances of one tenant.
//
// Only this process's creates and deletes are ordered, which is all of
// them for a node's containerd: a group's name carries the runtime's
// scope. A shim killed from outside is no race: it answers nothing.
type shimGates struct {
	mu    sync.Mutex
	gates map[string]*sync.Mutex // by group name; a few per tenant, kept
}

// shimExitWait bounds the wait for an emptied group's shim to go: it exits
// within milliseconds of its shutdown; a wait past this is logged by
// nobody and only means the next create may race as before.
const shimExitWait = 5 * time.Second

// shimSocketDir is where containerd's shims listen unless its config sets
// [plugins."io.containerd.shim.v1.manager"] socket_dir (the daemon's
// config does not; daemon.go).
const shimSocketDir = "/run/containerd/s"

func (g *shimGates) gate(group string) *sync.Mutex {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates == nil {
		g.gates = map[string]*sync.Mutex{}
	}
	l := g.gates[group]
	if l == nil {
		l = &sync.Mutex{}
		g.gates[group] = l
	}
	return l
}

// createGroupedTask runs create, the creation of container id's task in
// group, alone in the group; when it fails and leaves the group without a
// task, it waits for the group's shim to exit.
func (r *Runtime) createGroupedTask(ctx context.Context, id, group string, create func() error) error {
	if group == "" {
		return create()
	}
	l := r.gates.gate(group)
	l.Lock()
	defer l.Unlock()
	err := create()
	if err != nil {
		r.awaitEmptyShimExit(ctx, id, group)
	}
	return err
}

// deleteTask deletes t, container id's task (its processes killed; a task
// already gone is no error). In a group it runs alone in the group, and
// waits for the group's shim to exit when no task of the group is left.
func (r *Runtime) deleteTask(ctx context.Context, id, group string, t client.Task) error {
	del := func() error {
		if _, err := t.Delete(ctx, withKill); err != nil && !cerrdefs.IsNotFound(err) {
			return err
		}
		return nil
	}
	if group == "" {
		return del()
	}
	l := r.gates.gate(group)
	l.Lock()
	defer l.Unlock()
	if err := del(); err != nil {
		return err
	}
	r.awaitEmptyShimExit(ctx, id, group)
	return nil
}

// awaitEmptyShimExit waits, when no container of group but id has a task,
// until the group's shim socket stops answering (shimExitWait at most).
func (r *Runtime) awaitEmptyShimExit(ctx context.Context, id, group string) {
	if r.groupHasTask(ctx, id, group) {
		return
	}
	addr := shimSocketAddress(r.cfg.Namespace, r.cfg.Address, group)
	for deadline := time.Now().Add(shimExitWait); time.Now().Before(deadline) && ctx.Err() == nil; {
		if !socketAnswers(addr) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// groupHasTask reports whether a container of group other than id has a
// task. When that cannot be read it says yes: no wait, as before gates.
func (r *Runtime) groupHasTask(ctx context.Context, id, group string) bool {
	cs, err := r.client.ContainerService().List(ctx, fmt.Sprintf("labels.%q==%q", LabelShimGroup, group))
	if err != nil {
		return true
	}
	members := map[string]bool{}
	for _, c := range cs {
		if c.ID != id {
			members[c.ID] = true
		}
	}
	if len(members) == 0 {
		return false
	}
	resp, err := r.client.TaskService().List(ctx, &tasks.ListTasksRequest{})
	if err != nil {
		return true
	}
	for _, t := range resp.Tasks {
		if members[t.ID] {
			return true
		}
	}
	return false
}

// shimSocketAddress is the socket a group's shim listens on: containerd's
// shim.CreateSocketAddress (pkg/shim, v2), the sha256 of the daemon's
// address, namespace and group under shimSocketDir. Written out here so
// the runtime does not link containerd's shim package.
// TestRootShimGroupChurn checks it against a live shim.
func shimSocketAddress(namespace, daemonAddress, group string) string {
	d := sha256.Sum256([]byte(filepath.Join(daemonAddress, namespace, group)))
	return fmt.Sprintf("%s/%x", shimSocketDir, d)
}

// socketAnswers reports whether something accepts connections on the unix
// socket at path (containerd's shim.CanConnect).
func socketAnswers(path string) bool {
	c, err := net.DialTimeout("unix", path, 100*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// taskGroup is container c's shim group ("" = a shim of its own), from the
// metadata loaded with it.
func taskGroup(ctx context.Context, c client.Container) string {
	info, err := c.Info(ctx, client.WithoutRefreshedMetadata)
	if err != nil {
		return ""
	}
	return info.Labels[LabelShimGroup]
}
