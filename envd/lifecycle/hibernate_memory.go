package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/save"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// Hibernation with memory (issue 25, item 5). A Running instance is
// hibernated with its processes: at one freeze its rootfs is read and the
// engine writes its memory image (as a checkpoint with memory does); the
// image is pushed, and one commit records a version that does not become
// current and a checkpoint of it that owns the image. The instance itself
// claims the checkpoint's memory (no `up --checkpoint` of it runs its
// processes while the instance lives), is stopped and recorded hibernated
// on that version and checkpoint in one update, and its container is
// removed. From the memory image's write to the stop the task stays
// frozen: nothing its processes do after the image is lost with the
// container. The stop thaws it to kill it (the runtime's stop), so a
// process handling SIGTERM may still write to a volume in that grace.
//
// Any access that wakes a hibernated instance (exec, files, ports, SSH,
// console, start) resumes the processes from the image, on the node that
// is asked, with the instance's id, a new generation and a new address.
// The hibernated checkpoint is recorded with the stop's first step
// (Running -> Stopping) and stays until the instance runs again: a
// hibernation whose stop a crash cuts short (the reconciler finds it
// Stopping), and a wake that fails or that a crash cuts short (Pending),
// go back to Stopped, hibernated (reason recovered or wake_failed), and
// the next access resumes the processes.
//
// Memory cannot be kept on runtime class runc (no engine here), with an
// established TCP connection to a peer outside the instance (a resume would
// not have it), or when the engine refuses: the user verb is refused
// (memory_checkpoint_unsupported, details.reason) before anything changes;
// the idle action hibernate-memory hibernates the disk alone and records
// why (Instance.MemoryNotKept, and the stop's message).

// Reasons of a wake with memory that did not complete.
const (
	// ReasonWakeFailed: the resume failed; the instance is hibernated
	// again, its processes still in the image.
	ReasonWakeFailed = "wake_failed"
	// ReasonRecovered: a wake left Pending by a crash was put back.
	ReasonRecovered = "recovered"
)

// freezeHolderHibernate holds an instance frozen from its memory image's
// write to its stop.
const freezeHolderHibernate = "hibernate-memory"

// memoryRefusal says why in's memory cannot be kept now (nil: it can): an
// errdefs.ErrMemoryUnsupported whose details carry the stable "reason"
// (class, connection, state), or another error of the asking.
func (m *Manager) memoryRefusal(ctx context.Context, in versions.Instance) error {
	if in.State != types.StateRunning {
		return errdefs.WithDetails(fmt.Errorf("instance %q is %s: a hibernation with memory needs it Running (its processes): %w", in.ID, in.State, errdefs.ErrMemoryUnsupported),
			map[string]any{"state": in.State, "reason": "state"})
	}
	var e MemoryEngine
	if m.Memory != nil {
		e = m.Engine
	}
	return runtime.CheckMemoryCheckpoint(ctx, e, m.Node, in.ID, "hibernations with memory")
}

// memoryReason is the stable reason of a refusal to keep memory: its
// details' "reason", else "engine" (the engine refused in the freeze).
func memoryReason(err error) string {
	var d interface{ Details() map[string]any }
	for e := err; e != nil; e = errors.Unwrap(e) {
		if errors.As(e, &d) {
			if r, ok := d.Details()["reason"].(string); ok && r != "" {
				return r
			}
		}
	}
	return "engine"
}

// hibernateMemoryInstance is the user's hibernate --memory of a Running
// instance of this node: refused before anything changes when memory
// cannot be kept. It is checked against the tenant's quota like a save.
func (m *Manager) hibernateMemoryInstance(ctx context.Context, p types.Principal, in versions.Instance) (types.Instance, error) {
	if in.State == types.StateRunning && in.Node != m.Node {
		return types.Instance{}, fmt.Errorf("instance %q runs on node %q, not on %q: %w", in.ID, in.Node, m.Node, errdefs.ErrFailedPrecondition)
	}
	if err := m.memoryRefusal(ctx, in); err != nil {
		return types.Instance{}, err
	}
	defer m.act(in.ID)()
	return m.hibernateWithMemory(ctx, p, memoryHibernation{
		Instance: in, Quota: versions.QuotaEnforced, Reason: ReasonHibernated,
		Message: fmt.Sprintf("hibernation with memory of instance %s", in.ID),
		StopMessage: func(v, cp int) string {
			return fmt.Sprintf("hibernated with its processes as version %d and checkpoint %d; any access resumes them, on any node", v, cp)
		},
	})
}

// memoryHibernation is one hibernation with memory.
type memoryHibernation struct {
	Instance versions.Instance
	Quota    versions.QuotaPolicy
	Reason   string // of the stop
	Message  string // of the version and the checkpoint
	// StopMessage is the stop's message, given the version and the
	// checkpoint.
	StopMessage func(version, checkpoint int) string
	// Active, when set (an idle action), ends when activity comes: before
	// the stop, the hibernation is abandoned then (what was committed
	// stays listed) and the instance runs on; the error is Active's.
	Active context.Context
}

// hibernateWithMemory captures h.Instance with its memory, commits it,
// stops the instance hibernated on it and frees its container. A failure
// before the stop leaves the instance Running (thawed), and at most a
// committed checkpoint listed; ErrMemoryUnsupported when the engine
// refused in the freeze.
func (m *Manager) hibernateWithMemory(ctx context.Context, p types.Principal, h memoryHibernation) (types.Instance, error) {
	in := h.Instance
	actx := h.Active
	if actx == nil {
		actx = ctx
	}
	release, err := m.Saver.Guard(actx, in.ID, "hibernation with memory")
	if err != nil {
		return types.Instance{}, err
	}
	defer release()
	held := false
	thaw := func() {
		if !held {
			return
		}
		held = false
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		// After the stop the task is gone and the thaw fails: the hold
		// ends all the same (freeze.Gate.Release).
		if err := m.Gate.Release(cctx, m.Runtime, in.ID, freezeHolderHibernate, false); err != nil {
			m.Log.Debug("end the hibernation's freeze", "instance", in.ID, "err", err)
		}
	}
	defer thaw()
	memDir := filepath.Join(m.WorkDir, "hibernate-"+in.ID+"-memory")
	_ = os.RemoveAll(memDir) // left by an envd that died here
	defer os.RemoveAll(memDir)
	var memFreeze time.Duration
	c, err := m.Saver.Capture(actx, save.NoEvents{}, save.Capture{Work: "hibernate-" + in.ID, Instance: in, Freeze: true, Quota: h.Quota,
		WhileFrozen: func(ctx context.Context) error {
			// Held past the capture's own thaw, until the stop.
			if err := m.Gate.Hold(ctx, m.Runtime, in.ID, freezeHolderHibernate); err != nil {
				return err
			}
			held = true
			start := time.Now()
			err := m.Engine.CheckpointMemory(ctx, in.ID, memDir)
			memFreeze = time.Since(start)
			if err != nil {
				return fmt.Errorf("memory image: %w", err)
			}
			return nil
		}})
	if err != nil {
		return types.Instance{}, err
	}
	// Pushed under the capture's upload lease, which Commit ends: no sweep
	// runs between this push and the checkpoint row that owns the image.
	pushStart := time.Now()
	mem, err := m.Memory.PushMemory(actx, memDir, c.Image.Repo, c.Image.Digest)
	if err != nil {
		m.Saver.Abandon(context.WithoutCancel(ctx), c)
		return types.Instance{}, fmt.Errorf("push memory image: %w", err)
	}
	mem.FreezeMS = memFreeze.Milliseconds()
	_ = os.RemoveAll(memDir)
	// Captured is committed whatever comes now: a commit cut short would
	// leave only garbage.
	v, _, err := m.Saver.Commit(ctx, c, versions.Commit{
		Tenant: in.Tenant, Project: in.Project, InstanceID: in.ID, Generation: in.Generation, NoSwitch: true,
		Kind: versions.KindSnapshot, Message: h.Message,
		Checkpoint: &versions.CheckpointRecord{Message: h.Message, Node: m.Node, FreezeMS: c.Freeze.Milliseconds(), Memory: mem},
	})
	if err != nil {
		return types.Instance{}, err
	}
	cp, err := m.checkpointOfVersion(ctx, in, v.Number)
	if err != nil {
		return types.Instance{}, err
	}
	m.Log.Info("memory image of a hibernation", "instance", in.ID, "version", v.Number, "checkpoint", cp, "bytes", mem.Bytes, "new_bytes", mem.NewBytes,
		"freeze_ms", c.Freeze.Milliseconds(), "memory_freeze_ms", mem.FreezeMS, "push_ms", time.Since(pushStart).Milliseconds())
	if err := actx.Err(); err != nil {
		m.Log.Info("activity after a hibernation's capture; the instance keeps running", "instance", in.ID, "checkpoint", cp)
		return types.Instance{}, err
	}
	// The instance is the one that runs the image's processes from now on:
	// a resume of the checkpoint elsewhere is refused while it lives.
	if err := m.Store.ClaimCheckpointMemory(ctx, in.Tenant, in.Project, cp, in.ID); err != nil {
		return types.Instance{}, err
	}
	if h.Active != nil {
		m.activity.mu.Lock()
		delete(m.activity.idling, in.ID) // past this point a wake starts it again
		m.activity.mu.Unlock()
	}
	// Wakeable from the step on; its container is removed below.
	freed := m.freeing(in.ID)
	defer freed()
	out, err := m.step(ctx, p, in.ID, verb{From: []types.InstanceState{types.StateRunning}, Via: types.StateStopping, To: types.StateStopped,
		Reason: h.Reason, Hibernated: v.Number, HibernatedCheckpoint: cp, Msg: h.StopMessage(v.Number, cp),
		Work: func(ctx context.Context, _ versions.Instance) error { return m.Runtime.Stop(ctx, in.ID) }})
	if err != nil {
		return types.Instance{}, fmt.Errorf("stop after the hibernation with memory to checkpoint %d: %w", cp, err)
	}
	thaw()
	if err := m.Runtime.Remove(ctx, in.ID); err != nil {
		m.Log.Warn("free hibernated instance's container", "instance", in.ID, "err", err) // the reconciler retries
	}
	freed()
	m.Log.Info("instance hibernated with memory", "instance", in.ID, "version", v.Number, "checkpoint", cp)
	m.Volumes.Handoff(ctx, in.Tenant, in.Project)
	return out, nil
}

// checkpointOfVersion is the number of the checkpoint of in's project
// whose version is v.
func (m *Manager) checkpointOfVersion(ctx context.Context, in versions.Instance, v int) (int, error) {
	cs, err := m.Store.ListCheckpoints(ctx, in.Tenant, in.Project)
	if err != nil {
		return 0, err
	}
	for _, c := range cs {
		if c.Version == v {
			return c.Number, nil
		}
	}
	return 0, fmt.Errorf("checkpoint of version %d of project %q: %w", v, in.Project, errdefs.ErrNotFound)
}

// hibernatedCheckpoint is in's checkpoint to wake from, while hibernated.
func hibernatedCheckpoint(in versions.Instance) int {
	if in.HibernatedVersion > 0 {
		return in.HibernatedCheckpoint
	}
	return 0
}

// wakeWithMemory brings an instance hibernated with memory back on this
// node: a new container resuming the checkpoint's processes, a new
// generation, this node as its home. A failed resume puts it back to
// hibernated (reason wake_failed): nothing of the image is lost. When the
// checkpoint is gone (deleted by its user), it wakes from its version's
// files as a hibernation without memory does.
func (m *Manager) wakeWithMemory(ctx context.Context, p types.Principal, in versions.Instance) (types.Instance, error) {
	defer m.act(in.ID)() // the reconciler leaves this Pending wake alone
	began := time.Now()
	c, err := m.Store.GetCheckpoint(ctx, in.Tenant, in.Project, in.HibernatedCheckpoint)
	if errors.Is(err, errdefs.ErrNotFound) || (err == nil && c.Memory.Image == "") {
		m.Log.Warn("the checkpoint of a hibernation with memory is gone; waking from its version's files", "instance", in.ID, "checkpoint", in.HibernatedCheckpoint)
		return m.wake(ctx, p, in)
	}
	if err != nil {
		return types.Instance{}, err
	}
	if m.Memory == nil {
		return types.Instance{}, errdefs.WithDetails(fmt.Errorf("instance %q is hibernated with its processes, and node %q cannot resume them: wake it through a node with runtime class %s: %w",
			in.ID, m.Node, runtime.ClassGVisor, errdefs.ErrMemoryUnsupported), map[string]any{"reason": "class", "state": in.State})
	}
	v, proj, err := m.wakeFrom(ctx, in, c.Version)
	if err != nil {
		return types.Instance{}, err
	}
	if in, err = m.Store.Rehome(ctx, in.ID, m.Node, v.Number, types.ReasonStarted,
		fmt.Sprintf("waking with its processes from checkpoint %d (version %d) on node %s", c.Number, v.Number, m.Node)); err != nil {
		return types.Instance{}, err
	}
	back := func(cause error) error {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := m.Runtime.Remove(cctx, in.ID); err != nil {
			m.Log.Warn("remove the container of a failed wake", "instance", in.ID, "err", err)
		}
		if _, err := m.Store.Rehibernate(cctx, in.ID, ReasonWakeFailed,
			fmt.Sprintf("the resume of its processes failed, they are kept in checkpoint %d; the next access tries again: %v", c.Number, cause)); err != nil {
			m.Log.Warn("hibernate again after a failed wake", "instance", in.ID, "err", err)
		}
		return fmt.Errorf("wake instance %q with its processes: %w", in.ID, cause)
	}
	// The instance holds the checkpoint's memory already (its
	// hibernation claimed it); a resume of it elsewhere meanwhile took it.
	if err := m.Store.ClaimCheckpointMemory(ctx, in.Tenant, in.Project, c.Number, in.ID); err != nil {
		return types.Instance{}, back(err)
	}
	if err := os.MkdirAll(m.WorkDir, 0o700); err != nil {
		return types.Instance{}, back(err)
	}
	dir, err := os.MkdirTemp(m.WorkDir, "wake-"+in.ID+"-")
	if err != nil {
		return types.Instance{}, back(err)
	}
	defer os.RemoveAll(dir)
	pull := time.Now()
	if err := m.Memory.PullMemory(ctx, c.Memory.Image, filepath.Join(dir, "image")); err != nil {
		return types.Instance{}, back(fmt.Errorf("pull memory image %s: %w", c.Memory.Image, err))
	}
	pulled := time.Since(pull)
	// The spec's hostname is the project's, as at any start. (A copy of a
	// memory fork was named after its id; woken from hibernation it is
	// named after the project again, unless a program inside had set one:
	// runsc keeps a hostname set inside.)
	if err := m.provisionFrom(ctx, in, proj, v.Image, false, filepath.Join(dir, "image"), in.Project, nil); err != nil {
		return types.Instance{}, back(err)
	}
	m.kickAgent(in.ID)
	if err := m.renewOnStart(ctx, in); err != nil {
		return types.Instance{}, err
	}
	in, err = m.Store.Transition(ctx, in.ID, []types.InstanceState{types.StatePending}, types.StateRunning, types.ReasonStarted,
		fmt.Sprintf("woke with its processes from checkpoint %d (version %d)", c.Number, v.Number))
	if err != nil {
		return types.Instance{}, err
	}
	m.Observer.Restored("wake", time.Since(began))
	m.Log.Info("instance woke with its processes", "instance", in.ID, "checkpoint", c.Number, "pull_ms", pulled.Milliseconds(),
		"took_ms", time.Since(began).Milliseconds())
	return m.view(ctx, in), nil
}

// recoverMemoryHibernation puts an instance found Stopping (its
// hibernation with memory committed, its stop not recorded) or Pending
// (waking with memory), with no verb of this process acting on it (a crash
// cut it short), back to hibernated on its checkpoint: its container, if
// any, is removed first (for Stopping: the copy whose memory is in the
// image).
func (m *Manager) recoverMemoryHibernation(ctx context.Context, in versions.Instance) {
	what := "a wake"
	if in.State == types.StateStopping {
		what = "a hibernation"
	}
	if err := m.Runtime.Remove(ctx, in.ID); err != nil {
		m.Log.Warn("remove the container of an interrupted hibernation or wake", "instance", in.ID, "err", err)
		return
	}
	if _, err := m.Store.Rehibernate(ctx, in.ID, ReasonRecovered,
		fmt.Sprintf("%s with its processes was interrupted; they are kept in checkpoint %d and the next access resumes them", what, in.HibernatedCheckpoint)); err != nil {
		m.Log.Warn("hibernate again after an interruption", "instance", in.ID, "err", err)
		return
	}
	m.Log.Info("interrupted hibernation or wake with memory put back to hibernated", "instance", in.ID, "checkpoint", in.HibernatedCheckpoint, "was", in.State)
}
