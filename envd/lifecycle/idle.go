package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/save"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Idle stop. An instance is idle while it is Running with no activity: no
// exec or terminal session open on this node, and no touch (an exec, a
// byte of terminal input, a file API call, a proxied request, an SSH
// session's input; see Touch) for longer than its idle setting. Its idle
// clock starts at the newest of: its last transition (start, wake,
// resume), the newest activity flushed to the store by any node, and the
// newest activity this node saw and has not flushed yet. A Paused instance
// is not idle: its user froze it on purpose, and its TTL bounds it.
//
// The idle action, once the clock passes the setting:
//   - a retained instance with action stop is stopped (reason idle); its
//     layer stays on the node (and HibernateAfter may free it later);
//   - any other (not retained, or action hibernate) is frozen, its layer
//     saved as a version that does not become current (listed, and a
//     switch can make it current), then stopped and recorded as
//     hibernated on that version (reason idle), its container removed. A
//     start, on any node, brings it back from that version;
//   - action hibernate-memory (retained or not) hibernates it with its
//     processes (hibernate_memory.go), and a start resumes them; where
//     memory cannot be kept it does as hibernate, recording why
//     (MemoryNotKept, and in the stop's message).
//
// Any failure before the stop (quota, registry, runtime) leaves the
// instance Running with reason idle_failed and the error as its message,
// logs it and counts it (Observer.Idled); its clock restarts there, so the
// action is tried again one idle setting later. Activity during the save
// cancels it: the instance stays Running.

// Reasons of idle actions.
const (
	ReasonIdle       = "idle"
	ReasonIdleFailed = "idle_failed"
)

// freezeHolderIdle holds the freeze while an idle save reads the layer.
const freezeHolderIdle = "idle"

// IdlePolicy is an effective idle setting: After 0 = never idle.
type IdlePolicy struct {
	After  time.Duration
	Action string // versions.IdleStop, IdleHibernate or IdleHibernateMemory
}

// EffectiveIdle is the setting that applies to a project's instances: the
// project's own, else the node's; cut to the tenant's maximum, which also
// applies when neither sets one.
func EffectiveIdle(proj versions.Idle, tenantMax time.Duration, node IdlePolicy) IdlePolicy {
	out := node
	if proj.After != nil {
		out.After = *proj.After
	}
	if proj.Action != "" {
		out.Action = proj.Action
	}
	if tenantMax > 0 && (out.After == 0 || out.After > tenantMax) {
		out.After = tenantMax
	}
	if out.Action == "" {
		out.Action = versions.IdleStop
	}
	return out
}

// activity is this node's record of instance activity.
type activity struct {
	mu     sync.Mutex
	last   map[string]time.Time // newest activity seen here, kept a while after its flush
	dirty  map[string]time.Time // not flushed yet
	open   map[string]int       // sessions open here
	idling map[string]context.CancelFunc
	waking map[string]*wakeCall
	// ended are run when a session on the instance next ends
	// (onSessionEnd).
	ended map[string][]func()
}

func newActivity() *activity {
	return &activity{last: map[string]time.Time{}, dirty: map[string]time.Time{}, open: map[string]int{},
		idling: map[string]context.CancelFunc{}, waking: map[string]*wakeCall{}, ended: map[string][]func(){}}
}

// onSessionEnd has fn run once, when a session on instance id (a
// command, a terminal: Hold) next ends, in the goroutine that ends it and
// before the session's answer goes out. fn must be quick. When the
// instance is terminated here first, fn is dropped (forgetSessionEnds).
func (m *Manager) onSessionEnd(id string, fn func()) {
	a := m.activity
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ended[id] = append(a.ended[id], fn)
}

// nextSessionEnd returns a channel closed when a session on instance id
// next ends (onSessionEnd).
func (m *Manager) nextSessionEnd(id string) <-chan struct{} {
	ch := make(chan struct{})
	m.onSessionEnd(id, func() { close(ch) })
	return ch
}

// forgetSessionEnds drops instance id's onSessionEnd functions unrun.
func (m *Manager) forgetSessionEnds(id string) {
	a := m.activity
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.ended, id)
}

// sessionEnded runs instance id's onSessionEnd functions.
func (m *Manager) sessionEnded(id string) {
	a := m.activity
	a.mu.Lock()
	fns := a.ended[id]
	delete(a.ended, id)
	a.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// Touch records activity on instance id now: it restarts the instance's
// idle clock and cancels an idle save in progress. It never blocks on I/O.
func (m *Manager) Touch(id string) {
	a := m.activity
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last[id], a.dirty[id] = now, now
	if cancel, ok := a.idling[id]; ok {
		cancel()
	}
}

// Hold records a session open on instance id (an exec, a terminal) until
// release is called: the instance is not idle meanwhile, whatever its
// input. Both ends count as activity.
func (m *Manager) Hold(id string) (release func()) {
	m.Touch(id)
	m.activity.mu.Lock()
	m.activity.open[id]++
	m.activity.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			m.activity.mu.Lock()
			if m.activity.open[id]--; m.activity.open[id] <= 0 {
				delete(m.activity.open, id)
			}
			m.activity.mu.Unlock()
			m.Touch(id)
			m.sessionEnded(id)
		})
	}
}

// activeSince reports whether instance id saw activity here after since,
// or has a session open.
func (m *Manager) activeSince(id string, since time.Time) bool {
	m.activity.mu.Lock()
	defer m.activity.mu.Unlock()
	return m.activity.open[id] > 0 || m.activity.last[id].After(since)
}

// sessions is the number of sessions open on id here.
func (m *Manager) sessions(id string) int {
	m.activity.mu.Lock()
	defer m.activity.mu.Unlock()
	return m.activity.open[id]
}

// lastSeen is the newest activity on id this node knows of.
func (m *Manager) lastSeen(id string) (time.Time, bool) {
	m.activity.mu.Lock()
	defer m.activity.mu.Unlock()
	t, ok := m.activity.last[id]
	return t, ok
}

// flushActivity writes the activity not yet flushed to the store, with
// every instance that has a session open here as active now, so that other
// nodes see it. A failed flush is kept for the next.
func (m *Manager) flushActivity(ctx context.Context) {
	a := m.activity
	now := time.Now()
	a.mu.Lock()
	batch := a.dirty
	a.dirty = map[string]time.Time{}
	for id := range a.open {
		batch[id] = now
		a.last[id] = now
	}
	for id, t := range a.last {
		if now.Sub(t) > 10*m.ActivityFlush && a.open[id] == 0 {
			delete(a.last, id) // the store has it
		}
	}
	a.mu.Unlock()
	if err := m.Store.RecordActivity(ctx, batch); err != nil {
		m.Log.Warn("flush instance activity", "instances", len(batch), "err", err)
		a.mu.Lock()
		for id, t := range batch {
			if t.After(a.dirty[id]) {
				a.dirty[id] = t
			}
		}
		a.mu.Unlock()
	}
}

// idleSince is when st's instance became idle.
func (m *Manager) idleSince(st versions.IdleState) time.Time {
	since := st.Instance.LastTransitionAt
	if st.LastActivity != nil && st.LastActivity.After(since) {
		since = *st.LastActivity
	}
	if t, ok := m.lastSeen(st.Instance.ID); ok && t.After(since) {
		since = t
	}
	return since
}

func (m *Manager) idlePolicy(st versions.IdleState) IdlePolicy {
	return EffectiveIdle(st.Idle, st.MaxIdleAfter, IdlePolicy{After: m.IdleAfter, Action: m.IdleAction})
}

// withIdle fills the idle fields of the instances in out from the store's
// idle states and this node's activity.
func (m *Manager) withIdle(ctx context.Context, out []types.Instance) {
	ids := make([]string, 0, len(out))
	for _, in := range out {
		if in.State.Live() {
			ids = append(ids, in.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	sts, err := m.Store.IdleStates(ctx, ids)
	if err != nil {
		m.Log.Warn("read idle states", "err", err)
		return
	}
	for i := range out {
		st, ok := sts[out[i].ID]
		if !ok {
			continue
		}
		pol := m.idlePolicy(st)
		if pol.After > 0 {
			out[i].IdleAfter, out[i].IdleAction = pol.After.String(), actionFor(st.Instance, pol)
		}
		if st.Instance.State != types.StateRunning {
			continue
		}
		if n := m.sessions(st.Instance.ID); n > 0 {
			out[i].ActiveSessions = n
			continue
		}
		since := m.idleSince(st).UTC()
		out[i].IdleSince = &since
		if pol.After > 0 {
			at := since.Add(pol.After)
			out[i].IdleActionAt = &at
		}
	}
}

// idleLoop runs the idle actions that are due, every IdleInterval.
func (m *Manager) idleLoop() {
	defer m.wg.Done()
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-time.After(m.IdleInterval):
		}
		m.reapIdle(m.ctx)
	}
}

// flushLoop writes activity to the store every ActivityFlush, apart from
// the reaper, whose idle saves may take minutes, and once more at the end.
func (m *Manager) flushLoop() {
	defer m.wg.Done()
	for {
		select {
		case <-m.ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), 5*time.Second)
			m.flushActivity(fctx)
			cancel()
			return
		case <-time.After(m.ActivityFlush):
		}
		m.flushActivity(m.ctx)
	}
}

// reapIdle runs the idle action of every Running instance of this node
// idle longer than its setting, one at a time.
func (m *Manager) reapIdle(ctx context.Context) {
	sts, err := m.Store.IdleCandidates(ctx, m.Node)
	if err != nil {
		m.Log.Warn("list idle candidates", "err", err)
		return
	}
	for _, st := range sts {
		if ctx.Err() != nil {
			return
		}
		pol := m.idlePolicy(st)
		if pol.After <= 0 || m.sessions(st.Instance.ID) > 0 {
			continue
		}
		since := m.idleSince(st)
		if time.Since(since) < pol.After {
			continue
		}
		m.runIdle(ctx, st.Instance, pol, since)
	}
}

// actionFor is what idle does to in: an instance that is not retained is
// always saved before it stops (hibernate), whatever the setting says.
func actionFor(in versions.Instance, pol IdlePolicy) string {
	if !in.Retain && pol.Action != versions.IdleHibernateMemory {
		return versions.IdleHibernate
	}
	return pol.Action
}

// runIdle runs one instance's idle action and records how it ended.
func (m *Manager) runIdle(ctx context.Context, in versions.Instance, pol IdlePolicy, since time.Time) {
	action := actionFor(in, pol)
	began := time.Now()
	err := m.idle(ctx, in, action, since)
	switch {
	case err == nil:
		m.Observer.Idled(action, "done")
		m.Log.Info("idle instance stopped", "instance", in.ID, "action", action, "idle_since", since, "took", time.Since(began))
	case errors.Is(err, errIdleActive):
		m.Observer.Idled(action, "canceled")
		m.Log.Info("idle action canceled by activity", "instance", in.ID, "action", action)
	case ctx.Err() != nil:
		// The node shuts down: the next start's reaper tries again.
	default:
		m.Observer.Idled(action, "failed")
		m.Log.Warn("idle action failed; the instance keeps running", "instance", in.ID, "action", action, "err", err)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		msg := fmt.Sprintf("idle %s failed, the instance keeps running and is tried again after %s idle: %v", action, pol.After, err)
		if _, terr := m.Store.Transition(cctx, in.ID, []types.InstanceState{types.StateRunning}, types.StateRunning, ReasonIdleFailed, msg); terr != nil {
			m.Log.Warn("record failed idle action", "instance", in.ID, "err", terr)
		}
	}
}

// errIdleActive: activity came during the idle action, before the stop.
var errIdleActive = errors.New("activity during the idle action")

// idle stops instance in (action stop: a retained one, layer kept) or
// saves its layer as a non-current version, stops it and records it
// hibernated on that version (action hibernate). Until the stop, activity
// cancels it and any failure leaves the instance Running.
func (m *Manager) idle(ctx context.Context, in versions.Instance, action string, since time.Time) error {
	defer m.act(in.ID)()
	p := types.Principal{Tenant: in.Tenant}
	idleFor := time.Since(since).Round(time.Second)
	if action == versions.IdleStop {
		if m.activeSince(in.ID, since) {
			return errIdleActive
		}
		_, err := m.stopInstance(ctx, p, in.ID, ReasonIdle, fmt.Sprintf("idle for %s", idleFor))
		return err
	}
	ictx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.activity.mu.Lock()
	m.activity.idling[in.ID] = cancel
	m.activity.mu.Unlock()
	defer func() {
		m.activity.mu.Lock()
		delete(m.activity.idling, in.ID)
		m.activity.mu.Unlock()
	}()
	// Activity between the reaper's look and now, which no cancel saw.
	if m.activeSince(in.ID, since) {
		return errIdleActive
	}
	active := func(err error) error {
		if ictx.Err() != nil && ctx.Err() == nil {
			return errIdleActive
		}
		return err
	}
	// With memory where it can be kept; otherwise, or when the engine
	// refuses in the freeze, the disk alone, saying why.
	var notKept error
	if action == versions.IdleHibernateMemory {
		notKept = m.memoryRefusal(ctx, in)
		if notKept != nil && !errors.Is(notKept, errdefs.ErrMemoryUnsupported) {
			return notKept
		}
		if notKept == nil {
			_, err := m.hibernateWithMemory(ctx, p, memoryHibernation{
				Instance: in, Quota: versions.QuotaEnforced, Reason: ReasonIdle, Active: ictx,
				Message: fmt.Sprintf("idle stop with memory of instance %s after %s without activity", in.ID, idleFor),
				StopMessage: func(v, cp int) string {
					return fmt.Sprintf("idle for %s: hibernated with its processes as version %d and checkpoint %d; any access resumes them, on any node", idleFor, v, cp)
				},
			})
			if err == nil || !errors.Is(err, errdefs.ErrMemoryUnsupported) {
				return active(err)
			}
			notKept = err
		}
		m.Log.Info("idle hibernation keeps the disk only: memory cannot be kept", "instance", in.ID, "reason", memoryReason(notKept), "err", notKept)
	}

	// Listed before the freeze (an exec into a frozen sandbox would
	// wait): FIFOs made inside a gVisor instance are in neither the version
	// nor the kept layer; the stop's message names them.
	lost := m.stopFIFOs(ictx, in.ID)
	release, err := m.Saver.Guard(ictx, in.ID, "idle stop")
	if err != nil {
		return active(err)
	}
	defer release()
	// Frozen from the read to the stop: nothing the instance writes after
	// the save is lost with its container.
	if err := m.Gate.Hold(ictx, m.Runtime, in.ID, freezeHolderIdle); err != nil {
		return active(err)
	}
	frozen := true
	thaw := func() {
		if !frozen {
			return
		}
		frozen = false
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := m.Gate.Release(cctx, m.Runtime, in.ID, freezeHolderIdle, false); err != nil {
			m.Log.Warn("thaw after an idle save", "instance", in.ID, "err", err)
		}
	}
	defer thaw()
	c, err := m.Saver.Capture(ictx, save.NoEvents{}, save.Capture{Work: "idle-" + in.ID, Instance: in, Freeze: false, Quota: versions.QuotaEnforced})
	if err != nil {
		return active(err)
	}
	// Captured is committed whatever comes now: the version is the
	// instance's work, and a commit cut short would leave only garbage.
	v, _, err := m.Saver.Commit(ctx, c, versions.Commit{
		Tenant: in.Tenant, Project: in.Project, InstanceID: in.ID, Generation: in.Generation, NoSwitch: true,
		Kind: versions.KindSnapshot, Message: fmt.Sprintf("idle stop of instance %s after %s without activity", in.ID, idleFor),
	})
	if err != nil {
		return active(err)
	}
	if ictx.Err() != nil {
		m.Log.Info("activity after an idle save; the instance keeps running", "instance", in.ID, "version", v.Number)
		return active(ictx.Err())
	}
	// Past this point activity no longer cancels: a wake starts it again.
	m.activity.mu.Lock()
	delete(m.activity.idling, in.ID)
	m.activity.mu.Unlock()
	thaw() // the stop signals the processes; frozen ones would not see it
	// Wakeable from the step on; its container is removed below.
	freed := m.freeing(in.ID)
	defer freed()
	// Stopped and hibernated in one update: a reader never sees it
	// stopped by idle with no version to wake from.
	msg := fmt.Sprintf("idle for %s: saved as version %d and stopped; any access wakes it, on any node", idleFor, v.Number)
	var notKeptReason string
	if notKept != nil {
		notKeptReason = memoryReason(notKept)
		msg = fmt.Sprintf("idle for %s: memory not kept (%s: %v); saved as version %d (files only) and stopped; any access wakes it, on any node, its processes started anew",
			idleFor, notKeptReason, notKept, v.Number)
	}
	if lost != "" {
		msg += "; " + lost
	}
	if _, err := m.step(ctx, p, in.ID, verb{From: []types.InstanceState{types.StateRunning, types.StatePaused}, Via: types.StateStopping, To: types.StateStopped,
		Reason: ReasonIdle, Hibernated: v.Number, MemoryNotKept: notKeptReason, Msg: msg,
		Work: func(ctx context.Context, _ versions.Instance) error { return m.Runtime.Stop(ctx, in.ID) }}); err != nil {
		return fmt.Errorf("stop after the idle save to version %d: %w", v.Number, err)
	}
	if err := m.Runtime.Remove(ctx, in.ID); err != nil {
		m.Log.Warn("free idle instance's layer", "instance", in.ID, "err", err) // the reconciler retries
	}
	freed()
	m.Volumes.Handoff(ctx, in.Tenant, in.Project)
	return nil
}

// The wake.

// WakeRetryAfter is the Retry-After of a waking answer.
const WakeRetryAfter = 2 * time.Second

// WakingError is the answer to a request that did not wait for its
// instance to wake: errdefs.ErrWaking, with a Retry-After.
type WakingError struct {
	ID    string
	State types.InstanceState
}

func (e *WakingError) Error() string {
	return fmt.Sprintf("instance %q is waking (%s); retry in %s", e.ID, e.State, WakeRetryAfter)
}
func (e *WakingError) Unwrap() error             { return errdefs.ErrWaking }
func (e *WakingError) RetryAfter() time.Duration { return WakeRetryAfter }
func (e *WakingError) Details() map[string]any {
	return map[string]any{"state": e.State, "retry_after_seconds": int(WakeRetryAfter / time.Second)}
}

// wakeCall is one wake of an instance, shared by its concurrent callers.
type wakeCall struct {
	done chan struct{}
	err  error
}

// Wake returns instance id once it is Running: a Stopped one (retained on
// this node, or hibernated, by the idle action or not, on any node) is
// started, once however many callers ask at the same time, and waited
// for at most wait (the start goes on after). Past wait, or when ctx ends,
// the answer is a *WakingError. A Paused instance is not resumed (its user
// froze it on purpose), nor a Failed or Terminated one started:
// ErrFailedPrecondition with the state.
func (m *Manager) Wake(ctx context.Context, p types.Principal, id string, wait time.Duration) (types.Instance, error) {
	in, err := m.instance(ctx, p, id)
	if err != nil {
		return types.Instance{}, err
	}
	m.Touch(id)
	switch in.State {
	case types.StateRunning:
		return m.view(ctx, in), nil
	case types.StateStopped, types.StateStopping, types.StatePending:
	default:
		return types.Instance{}, errdefs.WithDetails(fmt.Errorf("instance %q is %s: only a stopped or hibernated instance wakes: %w",
			id, in.State, errdefs.ErrFailedPrecondition), map[string]any{"state": in.State})
	}
	if in.State == types.StateStopped && in.HibernatedVersion == 0 && in.Node != m.Node {
		return types.Instance{}, errdefs.WithDetails(fmt.Errorf("instance %q is stopped with its layer on node %q: wake it there: %w",
			id, in.Node, errdefs.ErrFailedPrecondition), map[string]any{"state": in.State, "node": in.Node})
	}
	call := m.wakeOnce(p, id)
	timer := time.NewTimer(max(wait, 0))
	defer timer.Stop()
	select {
	case <-call.done:
		if call.err != nil {
			return types.Instance{}, call.err
		}
		return m.GetInstance(ctx, p, id)
	case <-timer.C:
	case <-ctx.Done():
	}
	state := in.State
	if now, err := m.Store.GetInstance(context.WithoutCancel(ctx), p.Tenant, id); err == nil {
		state = now.State
	}
	return types.Instance{}, &WakingError{ID: id, State: state}
}

// wakeOnce starts instance id unless a wake of it runs already, and
// returns that wake. It runs in the service's context: a caller that
// stops waiting does not stop it.
func (m *Manager) wakeOnce(p types.Principal, id string) *wakeCall {
	a := m.activity
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.waking[id]; ok {
		return c
	}
	c := &wakeCall{done: make(chan struct{})}
	a.waking[id] = c
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		ctx, cancel := context.WithTimeout(m.ctx, m.ProvisionTimeout)
		defer cancel()
		c.err = m.wakeNow(ctx, p, id)
		a.mu.Lock()
		delete(a.waking, id)
		a.mu.Unlock()
		close(c.done)
	}()
	return c
}

// wakeNow starts instance id and returns once it is Running; an instance
// another caller (or node) is starting or stopping is waited for.
func (m *Manager) wakeNow(ctx context.Context, p types.Principal, id string) error {
	for {
		in, err := m.instance(ctx, p, id)
		if err != nil {
			return err
		}
		switch in.State {
		case types.StateRunning:
			m.Touch(id)
			return nil
		case types.StateStopped:
			if in.HibernatedVersion == 0 && in.Node != m.Node {
				return fmt.Errorf("instance %q is stopped with its layer on node %q: %w", id, in.Node, errdefs.ErrFailedPrecondition)
			}
			_, err := m.StartInstance(ctx, p, id)
			if err == nil {
				m.Touch(id)
				return nil
			}
			if !errors.Is(err, errdefs.ErrFailedPrecondition) {
				return err
			}
			// Another start won the race: wait for it.
		case types.StatePending, types.StateStopping:
		default:
			return errdefs.WithDetails(fmt.Errorf("instance %q is %s: it cannot wake: %w", id, in.State, errdefs.ErrFailedPrecondition),
				map[string]any{"state": in.State})
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
