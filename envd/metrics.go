package envd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
)

// Metrics renders the node's metrics in the Prometheus text format: the
// instances of this node by state (and how many have no expiry: a TTL of
// "none" is asked for explicitly and counted here), and the saves of this
// process with their freeze windows.
func (s *Service) Metrics(ctx context.Context, p types.Principal) (string, error) {
	if !p.Admin {
		return "", fmt.Errorf("metrics need an admin token: %w", errdefs.ErrPermissionDenied)
	}
	counts, err := s.store.CountInstances(ctx, s.cfg.Node)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	node := s.cfg.Node
	fmt.Fprintf(&b, "# HELP envd_instances Instances on this node by state.\n# TYPE envd_instances gauge\n")
	noExpiry := 0
	for _, c := range counts {
		fmt.Fprintf(&b, "envd_instances{node=%q,state=%q} %d\n", node, c.State, c.Count)
		if c.State != types.StateTerminated && c.State != types.StateFailed {
			noExpiry += c.NoExpiry
		}
	}
	fmt.Fprintf(&b, "# HELP envd_instances_without_expiry Live instances started with ttl none.\n# TYPE envd_instances_without_expiry gauge\n")
	fmt.Fprintf(&b, "envd_instances_without_expiry{node=%q} %d\n", node, noExpiry)
	st := s.saver.Stats()
	fmt.Fprintf(&b, "# HELP envd_saves_total Saves finished by this process.\n# TYPE envd_saves_total counter\n")
	fmt.Fprintf(&b, "envd_saves_total{node=%q} %d\n", node, st.Count)
	fmt.Fprintf(&b, "envd_save_conflicts_total{node=%q} %d\n", node, st.Conflicts)
	for _, m := range []struct {
		name string
		d    time.Duration
	}{{"freeze", st.Freeze}, {"encode", st.Encode}, {"push", st.Push}, {"total", st.Total}} {
		fmt.Fprintf(&b, "envd_save_%s_seconds_sum{node=%q} %.3f\n", m.name, node, m.d.Seconds())
	}
	return b.String(), nil
}
