package runtime

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkRootStartHardening measures instance start latency (Create: the
// container, its snapshot, network and init task, until the task runs)
// with the hardening and limits and without, alternating the two so that
// machine load hits both alike. It reports the medians and their ratio.
//
//	go test -run '^$' -bench BenchmarkRootStartHardening -benchtime 20x ./runtime/
func BenchmarkRootStartHardening(b *testing.B) {
	env := newTestEnv(b, freeSubnet(b))
	ctx := context.Background()
	limits := Limits{MemoryBytes: 512 << 20, Pids: 512, CPUWeight: 100, CPUQuota: 1, IOWeight: 100}
	var hardened, plain []time.Duration
	start := func(id string, unhardened bool) time.Duration {
		b.Helper()
		env.rt.unhardened = unhardened
		t0 := time.Now()
		require.NoError(b, env.rt.Create(ctx, InstanceSpec{ID: id, Image: env.ref, Limits: limits}))
		d := time.Since(t0)
		require.NoError(b, env.rt.Remove(ctx, id))
		return d
	}
	b.ResetTimer()
	for i := range b.N {
		hardened = append(hardened, start(fmt.Sprintf("h%d", i), false))
		plain = append(plain, start(fmt.Sprintf("p%d", i), true))
	}
	b.StopTimer()
	env.rt.unhardened = false
	mh, mp := median(hardened), median(plain)
	b.ReportMetric(float64(mh.Microseconds())/1000, "hardened-ms")
	b.ReportMetric(float64(mp.Microseconds())/1000, "plain-ms")
	b.ReportMetric(float64(mh)/float64(mp), "ratio")
}
