package envd

import (
	"context"
	"sync"
)

// freezeGate lets execs wait out a save's freeze window instead of failing
// on a frozen task: a save freezes for well under a second, and a user's
// command should only be delayed by it.
type freezeGate struct {
	mu     sync.Mutex
	frozen map[string]chan struct{} // instance -> closed on thaw
}

// freeze marks id frozen and returns the function that thaws it.
func (g *freezeGate) freeze(id string) (thaw func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.frozen == nil {
		g.frozen = map[string]chan struct{}{}
	}
	ch := make(chan struct{})
	g.frozen[id] = ch
	return func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if g.frozen[id] == ch {
			delete(g.frozen, id)
		}
		close(ch)
	}
}

// wait returns when id is not frozen by a save of this process.
func (g *freezeGate) wait(ctx context.Context, id string) error {
	for {
		g.mu.Lock()
		ch := g.frozen[id]
		g.mu.Unlock()
		if ch == nil {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
