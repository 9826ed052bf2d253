package envd

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Instance lifecycle. Every change of state is a compare-and-swap on the
// instance's row (versions.Store.Transition): a verb names the states it
// may start from, moves to a transitional state (Pausing, Resuming,
// Stopping, Pending) while the runtime works, then to the final one. Two
// verbs racing on one instance cannot both pass the first step; the loser
// gets 409 failed_precondition with the current state in the details.
//
//	Pending  --started-->  Running  --user_pause--> Pausing --> Paused
//	Paused   --user_resume--> Resuming --> Running
//	Running|Paused --user_stop--> Stopping --> Stopped
//	Stopped  --started--> Pending --> Running          (generation + 1)
//	any      --user_delete|ttl_expiry--> Terminated
//	any      --provision_failed|node_lost|task_exited|provision_timeout--> Failed

// liveStates are the states in which an instance holds resources on a node.
var liveStates = []types.InstanceState{types.StatePending, types.StateRunning, types.StatePausing, types.StatePaused, types.StateResuming, types.StateStopping, types.StateStopped}

// step runs one lifecycle verb: from -> mid (runtime work) -> to. When the
// work fails the instance goes back to back (or Failed when back is "").
func (s *Service) step(ctx context.Context, p types.Principal, id string, from []types.InstanceState, mid, to types.InstanceState, reason, msg string, back types.InstanceState,
	work func(ctx context.Context, in versions.Instance) error) (types.Instance, error) {
	in, err := s.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	if in.Node != s.cfg.Node {
		return types.Instance{}, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, s.cfg.Node, errdefs.ErrFailedPrecondition)
	}
	in, err = s.store.Transition(ctx, id, from, mid, reason, msg)
	if err != nil {
		return types.Instance{}, err
	}
	if werr := work(ctx, in); werr != nil {
		cctx, cancel := detach(ctx, 30*time.Second)
		defer cancel()
		state, why := back, reason+"_failed"
		if state == "" {
			state, why = types.StateFailed, reason+"_failed"
		}
		if _, terr := s.store.Transition(cctx, id, []types.InstanceState{mid}, state, why, werr.Error()); terr != nil {
			s.log.Warn("record failed transition", "instance", id, "err", terr)
		}
		return types.Instance{}, fmt.Errorf("%s instance %q: %w", reason, id, werr)
	}
	in, err = s.store.Transition(ctx, id, []types.InstanceState{mid}, to, reason, msg)
	if err != nil {
		return types.Instance{}, err
	}
	return s.withEndpoint(ctx, toInstance(in)), nil
}

// PauseInstance freezes the instance's processes; memory is kept.
func (s *Service) PauseInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return s.step(ctx, p, id, []types.InstanceState{types.StateRunning}, types.StatePausing, types.StatePaused, types.ReasonUserPause, "paused by the user", types.StateRunning,
		func(ctx context.Context, in versions.Instance) error { return s.frozen.hold(ctx, s.rt, id, holderUser) })
}

// ResumeInstance thaws a paused instance and returns its current endpoint.
func (s *Service) ResumeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return s.step(ctx, p, id, []types.InstanceState{types.StatePaused}, types.StateResuming, types.StateRunning, types.ReasonUserResume, "resumed by the user", types.StatePaused,
		func(ctx context.Context, in versions.Instance) error {
			// A save's freeze window may hold the task frozen too: the
			// resume completes (Running) only after the save's thaw.
			if err := s.frozen.release(ctx, s.rt, id, holderUser, true); err != nil {
				return err
			}
			if err := s.frozen.waitThawed(ctx, id); err != nil {
				// Back to Paused: the pause holds again.
				cctx, cancel := detach(ctx, 30*time.Second)
				defer cancel()
				if herr := s.frozen.hold(cctx, s.rt, id, holderUser); herr != nil {
					s.log.Warn("pause again after an abandoned resume", "instance", id, "err", herr)
				}
				return err
			}
			return nil
		})
}

// StopInstance kills the instance's processes and releases its compute;
// the writable layer stays on the node, so a start brings its files back.
// Only retained instances can stop: for others the layer would be lost.
func (s *Service) StopInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	in, err := s.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	if !in.Retain {
		return types.Instance{}, errdefs.WithDetails(fmt.Errorf("instance %q was not started with --retain: stopping it would lose its writable layer; "+
			"save it and remove it, or start instances with --retain: %w", id, errdefs.ErrFailedPrecondition), map[string]any{"state": in.State})
	}
	return s.stopInstance(ctx, p, id, types.ReasonUserStop, "stopped by the user")
}

func (s *Service) stopInstance(ctx context.Context, p types.Principal, id, reason, msg string) (types.Instance, error) {
	return s.step(ctx, p, id, []types.InstanceState{types.StateRunning, types.StatePaused}, types.StateStopping, types.StateStopped, reason,
		msg+"; the writable layer is kept on node "+s.cfg.Node, "",
		func(ctx context.Context, in versions.Instance) error { return s.rt.Stop(ctx, id) })
}

// StartInstance starts a stopped instance on its kept writable layer, with
// a new generation: anything still acting with the old one is fenced off.
// A hibernated instance is brought back from its hibernation version, on
// this node.
func (s *Service) StartInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	in, err := s.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	// The tenant's instance quota is checked by the store, atomically, as
	// the instance leaves Stopped (versions.Store.Transition).
	if in.HibernatedVersion > 0 && in.State == types.StateStopped {
		return s.wake(ctx, p, in)
	}
	return s.step(ctx, p, id, []types.InstanceState{types.StateStopped}, types.StatePending, types.StateRunning, types.ReasonStarted, "started on the kept writable layer", "",
		func(ctx context.Context, in versions.Instance) error {
			gen, err := s.store.BumpGeneration(ctx, id)
			if err != nil {
				return err
			}
			if err := s.rt.SetLabels(ctx, id, map[string]string{LabelGeneration: generationLabel(gen)}); err != nil {
				return err
			}
			if err := s.refreshNetworkPolicy(ctx, in); err != nil {
				return err
			}
			if err := s.rt.Start(ctx, id); err != nil {
				return err
			}
			return s.renewOnStart(ctx, in)
		})
}

// renewOnStart gives a started instance a fresh default lifetime if it
// had one.
func (s *Service) renewOnStart(ctx context.Context, in versions.Instance) error {
	if in.ExpiresAt == nil {
		return nil
	}
	exp, err := s.ttlFor(ctx, in.Tenant, "") // the default, cut to the tenant's maximum
	if err != nil {
		return err
	}
	_, err = s.store.SetExpiry(ctx, in.ID, exp)
	return err
}

// wake brings a hibernated instance back on this node: a new container
// from its hibernation version, a new generation, this node as its home.
func (s *Service) wake(ctx context.Context, p types.Principal, in versions.Instance) (types.Instance, error) {
	v, err := s.store.GetVersion(ctx, in.Tenant, in.Project, in.HibernatedVersion)
	if err != nil {
		return types.Instance{}, err
	}
	proj, err := s.store.GetProject(ctx, in.Tenant, in.Project)
	if err != nil {
		return types.Instance{}, err
	}
	if in, err = s.store.Transition(ctx, in.ID, []types.InstanceState{types.StateStopped}, types.StatePending, types.ReasonStarted,
		fmt.Sprintf("waking from hibernation version %d on node %s", v.Number, s.cfg.Node)); err != nil {
		return types.Instance{}, err
	}
	if in, err = s.store.Rehome(ctx, in.ID, types.StatePending, s.cfg.Node, v.Number); err != nil {
		return types.Instance{}, err
	}
	if err := s.provision(ctx, in, proj, v.Image, false); err != nil {
		cctx, cancel := detach(ctx, time.Minute)
		defer cancel()
		_ = s.rt.Remove(cctx, in.ID)
		s.fail(cctx, in.ID, types.StatePending, types.ReasonProvisionFailed, err.Error())
		return types.Instance{}, fmt.Errorf("wake instance %q: %w", in.ID, err)
	}
	if err := s.renewOnStart(ctx, in); err != nil {
		return types.Instance{}, err
	}
	in, err = s.store.Transition(ctx, in.ID, []types.InstanceState{types.StatePending}, types.StateRunning, types.ReasonStarted,
		fmt.Sprintf("woke from hibernation version %d", v.Number))
	if err != nil {
		return types.Instance{}, err
	}
	s.recordFirstReads(in, proj.Compression)
	return s.view(ctx, in), nil
}

// RenewInstance sets the instance's expiry to now + ttl; it may shorten it.
// "none" removes the expiry.
func (s *Service) RenewInstance(ctx context.Context, p types.Principal, id, ttl string) (types.Instance, error) {
	if ttl == "" {
		return types.Instance{}, fmt.Errorf("ttl: required (a Go duration such as 30m, or \"none\"): %w", errdefs.ErrInvalidArgument)
	}
	in, err := s.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	expires, err := s.ttlFor(ctx, in.Tenant, ttl)
	if err != nil {
		return types.Instance{}, err
	}
	if in.State == types.StateTerminated || in.State == types.StateFailed {
		return types.Instance{}, errdefs.WithDetails(fmt.Errorf("instance %q is %s: cannot renew: %w", id, in.State, errdefs.ErrFailedPrecondition),
			map[string]any{"state": in.State})
	}
	in, err = s.store.SetExpiry(ctx, id, expires)
	if err != nil {
		return types.Instance{}, err
	}
	s.wakeReaper()
	return toInstance(in), nil
}

// withEndpoint fills the instance's network address from the runtime, as
// it is now (never cached).
func (s *Service) withEndpoint(ctx context.Context, in types.Instance) types.Instance {
	if in.State != types.StateRunning && in.State != types.StatePaused {
		return in
	}
	if st, err := s.rt.Status(ctx, in.ID); err == nil {
		in.Address = st.Address
	}
	return in
}

// terminate removes an instance's container and records why.
func (s *Service) terminate(ctx context.Context, in versions.Instance, reason, msg string) (versions.Instance, error) {
	if err := s.rt.Remove(ctx, in.ID); err != nil {
		return versions.Instance{}, fmt.Errorf("remove instance %q: %w", in.ID, err)
	}
	return s.store.Transition(ctx, in.ID, append(slices.Clone(liveStates), types.StateFailed), types.StateTerminated, reason, msg)
}

func generationLabel(g int64) string { return strconv.FormatInt(g, 10) }
