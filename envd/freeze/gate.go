// Package freeze is the gate through which an instance's task is frozen
// and thawed on its node: it counts the holders of a freeze (a user's
// pause, a save's frozen pass) so that none thaws what another still
// holds, and it admits one capture (save or hibernation) of an instance at
// a time. It needs the runtime's Pause, Resume and Status (Freezer).
package freeze

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime"
)

// Freezing an instance's task (the cgroup freezer, through the runtime's
// Pause and Resume) has two kinds of holders, both on the instance's node,
// since only that node's runtime can freeze it:
//
//   - the user's pause (HolderUser), from PauseInstance to ResumeInstance;
//   - a save's frozen pass (holder "save:<operation>"), for its freeze window.
//
// The task is frozen while anyone holds it; it is frozen by the first
// holder and thawed when the last lets go, so a save never thaws an
// instance the user paused during it, and a user's pause during a save is
// still in force after the save's freeze window. A task found already
// frozen when the first holder came (by something outside this gate) is
// thawed only by the user's resume, never by a save's release or a failed
// freeze.
//
// Gate also records which capture (save or hibernation) of an
// instance runs on this node: one at a time.
type Gate struct {
	mu        sync.Mutex
	instances map[string]*freezeState
	captures  map[string]string // instance -> what captures it
}

// HolderUser is the user's pause.
const HolderUser = "user"

// SaveHolder is the holder name of save operation op's frozen pass.
func SaveHolder(op string) string { return "save:" + op }

// Freezer is what the gate needs of the runtime.
type Freezer interface {
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	Status(ctx context.Context, id string) (runtime.Status, error)
}

type freezeState struct {
	// op serializes this instance's runtime Pause and Resume calls; every
	// change of holders happens under it too, so a holder that sees no one
	// else may act on the task alone.
	op      sync.Mutex
	ours    bool            // under op: the gate froze the task (it was not found frozen)
	refs    int             // under Gate.mu: calls using this state
	holders map[string]bool // under Gate.mu
	// claims counts saves between asking to freeze (hold called) and
	// holding (or failing to): under Gate.mu. A user's resume waits
	// for them too, or a save waiting for op while the resume thaws would
	// freeze the task just after the resume reported it running.
	claims  int
	changed chan struct{} // under Gate.mu: closed and replaced when holders change
}

// ref returns the instance's state, kept until unref.
func (g *Gate) ref(id string) *freezeState {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.instances == nil {
		g.instances = map[string]*freezeState{}
	}
	st := g.instances[id]
	if st == nil {
		st = &freezeState{holders: map[string]bool{}, changed: make(chan struct{})}
		g.instances[id] = st
	}
	st.refs++
	return st
}

// unref drops the state of an instance nobody uses or holds.
func (g *Gate) unref(id string, st *freezeState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st.refs--
	if st.refs == 0 && len(st.holders) == 0 && g.instances[id] == st {
		delete(g.instances, id)
	}
}

// claim adds n to the saves about to hold the instance and wakes the
// waiters.
func (g *Gate) claim(st *freezeState, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st.claims += n
	close(st.changed)
	st.changed = make(chan struct{})
}

// holders returns the instance's holders now.
func (g *Gate) holders(id string, st *freezeState) map[string]bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(st.holders)
}

// setHolder adds or removes a holder and wakes the waiters.
func (g *Gate) setHolder(st *freezeState, holder string, on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if on {
		st.holders[holder] = true
	} else {
		delete(st.holders, holder)
	}
	close(st.changed)
	st.changed = make(chan struct{})
}

// clearHolders drops every holder (st.op held).
func (g *Gate) clearHolders(st *freezeState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(st.holders)
	close(st.changed)
	st.changed = make(chan struct{})
}

// hold freezes the instance for holder, unless it is frozen already. When
// the freeze fails, the task is thawed again only if this call froze it: it
// was not found frozen, no other holder has it, and the failed Pause froze
// it anyway (a canceled Pause may). An instance someone else froze is never
// thawed by a failed freeze.
func (g *Gate) Hold(ctx context.Context, rt Freezer, id, holder string) error {
	st := g.ref(id)
	defer g.unref(id, st)
	if holder != HolderUser {
		g.claim(st, 1)
		defer g.claim(st, -1) // after setHolder: no moment with neither
	}
	st.op.Lock()
	defer st.op.Unlock()
	s, err := rt.Status(ctx, id)
	if err != nil {
		return fmt.Errorf("freeze %q: %w", id, err)
	}
	if !s.Exists || s.Task == "" {
		return fmt.Errorf("freeze %q: it has no running task: %w", id, errdefs.ErrFailedPrecondition)
	}
	others := g.holders(id, st)
	if len(others) > 0 && s.Task != "paused" {
		// Holders of a task that is not frozen are stale: the task was
		// stopped and started again (or thawed behind envd's back). Start
		// afresh, or this holder would read a running task as frozen.
		g.clearHolders(st)
		others = nil
	}
	if others[holder] {
		return nil
	}
	if len(others) == 0 {
		if s.Task == "paused" {
			st.ours = false // frozen by something else: not ours to thaw
		} else if err := rt.Pause(ctx, id); err != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if now, serr := rt.Status(cctx, id); serr == nil && now.Task == "paused" {
				if rerr := rt.Resume(cctx, id); rerr != nil {
					return fmt.Errorf("freeze %q: %w (and the thaw after it failed: %v)", id, err, rerr)
				}
			}
			return fmt.Errorf("freeze %q: %w", id, err)
		} else {
			st.ours = true
		}
	}
	g.setHolder(st, holder, true)
	return nil
}

// release ends holder's hold. The last holder thaws the task if the gate
// froze it; the user's resume (force) thaws it in any case. When other
// holders remain, the task stays frozen and release returns at once: use
// waitThawed to wait for the thaw.
func (g *Gate) Release(ctx context.Context, rt Freezer, id, holder string, force bool) error {
	st := g.ref(id)
	defer g.unref(id, st)
	st.op.Lock()
	defer st.op.Unlock()
	holders := g.holders(id, st)
	delete(holders, holder)
	if len(holders) == 0 && (st.ours || force) {
		if err := rt.Resume(ctx, id); err != nil {
			// Still frozen. The user's pause stays in force (the instance
			// goes back to Paused); a save's hold ends anyway, as the save
			// does, and the next start thaws a Running instance left frozen.
			if !force {
				g.setHolder(st, holder, false)
			}
			return fmt.Errorf("thaw %q: %w", id, err)
		}
	}
	if len(holders) == 0 {
		st.ours = false
	}
	g.setHolder(st, holder, false)
	return nil
}

// waitThawed returns when nobody holds the instance frozen and no save is
// about to.
func (g *Gate) WaitThawed(ctx context.Context, id string) error {
	return g.waitUntil(ctx, id, func(holders []string, claims int) bool { return len(holders) == 0 && claims == 0 })
}

// wait returns when no save of this process holds the instance frozen:
// execs wait out a save's freeze window (well under a second) instead of
// failing on a frozen task.
func (g *Gate) Wait(ctx context.Context, id string) error {
	return g.waitUntil(ctx, id, func(holders []string, _ int) bool {
		for _, h := range holders {
			if h != HolderUser {
				return false
			}
		}
		return true
	})
}

func (g *Gate) waitUntil(ctx context.Context, id string, done func(holders []string, claims int) bool) error {
	for {
		g.mu.Lock()
		var (
			holders []string
			claims  int
			changed <-chan struct{}
		)
		if st := g.instances[id]; st != nil {
			holders, claims, changed = slices.Collect(maps.Keys(st.holders)), st.claims, st.changed
		}
		g.mu.Unlock()
		if done(holders, claims) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// claimCapture records that what (a save's operation, a hibernation)
// captures the instance's layer on this node; a second capture of the same
// instance fails with ErrFailedPrecondition until release is called.
func (g *Gate) ClaimCapture(id, what string) (release func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if other, ok := g.captures[id]; ok && other != what {
		return nil, errdefs.WithDetails(fmt.Errorf("instance %q is being captured by %s; try again when it is done: %w", id, other, errdefs.ErrFailedPrecondition),
			map[string]any{"capture": other})
	}
	if g.captures == nil {
		g.captures = map[string]string{}
	}
	g.captures[id] = what
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.captures[id] == what {
			delete(g.captures, id)
		}
	}, nil
}
