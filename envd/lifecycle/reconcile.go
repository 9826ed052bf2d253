package lifecycle

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/runtime"
)

// LabelNode names the node that made a container; a node reconciles only
// its own containers, so nodes may share one containerd namespace.
const LabelNode = "envd.node"

// Run starts the background work: the OOM watch, the TTL reaper, the idle
// reaper and its activity flush (idle.go), and the periodic reconciler
// (which also hibernates long-stopped retained instances). Call it once,
// after a first Reconcile; it ends with the Manager's context.
func (m *Manager) Run() {
	m.watchOOM()
	m.watchExits()
	if l, ok := m.Runtime.(agentListener); ok {
		// The agents of instances that ran before this process started.
		m.wg.Go(func() {
			if err := l.ListenAgents(m.ctx); err != nil && m.ctx.Err() == nil {
				m.Log.Warn("listen for the exec agents of running instances", "err", err)
			}
		})
	}
	m.wg.Add(4)
	go m.reapLoop()
	go m.reconcileLoop()
	go m.idleLoop()
	go m.flushLoop()
	if m.Pools != nil {
		m.wg.Go(m.poolLoop)
	}
}

// wakeReaper makes the reaper look at expiries again now (after a renew).
func (m *Manager) wakeReaper() {
	select {
	case m.reapWake <- struct{}{}:
	default:
	}
}

// reapLoop terminates expired instances. Expiries live in the database, so
// a restart loses no timer: the loop sleeps until the earliest expiry (at
// most ReapInterval, so renewals by other nodes are seen) and reaps.
func (m *Manager) reapLoop() {
	defer m.wg.Done()
	for {
		wait := m.ReapInterval
		if next, err := m.Store.NextExpiry(m.ctx, m.Node); err == nil && next != nil {
			if d := time.Until(*next); d < wait {
				wait = max(d, 0)
			}
		}
		select {
		case <-m.ctx.Done():
			return
		case <-m.reapWake:
			continue
		case <-time.After(wait):
		}
		m.reapExpired(m.ctx)
	}
}

func (m *Manager) reapExpired(ctx context.Context) {
	ins, err := m.Store.ExpiredInstances(ctx, m.Node, time.Now())
	if err != nil {
		m.Log.Warn("list expired instances", "err", err)
		return
	}
	for _, in := range ins {
		msg := fmt.Sprintf("expired at %s", in.ExpiresAt.UTC().Format(time.RFC3339))
		if in.Retain && (in.State == types.StateRunning || in.State == types.StatePaused) {
			// A retained instance's layer outlives its compute lifetime.
			if _, err := m.stopInstance(ctx, types.Principal{Tenant: in.Tenant}, in.ID, types.ReasonTTLExpiry, msg); err != nil {
				m.Log.Warn("stop expired retained instance", "instance", in.ID, "err", err)
			}
			continue
		}
		if _, err := m.terminate(ctx, in, types.ReasonTTLExpiry, msg); err != nil {
			m.Log.Warn("terminate expired instance", "instance", in.ID, "err", err)
			continue
		}
		m.Log.Info("instance expired", "instance", in.ID)
	}
}

func (m *Manager) reconcileLoop() {
	defer m.wg.Done()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-time.After(m.ReconcileInterval):
		}
		if err := m.Reconcile(m.ctx); err != nil && m.ctx.Err() == nil {
			m.Log.Warn("reconcile", "err", err)
		}
		m.hibernateIdle(m.ctx)
	}
}

// Reconcile makes the runtime and the instance rows of this node agree:
//   - a container of this node that no live row owns is removed (a crash
//     between creating it and recording it, or a failed removal);
//   - a live row whose container vanished becomes Failed (node_lost);
//   - a Running row whose task exited becomes Failed (task_exited), one
//     whose task vanished with its shim (no task at all) too (shim_lost);
//   - a row stuck in Pending longer than ProvisionTimeout becomes Failed;
//   - a row left in a transitional state by a crash (no verb of this
//     process acts on it) takes the runtime's state; one left by a
//     hibernation with memory or its wake (Stopping or Pending with a
//     hibernated checkpoint) goes back to hibernated on it.
func (m *Manager) Reconcile(ctx context.Context) error {
	rows, err := m.Store.ListNodeInstances(ctx, m.Node)
	if err != nil {
		return err
	}
	ids, err := m.Runtime.List(ctx)
	if err != nil {
		return err
	}
	live := map[string]bool{}
	for _, in := range rows {
		if in.State.Live() {
			live[in.ID] = true
		}
	}
	for _, id := range ids {
		st, err := m.Runtime.Status(ctx, id)
		if err != nil {
			// Said, not skipped silently: a container whose status cannot
			// be read is neither kept nor removed this round.
			m.Log.Warn("reconcile: read container status", "id", id, "err", err)
			continue
		}
		if st.Labels[LabelNode] != m.Node {
			continue // not ours
		}
		if live[id] {
			m.fence(ctx, id, st)
			continue
		}
		if err := m.Runtime.Remove(ctx, id); err != nil {
			m.Log.Warn("remove orphan container", "id", id, "err", err)
			continue
		}
		m.Log.Info("removed orphan container", "id", id)
	}
	for _, in := range rows {
		if !live[in.ID] {
			continue
		}
		st, err := m.Runtime.Status(ctx, in.ID)
		if err != nil {
			continue
		}
		switch {
		case (in.State == types.StatePending || in.State == types.StateStopping) && in.HibernatedCheckpoint > 0 && in.HibernatedVersion == 0 && !m.inFlight(in.ID):
			// A hibernation with memory (Stopping) or its wake (Pending)
			// that a crash cut short: the processes are in the
			// checkpoint's image.
			m.recoverMemoryHibernation(ctx, in)
		case in.State == types.StatePending:
			if time.Since(in.LastTransitionAt) > m.ProvisionTimeout {
				m.fail(ctx, in.ID, in.State, types.ReasonProvisionTimeout, fmt.Sprintf("still starting after %s", m.ProvisionTimeout))
				_ = m.Runtime.Remove(ctx, in.ID)
			}
		case !st.Exists && in.HibernatedVersion > 0:
			// hibernated: it lives as a version, no container expected
		case !st.Exists:
			m.fail(ctx, in.ID, in.State, types.ReasonNodeLost, "its container is gone from node "+m.Node)
		case in.State == types.StateRunning && st.Task == "":
			m.fail(ctx, in.ID, in.State, types.ReasonShimLost, shimLostMessage)
		case in.State == types.StateRunning && taskEnded(st.Task) && st.OOMKilled:
			m.failOOM(ctx, in.ID)
		case in.State == types.StateRunning && taskEnded(st.Task):
			m.fail(ctx, in.ID, in.State, types.ReasonTaskExited, exitMessage(st))
		case (in.State == types.StatePausing || in.State == types.StateResuming || in.State == types.StateStopping) && !m.inFlight(in.ID):
			// Left by a crash: no verb of this process acts on it (a verb
			// in flight ends its transition itself; the runtime may not
			// show its effect yet).
			to := map[string]types.InstanceState{"running": types.StateRunning, "paused": types.StatePaused, "stopped": types.StateStopped, "": types.StateStopped}[st.Task]
			if _, err := m.Store.Transition(ctx, in.ID, []types.InstanceState{in.State}, to, "recovered", "state recovered from the runtime after an interruption"); err != nil {
				m.Log.Warn("recover instance state", "instance", in.ID, "err", err)
			}
		}
	}
	return nil
}

// fence kills a task of this node that acts with an older generation than
// the instance's newest, or for an instance now placed on another node (a
// partition healed, a second node took it over): it must not run on.
func (m *Manager) fence(ctx context.Context, id string, st runtime.Status) {
	in, err := m.Store.GetInstance(ctx, "", id)
	if err != nil {
		return
	}
	gen, _ := strconv.ParseInt(st.Labels[LabelGeneration], 10, 64)
	if in.Node == m.Node && gen >= in.Generation {
		return
	}
	if in.Node != m.Node {
		// The instance lives elsewhere now: its copy here is stale.
		if err := m.Runtime.Remove(ctx, id); err != nil {
			m.Log.Warn("remove stale instance", "instance", id, "err", err)
			return
		}
		m.Log.Warn("removed stale instance now owned by another node", "instance", id, "node", in.Node, "generation", gen, "newest", in.Generation)
		return
	}
	if st.Task == "running" || st.Task == "paused" {
		if err := m.Runtime.Stop(ctx, id); err != nil {
			m.Log.Warn("kill stale task", "instance", id, "err", err)
			return
		}
		m.Log.Warn("killed task of a stale generation", "instance", id, "generation", gen, "newest", in.Generation)
	}
}

func (m *Manager) fail(ctx context.Context, id string, from types.InstanceState, reason, msg string) {
	if _, err := m.Store.Transition(ctx, id, []types.InstanceState{from}, types.StateFailed, reason, msg); err != nil {
		m.Log.Warn("mark instance failed", "instance", id, "reason", reason, "err", err)
		return
	}
	m.Log.Info("instance failed", "instance", id, "reason", reason, "message", msg)
	m.Observer.InstanceFailed(reason)
}
