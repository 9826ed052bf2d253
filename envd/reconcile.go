package envd

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/runtime"
)

// LabelNode names the node that made a container; a node reconciles only
// its own containers, so nodes may share one containerd namespace.
const LabelNode = "envd.node"

// Start settles what a previous process left (frozen instances, containers
// no row owns, rows whose container vanished, unfinished operations) and
// starts the background loops: the TTL reaper and the periodic reconciler.
func (s *Service) Start(ctx context.Context) error {
	s.removeScratch()
	if err := s.thawInterruptedSaves(ctx); err != nil {
		return err
	}
	if err := s.Reconcile(ctx); err != nil {
		return err
	}
	if err := s.resumeOperations(ctx); err != nil {
		return err
	}
	s.watchOOM()
	s.wg.Add(2)
	go s.reapLoop()
	go s.reconcileLoop()
	return nil
}

// wakeReaper makes the reaper look at expiries again now (after a renew).
func (s *Service) wakeReaper() {
	select {
	case s.reapWake <- struct{}{}:
	default:
	}
}

// reapLoop terminates expired instances. Expiries live in the database, so
// a restart loses no timer: the loop sleeps until the earliest expiry (at
// most ReapInterval, so renewals by other nodes are seen) and reaps.
func (s *Service) reapLoop() {
	defer s.wg.Done()
	for {
		wait := s.cfg.ReapInterval
		if next, err := s.store.NextExpiry(s.ctx, s.cfg.Node); err == nil && next != nil {
			if d := time.Until(*next); d < wait {
				wait = max(d, 0)
			}
		}
		select {
		case <-s.ctx.Done():
			return
		case <-s.reapWake:
			continue
		case <-time.After(wait):
		}
		s.reapExpired(s.ctx)
	}
}

func (s *Service) reapExpired(ctx context.Context) {
	ins, err := s.store.ExpiredInstances(ctx, s.cfg.Node, time.Now())
	if err != nil {
		s.log.Warn("list expired instances", "err", err)
		return
	}
	for _, in := range ins {
		msg := fmt.Sprintf("expired at %s", in.ExpiresAt.UTC().Format(time.RFC3339))
		if in.Retain && (in.State == types.StateRunning || in.State == types.StatePaused) {
			// A retained instance's layer outlives its compute lifetime.
			if _, err := s.stopInstance(ctx, types.Principal{Tenant: in.Tenant}, in.ID, types.ReasonTTLExpiry, msg); err != nil {
				s.log.Warn("stop expired retained instance", "instance", in.ID, "err", err)
			}
			continue
		}
		if _, err := s.terminate(ctx, in, types.ReasonTTLExpiry, msg); err != nil {
			s.log.Warn("terminate expired instance", "instance", in.ID, "err", err)
			continue
		}
		s.log.Info("instance expired", "instance", in.ID)
	}
}

func (s *Service) reconcileLoop() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(s.cfg.ReconcileInterval):
		}
		if err := s.Reconcile(s.ctx); err != nil && s.ctx.Err() == nil {
			s.log.Warn("reconcile", "err", err)
		}
		s.hibernateIdle(s.ctx)
	}
}

// Reconcile makes the runtime and the instance rows of this node agree:
//   - a container of this node that no live row owns is removed (a crash
//     between creating it and recording it, or a failed removal);
//   - a live row whose container vanished becomes Failed (node_lost);
//   - a Running row whose task is gone becomes Failed (task_exited);
//   - a row stuck in Pending longer than ProvisionTimeout becomes Failed;
//   - a row left in a transitional state by a crash takes the runtime's state.
func (s *Service) Reconcile(ctx context.Context) error {
	rows, err := s.store.ListNodeInstances(ctx, s.cfg.Node)
	if err != nil {
		return err
	}
	ids, err := s.rt.List(ctx)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, in := range rows {
		if slices.Contains(liveStates, in.State) {
			live[in.ID] = true
		}
	}
	for _, id := range ids {
		st, err := s.rt.Status(ctx, id)
		if err != nil || st.Labels[LabelNode] != s.cfg.Node {
			continue // not ours
		}
		if live[id] {
			s.fence(ctx, id, st)
			continue
		}
		if err := s.rt.Remove(ctx, id); err != nil {
			s.log.Warn("remove orphan container", "id", id, "err", err)
			continue
		}
		s.log.Info("removed orphan container", "id", id)
	}
	for _, in := range rows {
		if !live[in.ID] {
			continue
		}
		st, err := s.rt.Status(ctx, in.ID)
		if err != nil {
			continue
		}
		switch {
		case in.State == types.StatePending:
			if time.Since(in.LastTransitionAt) > s.cfg.ProvisionTimeout {
				s.fail(ctx, in.ID, in.State, types.ReasonProvisionTimeout, fmt.Sprintf("still starting after %s", s.cfg.ProvisionTimeout))
				_ = s.rt.Remove(ctx, in.ID)
			}
		case !st.Exists && in.HibernatedVersion > 0:
			// hibernated: it lives as a version, no container expected
		case !st.Exists:
			s.fail(ctx, in.ID, in.State, types.ReasonNodeLost, "its container is gone from node "+s.cfg.Node)
		case in.State == types.StateRunning && st.Task != "running" && st.Task != "paused" && st.OOMKilled:
			s.failOOM(ctx, in.ID)
		case in.State == types.StateRunning && st.Task != "running" && st.Task != "paused":
			s.fail(ctx, in.ID, in.State, types.ReasonTaskExited, "its processes exited; the writable layer is kept until removal")
		case in.State == types.StatePausing || in.State == types.StateResuming || in.State == types.StateStopping:
			to := map[string]types.InstanceState{"running": types.StateRunning, "paused": types.StatePaused, "stopped": types.StateStopped, "": types.StateStopped}[st.Task]
			if _, err := s.store.Transition(ctx, in.ID, []types.InstanceState{in.State}, to, "recovered", "state recovered from the runtime after an interruption"); err != nil {
				s.log.Warn("recover instance state", "instance", in.ID, "err", err)
			}
		}
	}
	return nil
}

// fence kills a task of this node that acts with an older generation than
// the instance's newest, or for an instance now placed on another node (a
// partition healed, a second node took it over): it must not run on.
func (s *Service) fence(ctx context.Context, id string, st runtime.Status) {
	in, err := s.store.GetInstance(ctx, "", id)
	if err != nil {
		return
	}
	gen, _ := strconv.ParseInt(st.Labels[LabelGeneration], 10, 64)
	if in.Node == s.cfg.Node && gen >= in.Generation {
		return
	}
	if in.Node != s.cfg.Node {
		// The instance lives elsewhere now: its copy here is stale.
		if err := s.rt.Remove(ctx, id); err != nil {
			s.log.Warn("remove stale instance", "instance", id, "err", err)
			return
		}
		s.log.Warn("removed stale instance now owned by another node", "instance", id, "node", in.Node, "generation", gen, "newest", in.Generation)
		return
	}
	if st.Task == "running" || st.Task == "paused" {
		if err := s.rt.Stop(ctx, id); err != nil {
			s.log.Warn("kill stale task", "instance", id, "err", err)
			return
		}
		s.log.Warn("killed task of a stale generation", "instance", id, "generation", gen, "newest", in.Generation)
	}
}

func (s *Service) fail(ctx context.Context, id string, from types.InstanceState, reason, msg string) {
	if _, err := s.store.Transition(ctx, id, []types.InstanceState{from}, types.StateFailed, reason, msg); err != nil {
		s.log.Warn("mark instance failed", "instance", id, "reason", reason, "err", err)
		return
	}
	s.log.Info("instance failed", "instance", id, "reason", reason)
}
