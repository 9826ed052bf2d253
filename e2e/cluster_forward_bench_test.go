package e2e

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// BenchmarkRootClusterForwarding measures what forwarding to the owning
// node costs: an exec round trip (`true`, buffered) and a 100 MB file
// download (GET .../files), each asked of the node that runs the instance
// and of another node (which forwards), alternated within each iteration
// so that both sides see the same load. Run with
//
//	go test -run '^$' -bench BenchmarkRootClusterForwarding -benchtime 5x ./e2e/
func BenchmarkRootClusterForwarding(b *testing.B) {
	ctx := context.Background()
	if _, err := env.c.CordonNode(ctx, env.node.Name()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = env.c.UncordonNode(context.Background(), env.node.Name()) })
	owner := benchClusterNode(b, "bench-owner", "o")
	asker := benchClusterNode(b, "bench-asker", "k")
	p := fmt.Sprintf("fwdbench-%d", projectSeq.Add(1))
	if _, err := owner.CreateProject(ctx, types.CreateProjectRequest{Name: p, Base: fixtureBase}); err != nil {
		b.Fatal(err)
	}
	in, err := owner.CreateInstance(ctx, p, types.CreateInstanceRequest{NodeSelector: map[string]string{"zone": "o"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = owner.DeleteInstance(context.Background(), in.ID) })
	const size = 100 << 20
	if res, err := owner.Exec(ctx, in.ID, types.ExecRequest{Args: []string{"sh", "-c", fmt.Sprintf("head -c %d /dev/urandom > /root/big", size)}}); err != nil || res.ExitCode != 0 {
		b.Fatalf("write: %v %+v", err, res)
	}
	execOnce := func(c *client.Client) time.Duration {
		began := time.Now()
		res, err := c.Exec(ctx, in.ID, types.ExecRequest{Args: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %v %+v", err, res)
		}
		return time.Since(began)
	}
	download := func(c *client.Client) time.Duration {
		began := time.Now()
		r, err := c.ReadFile(ctx, in.ID, "/root/big", 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, r)
		r.Close()
		if err != nil || n != size {
			b.Fatalf("download: %d bytes, %v", n, err)
		}
		return time.Since(began)
	}
	// Warm both paths (connections, page cache) before measuring.
	execOnce(owner)
	execOnce(asker)
	download(owner)
	download(asker)

	const execsPerIteration = 10
	var execDirect, execFwd, dlDirect, dlFwd []time.Duration
	b.ResetTimer()
	for b.Loop() {
		for range execsPerIteration {
			execDirect = append(execDirect, execOnce(owner))
			execFwd = append(execFwd, execOnce(asker))
		}
		dlDirect = append(dlDirect, download(owner))
		dlFwd = append(dlFwd, download(asker))
	}
	b.StopTimer()
	med := func(ds []time.Duration) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	b.ReportMetric(med(execDirect), "exec-direct-ms")
	b.ReportMetric(med(execFwd), "exec-forwarded-ms")
	b.ReportMetric(med(execFwd)/med(execDirect), "exec-ratio")
	b.ReportMetric(med(dlDirect), "100MB-direct-ms")
	b.ReportMetric(med(dlFwd), "100MB-forwarded-ms")
	b.ReportMetric(med(dlFwd)/med(dlDirect), "100MB-ratio")
	b.Logf("exec direct %v\nexec forwarded %v\n100MB direct %v\n100MB forwarded %v", execDirect, execFwd, dlDirect, dlFwd)
}

// BenchmarkRootClusterUpThroughput measures how `up` throughput grows
// with nodes: for 1, 2 and 3 nodes (all of one machine), upsPerRound
// instances created at once, spread evenly (each asked of its node, with a
// node_selector), from the request to Running; instances per second and
// the ratio to one node. Run with
//
//	go test -run '^$' -bench BenchmarkRootClusterUpThroughput -benchtime 2x ./e2e/
func BenchmarkRootClusterUpThroughput(b *testing.B) {
	ctx := context.Background()
	if _, err := env.c.CordonNode(ctx, env.node.Name()); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = env.c.UncordonNode(context.Background(), env.node.Name()) })
	zones := []string{"u1", "u2", "u3"}
	var nodes []*client.Client
	for i, z := range zones {
		nodes = append(nodes, benchClusterNode(b, fmt.Sprintf("bench-up-%d", i+1), z))
	}
	p := fmt.Sprintf("upbench-%d", projectSeq.Add(1))
	if _, err := nodes[0].CreateProject(ctx, types.CreateProjectRequest{Name: p, Base: fixtureBase}); err != nil {
		b.Fatal(err)
	}
	// Every node pulls the base once: the rounds measure starts, not pulls.
	for i, c := range nodes {
		in, err := c.CreateInstance(ctx, p, types.CreateInstanceRequest{NodeSelector: map[string]string{"zone": zones[i]}})
		if err != nil {
			b.Fatal(err)
		}
		_, _ = c.DeleteInstance(ctx, in.ID)
	}
	const upsPerRound = 6
	round := func(k int) float64 {
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			ids []struct {
				c  *client.Client
				id string
			}
		)
		began := time.Now()
		for i := range upsPerRound {
			c, z := nodes[i%k], zones[i%k]
			wg.Go(func() {
				in, err := c.CreateInstance(ctx, p, types.CreateInstanceRequest{NodeSelector: map[string]string{"zone": z}})
				if err != nil || in.State != types.StateRunning {
					b.Errorf("up on %s: %v", z, err)
					return
				}
				mu.Lock()
				ids = append(ids, struct {
					c  *client.Client
					id string
				}{c, in.ID})
				mu.Unlock()
			})
		}
		wg.Wait()
		took := time.Since(began)
		for _, x := range ids {
			_, _ = x.c.DeleteInstance(ctx, x.id)
		}
		return float64(upsPerRound) / took.Seconds()
	}
	rates := map[int][]float64{}
	b.ResetTimer()
	for b.Loop() {
		for k := 1; k <= 3; k++ {
			rates[k] = append(rates[k], round(k))
		}
	}
	b.StopTimer()
	med := func(xs []float64) float64 {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[len(s)/2]
	}
	for k := 1; k <= 3; k++ {
		b.ReportMetric(med(rates[k]), fmt.Sprintf("ups/s-%dnode", k))
	}
	b.ReportMetric(med(rates[3])/med(rates[1]), "ratio-3to1")
	b.Logf("instances per second by node count: %v", rates)
}
