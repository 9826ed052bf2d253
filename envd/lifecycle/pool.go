package lifecycle

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// PoolStore is what warm pools need of the store (see versions/pools.go
// for the terms).
type PoolStore interface {
	PoolStates(ctx context.Context, node string) ([]versions.PoolState, error)
	AddToPool(ctx context.Context, tenant, project, id, node string, version int) error
	RemoveFromPool(ctx context.Context, id string) error
	ClaimPooled(ctx context.Context, tenant, project string, version int, node string, expires *time.Time, alive func(id string) bool) (versions.Instance, error)
}

// claimPooled answers a create from the project's warm pool on this node
// when the request is the plain one a pool serves: the current version,
// no retained layer, nothing else asked. ok is false when no pooled
// instance could be claimed (the caller starts one as usual).
func (m *Manager) claimPooled(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest) (types.Instance, bool) {
	if m.Pools == nil {
		return types.Instance{}, false
	}
	plain := req
	plain.Version, plain.TTL = 0, ""
	if !reflect.DeepEqual(plain, types.CreateInstanceRequest{}) {
		return types.Instance{}, false
	}
	proj, err := m.Store.GetProject(ctx, p.Tenant, project)
	if err != nil || (req.Version != 0 && req.Version != proj.Current) {
		return types.Instance{}, false
	}
	expires, err := m.Quota.TTL(ctx, p.Tenant, req.TTL)
	if err != nil {
		return types.Instance{}, false // the usual path gives the error
	}
	// Hold refills back from before the claim commits: a pool round
	// between the commit and a later mark would start the replacement
	// at once.
	m.markClaim()
	if m.checkClass(ctx, p.Tenant, proj) != nil {
		return types.Instance{}, false // the usual path gives the error
	}
	class := m.effectiveClass(proj)
	// The store's Running may lag an init that just died (its exit is
	// settled exitGrace after the event): never hand that one out. Nor
	// one started before the project's runtime class or docker setting
	// changed: it is removed, and the pool refills with the new one.
	var dead, otherClass []string
	alive := func(id string) bool {
		st, err := m.Runtime.Status(ctx, id)
		if err == nil && st.Class != "" && (st.Class != class || st.Docker != proj.Docker) {
			otherClass = append(otherClass, id)
			return false
		}
		if err != nil || st.Task == "running" {
			return true // cannot tell: the store's Running stands
		}
		dead = append(dead, id)
		return false
	}
	in, err := m.Pools.ClaimPooled(ctx, p.Tenant, project, proj.Current, m.Node, expires, alive)
	for _, id := range dead {
		m.Log.Warn("passed over a pooled instance whose task is gone", "instance", id)
		m.SettleExit(ctx, id)
	}
	for _, id := range otherClass {
		m.drainPooled(ctx, versions.PoolState{Tenant: p.Tenant, Project: project}, id)
	}
	if err != nil {
		return types.Instance{}, false
	}
	m.wakeReaper() // its expiry is new
	m.claimed()    // refill, after the claimed instance's first commands
	return m.view(ctx, in), true
}

// poolLoop keeps the projects' pools full on this node: it removes pooled
// instances of a version that is no longer current (or that failed) and
// starts new ones until each project has pool_size ready (counted on every
// node; two nodes filling at once may start one too many, removed as
// stale when the size shrinks).
func (m *Manager) poolLoop() {
	interval := m.PoolInterval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		m.fillPools(m.ctx)
		select {
		case <-m.ctx.Done():
			return
		case <-t.C:
		case <-m.poolWake():
		}
	}
}

func (m *Manager) fillPools(ctx context.Context) {
	forced, deferred := m.refillGate()
	if deferred {
		return
	}
	round := time.Now()
	states, err := m.Pools.PoolStates(ctx, m.Node)
	if err != nil {
		if ctx.Err() == nil {
			m.Log.Warn("warm pools", "err", err)
		}
		return
	}
	for _, st := range states {
		for _, id := range st.Stale {
			m.drainPooled(ctx, st, id)
		}
		for i := st.Ready; i < st.Size && ctx.Err() == nil; i++ {
			if !forced && m.claimedSince(round) {
				return // a claim came meanwhile: its first commands go first
			}
			if err := m.startPooled(ctx, st); err != nil {
				m.Log.Warn("warm pool: start an instance", "project", st.Project, "version", st.Current, "err", err)
				break // quota, a broken version: try again next round
			}
		}
	}
}

// startPooled starts one pooled instance of the project's current version.
// The pool row comes first, so the instance is never visible to the
// tenant, and is removed if the start fails.
func (m *Manager) startPooled(ctx context.Context, st versions.PoolState) error {
	p := types.Principal{Tenant: st.Tenant}
	id := names.NewID(st.Project)
	if err := m.Pools.AddToPool(ctx, st.Tenant, st.Project, id, m.Node, st.Current); err != nil {
		return err
	}
	if _, err := m.createInstance(ctx, p, id, st.Project, types.CreateInstanceRequest{Version: st.Current}); err != nil {
		if in, gerr := m.Store.GetInstance(ctx, "", id); gerr == nil {
			_, _ = m.terminate(context.WithoutCancel(ctx), in, types.ReasonUserDelete, "pool start failed")
		}
		_ = m.Pools.RemoveFromPool(context.WithoutCancel(ctx), id)
		return err
	}
	// The claimer's first command should not pay for a runc exec: wait for
	// the exec agent the start kicked off (a claim before it connects uses
	// runc exec).
	if a, ok := m.Runtime.(agentStarter); ok {
		if err := a.StartAgent(ctx, id); err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition) {
			m.Log.Warn("warm pool: start the exec agent", "instance", id, "err", err)
		}
	}
	return nil
}

// agentStarter starts an instance's exec agent (runtime.Runtime).
type agentStarter interface {
	StartAgent(ctx context.Context, id string) error
	KickAgent(id string)
}

// agentListener takes back the agents of instances that ran before this
// process (runtime.Runtime).
type agentListener interface {
	ListenAgents(ctx context.Context) error
}

// kickAgent starts a new task's exec agent in the background, so that the
// instance's first command does not pay for a runc exec (runtimes without
// agents: nothing).
func (m *Manager) kickAgent(id string) {
	if a, ok := m.Runtime.(agentStarter); ok {
		a.KickAgent(id)
	}
}

// drainPooled removes a pooled instance nobody claimed.
func (m *Manager) drainPooled(ctx context.Context, st versions.PoolState, id string) {
	in, err := m.Store.GetInstance(ctx, "", id)
	if err == nil && in.State != types.StateTerminated {
		if _, err := m.terminate(ctx, in, types.ReasonUserDelete, "removed from the warm pool: not the current version"); err != nil {
			m.Log.Warn("warm pool: remove a stale instance", "instance", id, "err", err)
			return
		}
	}
	if err := m.Pools.RemoveFromPool(ctx, id); err != nil {
		m.Log.Warn("warm pool: forget a stale instance", "instance", id, "err", err)
	}
}

// DefaultPoolRefillDelay is how long the pool filler waits after a claim
// on this node before it starts replacements (Deps.PoolRefillDelay).
const DefaultPoolRefillDelay = time.Second

// maxRefillDeferrals bounds how long claims in a row can hold a refill
// back: at most this many refill delays since the first deferred one.
const maxRefillDeferrals = 5

// claimed records a claim on this node and makes the pool loop look again
// once the refill delay has passed. An instance start takes most of the
// node's CPU for about half a second (CNI, runc create, the shim), and a
// refill started at the claim lands on the claimed instance's first
// commands: waiting for them keeps the claim's first answers fast (see
// docs/notes/lifecycle.md, "Warm pool latency").
func (m *Manager) claimed() {
	m.markClaim()
	time.AfterFunc(m.refillDelay(), m.poke)
}

// monoEpoch is a monotonic clock reading: claim times are kept as the
// time since it, so a wall-clock step or slew cannot end a refill delay
// early or make it longer (CI saw a refill 3.4 ms early against a 3 s
// delay when the claim time was wall-clock nanoseconds).
var monoEpoch = time.Now()

// markClaim records a claim on this node now.
func (m *Manager) markClaim() {
	m.poolClaimedAt.Store(int64(time.Since(monoEpoch)))
}

func (m *Manager) refillDelay() time.Duration {
	if m.PoolRefillDelay < 0 {
		return 0
	}
	if m.PoolRefillDelay == 0 {
		return DefaultPoolRefillDelay
	}
	return m.PoolRefillDelay
}

// refillGate tells the pool loop whether to hold its refill back: a
// claim on this node was made less than the refill delay ago. Claims in a
// row hold it back at most maxRefillDeferrals delays; then the round is
// forced: it refills fully even if claims come meanwhile. Only the pool
// loop calls it.
func (m *Manager) refillGate() (forced, deferred bool) {
	delay := m.refillDelay()
	now := time.Now()
	if delay == 0 || !m.claimedSince(now.Add(-delay)) {
		m.poolDeferredSince = time.Time{}
		return false, false
	}
	if m.poolDeferredSince.IsZero() {
		m.poolDeferredSince = now
	}
	if now.Sub(m.poolDeferredSince) >= maxRefillDeferrals*delay {
		m.poolDeferredSince = time.Time{}
		return true, false
	}
	return false, true // the claim's AfterFunc pokes the loop when the delay is over
}

// claimedSince reports whether a claim on this node was made after t.
func (m *Manager) claimedSince(t time.Time) bool {
	at := m.poolClaimedAt.Load()
	return at != 0 && at > int64(t.Sub(monoEpoch))
}

// poke makes the pool loop look again now.
func (m *Manager) poke() {
	select {
	case m.poolKick <- struct{}{}:
	default:
	}
}

func (m *Manager) poolWake() <-chan struct{} { return m.poolKick }

// PokePools makes the pool loop look again now (after a size change).
func (m *Manager) PokePools() { m.poke() }
