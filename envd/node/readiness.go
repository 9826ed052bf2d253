package node

import (
	"context"
	"fmt"

	"github.com/envd-dev/envd/api"
)

// pinger is a part of the node that can say whether it answers.
type pinger interface {
	Ping(ctx context.Context) error
}

// readiness is what GET /readyz checks: each part the node's work needs,
// asked directly (a query, a registry /v2/ request with the node's
// credential, a containerd version call, the lazy snapshotter's socket when
// restores use it). The API bounds each check.
func (n *Node) readiness() map[string]api.Checker {
	checks := map[string]api.Checker{
		"postgresql": check(n.db.store.Pool()),
		"registry":   check(n.reg.client),
		"containerd": api.CheckFunc(func(ctx context.Context) error {
			if _, err := n.rt.Client().Version(ctx); err != nil {
				return fmt.Errorf("containerd at %s: %w", n.ctrd.addr, err)
			}
			return nil
		}),
	}
	if n.ctrd.stargz != nil && n.rt.LazySnapshotter() != "" {
		checks["snapshotter"] = check(n.ctrd.stargz)
	}
	return checks
}

func check(p pinger) api.Checker { return api.CheckFunc(p.Ping) }
