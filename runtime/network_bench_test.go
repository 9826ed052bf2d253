package runtime

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkRootStartNetworkRules measures instance creation (container,
// snapshot, network namespace, CNI attachment, task start) with the
// network isolation (isolated bridge port, per-instance firewall chain)
// and without it, alternating the two, and reports the medians and their
// ratio. Run with -benchtime=Nx for N creations per variant.
func BenchmarkRootStartNetworkRules(b *testing.B) {
	env := newTestEnvNet(b, NetworkConfig{Subnet: freeSubnet(b)})
	ctx := context.Background()
	allow, err := ParseEgress("allow:192.0.2.0/24,198.51.100.7")
	require.NoError(b, err)
	// A few instances of other groups running, as on a busy node.
	for i := range 4 {
		require.NoError(b, env.rt.Create(ctx, InstanceSpec{ID: fmt.Sprintf("bg%d", i), Image: env.ref, Network: NetworkPolicy{Group: fmt.Sprint(i)}}))
	}
	var with, without []time.Duration
	b.ResetTimer()
	for i := 0; i < 2*b.N; i++ {
		off := i%2 == 1
		env.rt.net.rulesOff = off
		id := fmt.Sprintf("s%d", i)
		start := time.Now()
		err := env.rt.Create(ctx, InstanceSpec{ID: id, Image: env.ref, Network: NetworkPolicy{Group: "g", Egress: allow}})
		d := time.Since(start)
		require.NoError(b, err)
		if off {
			without = append(without, d)
		} else {
			with = append(with, d)
		}
		b.StopTimer()
		require.NoError(b, env.rt.Remove(ctx, id))
		b.StartTimer()
	}
	env.rt.net.rulesOff = false
	mw, mo := median(with), median(without)
	b.ReportMetric(float64(mw.Microseconds())/1000, "ms/start-rules")
	b.ReportMetric(float64(mo.Microseconds())/1000, "ms/start-norules")
	b.ReportMetric(float64(mw)/float64(mo), "ratio")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
