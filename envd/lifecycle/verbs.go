package lifecycle

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/freeze"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// terminable are the states an instance can be terminated from: all but
// Terminated.
var terminable = []types.InstanceState{types.StatePending, types.StateRunning, types.StatePausing, types.StatePaused,
	types.StateResuming, types.StateStopping, types.StateStopped, types.StateFailed}

// verb is one lifecycle verb: From -> Via while Work runs -> To.
type verb struct {
	From   []types.InstanceState // the states it may start from
	Via    types.InstanceState   // the transitional state while the runtime works
	To     types.InstanceState
	Reason string // of both transitions; a failed Work records Reason+"_failed"
	Msg    string
	// Back is where a failed Work leaves the instance; "" = Failed.
	Back types.InstanceState
	// Hibernated > 0: the stop ends hibernated on this version (To is
	// Stopped), in the same update.
	Hibernated int
	// HibernatedCheckpoint > 0: the hibernation keeps the processes, the
	// memory image of this checkpoint (of Hibernated); MemoryNotKept: why
	// a hibernation asked to keep them did not (hibernate_memory.go).
	HibernatedCheckpoint int
	MemoryNotKept        string
	Work                 func(ctx context.Context, in versions.Instance) error
	// Note, when set, is read after Work succeeded: what it returns is
	// added to the message of the transition to To (what the work found
	// the user should know, e.g. what a stop lost).
	Note func() string
}

// step runs verb v on instance id of p's tenant, on this node.
func (m *Manager) step(ctx context.Context, p types.Principal, id string, v verb) (types.Instance, error) {
	defer m.act(id)()
	in, err := m.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	if in.Node != m.Node {
		return types.Instance{}, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, m.Node, errdefs.ErrFailedPrecondition)
	}
	if v.HibernatedCheckpoint > 0 {
		in, err = m.Store.TransitionHibernating(ctx, id, v.From, v.Via, v.HibernatedCheckpoint, v.Reason, v.Msg)
	} else {
		in, err = m.Store.Transition(ctx, id, v.From, v.Via, v.Reason, v.Msg)
	}
	if err != nil {
		return types.Instance{}, err
	}
	if werr := v.Work(ctx, in); werr != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		state := v.Back
		if state == "" {
			state = types.StateFailed
		}
		if _, terr := m.Store.Transition(cctx, id, []types.InstanceState{v.Via}, state, v.Reason+"_failed", werr.Error()); terr != nil {
			m.Log.Warn("record failed transition", "instance", id, "err", terr)
		}
		return types.Instance{}, fmt.Errorf("%s instance %q: %w", v.Reason, id, werr)
	}
	msg := v.Msg
	if v.Note != nil {
		if n := v.Note(); n != "" {
			msg += "; " + n
		}
	}
	if v.Hibernated > 0 {
		in, err = m.Store.StopHibernatedWith(ctx, id, versions.Hibernation{Version: v.Hibernated, Checkpoint: v.HibernatedCheckpoint, MemoryNotKept: v.MemoryNotKept}, v.Reason, msg)
	} else {
		in, err = m.Store.Transition(ctx, id, []types.InstanceState{v.Via}, v.To, v.Reason, msg)
	}
	if err != nil {
		return types.Instance{}, err
	}
	return m.withEndpoint(ctx, View(in)), nil
}

// InstanceVerb runs the plain verb called name (types.InstanceVerbs) on
// instance id; a name the list does not hold is errdefs.ErrNotFound.
func (m *Manager) InstanceVerb(ctx context.Context, p types.Principal, id, name string) (types.Instance, error) {
	if _, ok := types.LookupInstanceVerb(name); !ok {
		return types.Instance{}, fmt.Errorf("instance verb %q: %w", name, errdefs.ErrNotFound)
	}
	run, ok := m.verbs()[name]
	if !ok { // listed, not implemented here: TestPlainVerbsMatchTheList fails
		return types.Instance{}, fmt.Errorf("instance verb %q: not implemented: %w", name, errdefs.ErrNotFound)
	}
	return run(ctx, p, id)
}

// verbs are the Manager's methods of the plain verbs, by name: the one
// place a verb of types.InstanceVerbs meets its implementation.
func (m *Manager) verbs() map[string]func(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return map[string]func(ctx context.Context, p types.Principal, id string) (types.Instance, error){
		"stop":   m.StopInstance,
		"start":  m.StartInstance,
		"pause":  m.PauseInstance,
		"resume": m.ResumeInstance,
	}
}

// PauseInstance freezes the instance's processes; memory is kept.
func (m *Manager) PauseInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return m.step(ctx, p, id, verb{From: []types.InstanceState{types.StateRunning}, Via: types.StatePausing, To: types.StatePaused,
		Reason: types.ReasonUserPause, Msg: "paused by the user", Back: types.StateRunning,
		Work: func(ctx context.Context, in versions.Instance) error {
			return m.Gate.Hold(ctx, m.Runtime, id, freeze.HolderUser)
		}})
}

// ResumeInstance thaws a paused instance and returns its current endpoint.
func (m *Manager) ResumeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return m.step(ctx, p, id, verb{From: []types.InstanceState{types.StatePaused}, Via: types.StateResuming, To: types.StateRunning,
		Reason: types.ReasonUserResume, Msg: "resumed by the user", Back: types.StatePaused,
		Work: func(ctx context.Context, in versions.Instance) error {
			// A save's freeze window may hold the task frozen too: the
			// resume completes (Running) only after the save's thaw.
			if err := m.Gate.Release(ctx, m.Runtime, id, freeze.HolderUser, true); err != nil {
				return err
			}
			if err := m.Gate.WaitThawed(ctx, id); err != nil {
				// Back to Paused: the pause holds again.
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
				defer cancel()
				if herr := m.Gate.Hold(cctx, m.Runtime, id, freeze.HolderUser); herr != nil {
					m.Log.Warn("pause again after an abandoned resume", "instance", id, "err", herr)
				}
				return err
			}
			return nil
		}})
}

// StopInstance kills the instance's processes and releases its compute;
// the writable layer stays on the node, so a start brings its files back.
// Only retained instances can stop: for others the layer would be lost.
func (m *Manager) StopInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	in, err := m.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	if !in.Retain {
		return types.Instance{}, errdefs.WithDetails(fmt.Errorf("instance %q was not started with --retain: stopping it would lose its writable layer; "+
			"save it and remove it, or start instances with --retain: %w", id, errdefs.ErrFailedPrecondition), map[string]any{"state": in.State})
	}
	return m.stopInstance(ctx, p, id, types.ReasonUserStop, "stopped by the user")
}

// stopInstance stops a Running or Paused instance, keeping its writable
// layer. What the layer does not hold is lost with the processes: FIFOs
// made inside a gVisor instance (save.Saver.StopFIFOs) are listed before
// the stop and named in its message (the verb's answer, the instance's
// message and its instance.state event), as a save names them in a
// not_saved event.
func (m *Manager) stopInstance(ctx context.Context, p types.Principal, id, reason, msg string) (types.Instance, error) {
	var lost string
	return m.step(ctx, p, id, verb{From: []types.InstanceState{types.StateRunning, types.StatePaused}, Via: types.StateStopping, To: types.StateStopped,
		Reason: reason, Msg: msg + "; the writable layer is kept on node " + m.Node,
		Work: func(ctx context.Context, in versions.Instance) error {
			lost = m.stopFIFOs(ctx, id)
			return m.Runtime.Stop(ctx, id)
		},
		Note: func() string { return lost }})
}

// stopFIFOs is StopFIFOs' message, logged with its data; "" without a
// save path (a manager made without one saves nothing either).
func (m *Manager) stopFIFOs(ctx context.Context, id string) string {
	if m.Saver == nil {
		return ""
	}
	msg, data := m.Saver.StopFIFOs(ctx, id)
	if msg != "" {
		m.Log.Info("stop loses what the writable layer does not hold", "instance", id, "not_saved", data)
	}
	return msg
}

// StartInstance starts a stopped instance on its kept writable layer, with
// a new generation: anything still acting with the old one is fenced off.
// A hibernated instance is brought back from its hibernation version, on
// this node.
func (m *Manager) StartInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	in, err := m.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	// The tenant's instance quota is checked by the store, atomically, as
	// the instance leaves Stopped (versions.Instances.Transition).
	if in.HibernatedVersion > 0 && in.State == types.StateStopped {
		if in.HibernatedCheckpoint > 0 {
			return m.wakeWithMemory(ctx, p, in)
		}
		return m.wake(ctx, p, in)
	}
	return m.step(ctx, p, id, verb{From: []types.InstanceState{types.StateStopped}, Via: types.StatePending, To: types.StateRunning,
		Reason: types.ReasonStarted, Msg: "started on the kept writable layer",
		Work: func(ctx context.Context, in versions.Instance) error {
			gen, err := m.Store.BumpGeneration(ctx, id)
			if err != nil {
				return err
			}
			if err := m.Runtime.SetLabels(ctx, id, map[string]string{LabelGeneration: generationLabel(gen)}); err != nil {
				return err
			}
			if err := m.refreshNetworkPolicy(ctx, in); err != nil {
				return err
			}
			if err := m.Runtime.Start(ctx, id); err != nil {
				return err
			}
			m.kickAgent(id)
			return m.renewOnStart(ctx, in)
		}})
}

// renewOnStart gives a started instance a fresh default lifetime if it
// had one.
func (m *Manager) renewOnStart(ctx context.Context, in versions.Instance) error {
	if in.ExpiresAt == nil {
		return nil
	}
	exp, err := m.Quota.TTL(ctx, in.Tenant, "") // the default, cut to the tenant's maximum
	if err != nil {
		return err
	}
	_, err = m.Store.SetExpiry(ctx, in.ID, exp)
	return err
}

// wakeFrom is what a wake of instance in from version n needs before
// anything changes: the old container of the same id gone (a hibernation
// of this process may still be removing it), the version, the project,
// and its volumes here (refused when they cannot come).
func (m *Manager) wakeFrom(ctx context.Context, in versions.Instance, n int) (versions.Version, versions.Project, error) {
	if err := m.waitFreed(ctx, in.ID); err != nil {
		return versions.Version{}, versions.Project{}, err
	}
	v, err := m.Store.GetVersion(ctx, in.Tenant, in.Project, n)
	if err != nil {
		return versions.Version{}, versions.Project{}, err
	}
	proj, err := m.Store.GetProject(ctx, in.Tenant, in.Project)
	if err != nil {
		return versions.Version{}, versions.Project{}, err
	}
	if err := m.Volumes.Follow(ctx, proj); err != nil {
		return versions.Version{}, versions.Project{}, err
	}
	return v, proj, nil
}

// wake brings a hibernated instance back on this node: a new container
// from its hibernation version, a new generation, this node as its home.
func (m *Manager) wake(ctx context.Context, p types.Principal, in versions.Instance) (types.Instance, error) {
	began := time.Now()
	v, proj, err := m.wakeFrom(ctx, in, in.HibernatedVersion)
	if err != nil {
		return types.Instance{}, err
	}
	if in, err = m.Store.Rehome(ctx, in.ID, m.Node, v.Number, types.ReasonStarted,
		fmt.Sprintf("waking from hibernation version %d on node %s", v.Number, m.Node)); err != nil {
		return types.Instance{}, err
	}
	if err := m.provision(ctx, in, proj, v.Image, false); err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = m.Runtime.Remove(cctx, in.ID)
		m.fail(cctx, in.ID, types.StatePending, types.ReasonProvisionFailed, err.Error())
		return types.Instance{}, fmt.Errorf("wake instance %q: %w", in.ID, err)
	}
	if err := m.renewOnStart(ctx, in); err != nil {
		return types.Instance{}, err
	}
	in, err = m.Store.Transition(ctx, in.ID, []types.InstanceState{types.StatePending}, types.StateRunning, types.ReasonStarted,
		fmt.Sprintf("woke from hibernation version %d", v.Number))
	if err != nil {
		return types.Instance{}, err
	}
	m.Observer.Restored("wake", time.Since(began))
	m.recordFirstReads(m.startFirstReads(ctx, in, proj.Compression))
	return m.view(ctx, in), nil
}

// RenewInstance sets the instance's expiry to now + ttl; it may shorten it.
// "none" removes the expiry.
func (m *Manager) RenewInstance(ctx context.Context, p types.Principal, id, ttl string) (types.Instance, error) {
	if ttl == "" {
		return types.Instance{}, fmt.Errorf("ttl: required (a Go duration such as 30m, or \"none\"): %w", errdefs.ErrInvalidArgument)
	}
	in, err := m.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	expires, err := m.Quota.TTL(ctx, in.Tenant, ttl)
	if err != nil {
		return types.Instance{}, err
	}
	if in.State == types.StateTerminated || in.State == types.StateFailed {
		return types.Instance{}, errdefs.WithDetails(fmt.Errorf("instance %q is %s: cannot renew: %w", id, in.State, errdefs.ErrFailedPrecondition),
			map[string]any{"state": in.State})
	}
	in, err = m.Store.SetExpiry(ctx, id, expires)
	if err != nil {
		return types.Instance{}, err
	}
	m.wakeReaper()
	return View(in), nil
}

// withEndpoint fills the instance's network address from the runtime, as
// it is now (never cached).
func (m *Manager) withEndpoint(ctx context.Context, in types.Instance) types.Instance {
	if in.State != types.StateRunning && in.State != types.StatePaused {
		return in
	}
	in.Address = m.Runtime.Address(in.ID)
	return in
}

// terminate removes an instance's container and records why.
func (m *Manager) terminate(ctx context.Context, in versions.Instance, reason, msg string) (versions.Instance, error) {
	defer m.act(in.ID)()             // its task's exit is no failure (exits.go)
	defer m.forgetSessionEnds(in.ID) // no session of it will end
	if err := m.Runtime.Remove(ctx, in.ID); err != nil {
		return versions.Instance{}, fmt.Errorf("remove instance %q: %w", in.ID, err)
	}
	return m.Store.Transition(ctx, in.ID, terminable, types.StateTerminated, reason, msg)
}

func generationLabel(g int64) string { return strconv.FormatInt(g, 10) }
