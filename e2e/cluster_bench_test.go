package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
)

// BenchmarkRootClusterRestoreAffinity measures what cache affinity saves:
// the time from a create to the first full read of a 64 MiB file of the
// version (md5sum), on a node that never pulled the version (what
// placement without affinity may pick) and on one that pulled it before
// (what affinity picks). Each iteration makes a new version on a producer
// node, so the uncached restore is a first one every time. Run with
//
//	go test -run '^$' -bench BenchmarkRootClusterRestoreAffinity -benchtime 3x ./e2e/
func BenchmarkRootClusterRestoreAffinity(b *testing.B) {
	ctx := context.Background()
	if _, err := env.c.CordonNode(ctx, env.node.Name()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = env.c.UncordonNode(context.Background(), env.node.Name()) })
	cp := benchClusterNode(b, "bench-producer", "p")
	ca := benchClusterNode(b, "bench-restore", "r")
	p := fmt.Sprintf("affinitybench-%d", projectSeq.Add(1))
	if _, err := ca.CreateProject(ctx, types.CreateProjectRequest{Name: p, Base: fixtureBase}); err != nil {
		b.Fatal(err)
	}
	on := func(zone string) types.CreateInstanceRequest {
		return types.CreateInstanceRequest{NodeSelector: map[string]string{"zone": zone}}
	}
	restore := func() time.Duration {
		began := time.Now()
		in, err := ca.CreateInstance(ctx, p, on("r"))
		if err != nil {
			b.Fatal(err)
		}
		res, err := ca.Exec(ctx, in.ID, types.ExecRequest{Args: []string{"md5sum", "/root/big"}})
		took := time.Since(began)
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("read the version's file: %v %+v", err, res)
		}
		if _, err := ca.DeleteInstance(ctx, in.ID); err != nil {
			b.Fatal(err)
		}
		return took
	}
	var cold, warm []time.Duration
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		src, err := cp.CreateInstance(ctx, p, on("p"))
		if err != nil {
			b.Fatal(err)
		}
		if res, err := cp.Exec(ctx, src.ID, types.ExecRequest{Args: []string{"sh", "-c", "head -c 67108864 /dev/urandom > /root/big"}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("write: %v %+v", err, res)
		}
		op, err := cp.Save(ctx, src.ID, types.SaveRequest{Message: "bench"}, "")
		if err == nil {
			op, err = cp.WaitOperation(ctx, op.ID, nil)
		}
		if err != nil || op.State != types.OpSucceeded {
			b.Fatalf("save: %v %+v", err, op.Error)
		}
		_, _ = cp.DeleteInstance(ctx, src.ID)
		b.StartTimer()
		cold = append(cold, restore())
		warm = append(warm, restore())
	}
	b.StopTimer()
	med := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.ReportMetric(med(cold), "uncached-median-ms")
	b.ReportMetric(med(warm), "cached-median-ms")
	b.Logf("uncached %v, cached %v", cold, warm)
}

// benchClusterNode starts a node joining the shared node's database and
// registry with label zone=ZONE, placing by the cluster's policy.
func benchClusterNode(b *testing.B, name, zone string) *client.Client {
	_, c := startBenchNode(b, name, func(cfg *node.Config) {
		cfg.PrefetchWindow = -1
		cfg.Labels = map[string]string{"zone": zone}
		cfg.Placement = envd.PlacementSpread
	})
	return c
}
