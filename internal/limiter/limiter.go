// Package limiter bounds how much concurrent work one tenant may hold on a
// node: a counting semaphore per (tenant, kind), and optionally one per kind
// for all tenants of the node together.
//
// Terms:
//
//   - kind: what is counted ("saves", "builds", "exec", "events"), each with
//     its own Limit.
//   - slot: one unit of a kind held by a tenant, from Acquire until the
//     release function it returned is called.
//
// Counting is in memory and per node; a node restart forgets every slot,
// which is right because the work holding them ended with the process.
package limiter

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/envd-dev/envd/errdefs"
)

// Limit of one kind.
type Limit struct {
	// Max slots one tenant may hold at once; 0 or negative = unlimited.
	Max int
	// NodeMax slots all tenants together may hold at once on this node;
	// 0 or negative = unlimited. A tenant under Max is refused past it too.
	NodeMax int
	// RetryAfter is the wait suggested to a refused client (the Retry-After
	// header); at least one second is sent.
	RetryAfter time.Duration
}

// Limiter counts slots. The zero value and a nil *Limiter limit nothing. It
// is safe for concurrent use.
type Limiter struct {
	mu     sync.Mutex
	limits map[string]Limit
	inUse  map[slot]int
	node   map[string]int // slots of each kind held by all tenants
}

type slot struct{ tenant, kind string }

// New returns a limiter with limits per kind; kinds not in limits are
// unlimited.
func New(limits map[string]Limit) *Limiter {
	l := &Limiter{limits: map[string]Limit{}, inUse: map[slot]int{}, node: map[string]int{}}
	for k, v := range limits {
		l.limits[k] = v
	}
	return l
}

// Acquire takes a slot of kind for tenant. It never waits: past the limit it
// returns an *ExhaustedError (kind errdefs.ErrResourceExhausted). Otherwise
// the caller must call release exactly when the work ends, on every path
// (defer it); calling it more than once is harmless.
func (l *Limiter) Acquire(tenant, kind string) (release func(), err error) {
	if l == nil {
		return func() {}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lim, ok := l.limits[kind]
	if !ok || (lim.Max <= 0 && lim.NodeMax <= 0) {
		return func() {}, nil
	}
	k := slot{tenant, kind}
	if n := l.inUse[k]; lim.Max > 0 && n >= lim.Max {
		return nil, &ExhaustedError{Tenant: tenant, Kind: kind, Limit: lim.Max, Wait: lim.RetryAfter}
	}
	if lim.NodeMax > 0 && l.node[kind] >= lim.NodeMax {
		return nil, &ExhaustedError{Tenant: tenant, Kind: kind, Limit: lim.NodeMax, Wait: lim.RetryAfter, Node: true}
	}
	l.inUse[k]++
	l.node[kind]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.inUse[k]--; l.inUse[k] <= 0 {
				delete(l.inUse, k)
			}
			if l.node[kind]--; l.node[kind] <= 0 {
				delete(l.node, kind)
			}
		})
	}, nil
}

// InUse is how many slots of kind tenant holds now.
func (l *Limiter) InUse(tenant, kind string) int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.inUse[slot{tenant, kind}]
}

// ExhaustedError is a refused Acquire.
type ExhaustedError struct {
	Tenant string
	Kind   string
	Limit  int
	Wait   time.Duration
	// Node is set when the node's limit (all tenants together) refused.
	Node bool
}

func (e *ExhaustedError) Error() string {
	if e.Node {
		return fmt.Sprintf("this node already serves its limit of %d concurrent %s (all tenants together): %v",
			e.Limit, e.Kind, errdefs.ErrResourceExhausted)
	}
	return fmt.Sprintf("tenant %q already holds its limit of %d concurrent %s on this node: %v",
		e.Tenant, e.Limit, e.Kind, errdefs.ErrResourceExhausted)
}

func (e *ExhaustedError) Unwrap() error { return errdefs.ErrResourceExhausted }

// RetryAfter is the suggested wait, in whole seconds and at least one.
func (e *ExhaustedError) RetryAfter() time.Duration {
	s := math.Ceil(e.Wait.Seconds())
	return time.Duration(max(1, s)) * time.Second
}

// Details are the error body's machine-readable numbers.
func (e *ExhaustedError) Details() map[string]any {
	d := map[string]any{"kind": e.Kind, "limit": e.Limit, "retry_after_seconds": int(e.RetryAfter().Seconds())}
	if e.Node {
		d["scope"] = "node"
	}
	return d
}
