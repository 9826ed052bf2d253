// Package fakeruntime is an in-memory container runtime for tests of envd's
// core that run without root and without containerd. It has the methods of
// envd.Runtime and keeps the real runtime's contracts that the core relies
// on (runtime package doc): an instance is a container with a writable layer
// kept across Stop and Start, whose task is "running", "paused" or "" (no
// task, after Stop); errors carry envd's kinds (ErrNotFound for an unknown
// instance, ErrFailedPrecondition for a wrong task state, ErrAlreadyExists
// for a taken id); Remove of an unknown instance is not an error.
//
// Terms:
//   - upper dir: the instance's writable layer, a plain directory under the
//     fake's root that a test writes files into as a process in the instance
//     would. Mounts describes it as an overlay mount whose upperdir option
//     names it, as containerd's overlay snapshotter does, so the save path
//     reads it like a real one. Nothing is mounted: overlay's own entries
//     (whiteouts are 0/0 character devices, opaque directories carry
//     trusted.* xattrs) need root to make and are left to root tests.
//   - fault: a function run before a method does its work; a non-nil error
//     fails the call with nothing changed. Faults stand for the failures a
//     real runtime cannot be made to show on demand (a freeze that fails, a
//     pull that hangs until canceled).
package fakeruntime

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/containerd/containerd/v2/core/mount"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime"
)

// Method names a method of the runtime, for faults.
type Method string

// The methods a fault can be set on.
const (
	Pull             Method = "Pull"
	Create           Method = "Create"
	Exec             Method = "Exec"
	Pause            Method = "Pause"
	Resume           Method = "Resume"
	Stop             Method = "Stop"
	Start            Method = "Start"
	SetLabels        Method = "SetLabels"
	SetNetworkPolicy Method = "SetNetworkPolicy"
	Remove           Method = "Remove"
	Mounts           Method = "Mounts"
)

// Fault runs before a call of a method on instance id (the ref for Pull);
// a non-nil error fails the call, nothing changed.
type Fault func(ctx context.Context, id string) error

// ExecFunc runs a process of an exec in an instance whose upper dir is
// upper, writing its output to spec.Stdout and spec.Stderr; it returns the
// exit code.
type ExecFunc func(ctx context.Context, upper string, spec runtime.ExecSpec) (int, error)

// Runtime is the fake. The zero value is not usable: call New.
type Runtime struct {
	root string

	mu        sync.Mutex
	instances map[string]*instance
	pulled    []string
	faults    map[Method]Fault
	once      map[Method][]error
	exec      ExecFunc
}

type instance struct {
	spec    runtime.InstanceSpec
	labels  map[string]string
	task    string
	network runtime.NetworkPolicy
}

// New returns a runtime with no instances whose upper dirs live under root
// (which must exist).
func New(root string) *Runtime {
	return &Runtime{root: root, instances: map[string]*instance{}, faults: map[Method]Fault{}, once: map[Method][]error{}}
}

// SetFault runs f before every call of m until it is set to nil.
func (r *Runtime) SetFault(m Method, f Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f == nil {
		delete(r.faults, m)
		return
	}
	r.faults[m] = f
}

// FailNext fails the next call of m with err (queued after earlier ones).
func (r *Runtime) FailNext(m Method, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.once[m] = append(r.once[m], err)
}

// SetExec sets what an exec does; by default it writes nothing and exits 0.
func (r *Runtime) SetExec(f ExecFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exec = f
}

// fault runs m's queued error or fault, without holding r.mu (a fault may
// block, or call the runtime).
func (r *Runtime) fault(ctx context.Context, m Method, id string) error {
	r.mu.Lock()
	if q := r.once[m]; len(q) > 0 {
		r.once[m] = q[1:]
		r.mu.Unlock()
		return fmt.Errorf("%s %q: %w", m, id, q[0])
	}
	f := r.faults[m]
	r.mu.Unlock()
	if f != nil {
		if err := f(ctx, id); err != nil {
			return fmt.Errorf("%s %q: %w", m, id, err)
		}
	}
	return nil
}

// UpperDir is the writable layer of instance id ("" for an unknown one).
func (r *Runtime) UpperDir(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.instances[id] == nil {
		return ""
	}
	return r.upper(id)
}

func (r *Runtime) upper(id string) string { return filepath.Join(r.root, id, "upper") }

// Spec is the spec instance id was created with.
func (r *Runtime) Spec(id string) (runtime.InstanceSpec, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := r.instances[id]
	if in == nil {
		return runtime.InstanceSpec{}, false
	}
	return in.spec, true
}

// Pulled lists the refs pulled so far, in order.
func (r *Runtime) Pulled() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.pulled)
}

func (r *Runtime) get(id string) (*instance, error) {
	in := r.instances[id]
	if in == nil {
		return nil, fmt.Errorf("instance %q: %w", id, errdefs.ErrNotFound)
	}
	return in, nil
}

// Pull records ref as pulled.
func (r *Runtime) Pull(ctx context.Context, ref string) error {
	if err := r.fault(ctx, Pull, ref); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pulled = append(r.pulled, ref)
	return nil
}

// Create makes the instance with an empty upper dir and a running task.
func (r *Runtime) Create(ctx context.Context, spec runtime.InstanceSpec) error {
	if err := r.fault(ctx, Create, spec.ID); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.instances[spec.ID] != nil {
		return fmt.Errorf("instance %q: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	if err := os.MkdirAll(r.upper(spec.ID), 0o755); err != nil {
		return err
	}
	r.instances[spec.ID] = &instance{spec: spec, labels: maps.Clone(spec.Labels), task: "running", network: spec.Network}
	return nil
}

// Exec runs the ExecFunc in a running instance; a paused one is refused
// with runtime.ErrTaskPaused, as containerd refuses it.
func (r *Runtime) Exec(ctx context.Context, id string, spec runtime.ExecSpec) (int, error) {
	if err := r.fault(ctx, Exec, id); err != nil {
		return 0, err
	}
	r.mu.Lock()
	in, err := r.get(id)
	if err != nil {
		r.mu.Unlock()
		return 0, err
	}
	task, f, upper := in.task, r.exec, r.upper(id)
	r.mu.Unlock()
	switch task {
	case "running":
	case "paused":
		return 0, fmt.Errorf("exec in %q: %w", id, runtime.ErrTaskPaused)
	default:
		return 0, fmt.Errorf("instance %q is stopped: %w", id, errdefs.ErrFailedPrecondition)
	}
	if f == nil {
		if spec.Stdin != nil {
			_, _ = io.Copy(io.Discard, spec.Stdin)
		}
		return 0, nil
	}
	return f(ctx, upper, spec)
}

// setTask moves id's task from one of from to to.
func (r *Runtime) setTask(id string, to string, from ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	in, err := r.get(id)
	if err != nil {
		return err
	}
	if !slices.Contains(from, in.task) {
		return fmt.Errorf("instance %q: task is %q, not one of %q: %w", id, in.task, from, errdefs.ErrFailedPrecondition)
	}
	in.task = to
	return nil
}

// Pause freezes a running task.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	if err := r.fault(ctx, Pause, id); err != nil {
		return err
	}
	return r.setTask(id, "paused", "running")
}

// Resume thaws a paused task.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	if err := r.fault(ctx, Resume, id); err != nil {
		return err
	}
	return r.setTask(id, "running", "paused")
}

// Stop ends the task and keeps the upper dir; stopping a stopped instance
// is a no-op.
func (r *Runtime) Stop(ctx context.Context, id string) error {
	if err := r.fault(ctx, Stop, id); err != nil {
		return err
	}
	return r.setTask(id, "", "running", "paused", "")
}

// Start starts a new task on the kept upper dir; a running one is left
// alone, a paused one refused.
func (r *Runtime) Start(ctx context.Context, id string) error {
	if err := r.fault(ctx, Start, id); err != nil {
		return err
	}
	return r.setTask(id, "running", "", "running")
}

// SetLabels merges labels into the instance's.
func (r *Runtime) SetLabels(ctx context.Context, id string, labels map[string]string) error {
	if err := r.fault(ctx, SetLabels, id); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	in, err := r.get(id)
	if err != nil {
		return err
	}
	maps.Copy(in.labels, labels)
	return nil
}

// SetNetworkPolicy records the instance's policy.
func (r *Runtime) SetNetworkPolicy(ctx context.Context, id string, pol runtime.NetworkPolicy) error {
	if err := r.fault(ctx, SetNetworkPolicy, id); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	in, err := r.get(id)
	if err != nil {
		return err
	}
	in.network = pol
	return nil
}

// Remove deletes the instance and its upper dir; an unknown one is not an
// error.
func (r *Runtime) Remove(ctx context.Context, id string) error {
	if err := r.fault(ctx, Remove, id); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.instances[id] == nil {
		return nil
	}
	if err := os.RemoveAll(filepath.Join(r.root, id)); err != nil {
		return err
	}
	delete(r.instances, id)
	return nil
}

// List returns the ids of all instances, sorted.
func (r *Runtime) List(ctx context.Context) ([]string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.instances)), nil
}

// Mounts describes the instance's rootfs as containerd's overlay
// snapshotter would: an overlay mount whose upperdir is the upper dir.
func (r *Runtime) Mounts(ctx context.Context, id string) ([]mount.Mount, error) {
	if err := r.fault(ctx, Mounts, id); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.get(id); err != nil {
		return nil, err
	}
	dir := filepath.Join(r.root, id)
	return []mount.Mount{{Type: "overlay", Source: "overlay", Options: []string{
		"index=off", "lowerdir=" + filepath.Join(dir, "lower"), "upperdir=" + r.upper(id), "workdir=" + filepath.Join(dir, "work"),
	}}}, nil
}

// Status reports the instance's task and labels; an unknown instance has
// Exists false. A running task has a Pid of 0: there is no process.
func (r *Runtime) Status(ctx context.Context, id string) (runtime.Status, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := r.instances[id]
	if in == nil {
		return runtime.Status{}, nil
	}
	return runtime.Status{Exists: true, Task: in.task, Labels: maps.Clone(in.labels)}, nil
}

// Address is Status's Address: always "" (no network).
func (r *Runtime) Address(id string) string { return "" }
