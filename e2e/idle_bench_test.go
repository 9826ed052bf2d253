package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
)

// BenchmarkRootIdleWake measures the time from an exec with wake to a
// stopped instance to its first answer (cat of a file it wrote), as a
// client sees it: hibernated (the idle action hibernate, and every idle
// stop of an instance that is not retained) woken on the node that
// hibernated it and on another node, and retained-stopped (action stop)
// on its node. Run with
//
//	go test -run '^$' -bench BenchmarkRootIdleWake -benchtime 5x ./e2e/
//
// Each sub-benchmark reports its median (median-ms) besides the mean.
func BenchmarkRootIdleWake(b *testing.B) {
	ctx := context.Background()
	_, ca := startBenchNode(b, "node-wake-a")
	_, cb := startBenchNode(b, "node-wake-b")
	p := fmt.Sprintf("wakebench-%d", projectSeq.Add(1))
	if _, err := ca.CreateProject(ctx, types.CreateProjectRequest{Name: p, Base: fixtureBase}); err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name      string
		hibernate bool
		other     bool
		noWake    bool // start, then exec: the reference without the wake path
	}{
		{"hibernated/same-node", true, false, false},
		{"hibernated/other-node", true, true, false},
		{"stopped/same-node", false, false, false},
		{"stopped/start-then-exec", false, false, true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			in, err := ca.CreateInstance(ctx, p, types.CreateInstanceRequest{Retain: true})
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _, _ = ca.DeleteInstance(context.Background(), in.ID) }()
			if _, err := ca.Exec(ctx, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "echo hello > /root/wake.txt"}}); err != nil {
				b.Fatal(err)
			}
			home, away := ca, cb // home: the node it is on now
			var runs []time.Duration
			b.ResetTimer()
			for b.Loop() {
				b.StopTimer()
				if _, err := home.StopInstance(ctx, in.ID); err != nil {
					b.Fatal(err)
				}
				if tc.hibernate {
					if _, err := home.HibernateInstance(ctx, in.ID); err != nil {
						b.Fatal(err)
					}
				}
				waker := home
				if tc.other {
					waker = away
				}
				b.StartTimer()
				began := time.Now()
				if tc.noWake {
					if _, err := waker.StartInstance(ctx, in.ID); err != nil {
						b.Fatal(err)
					}
				}
				res, err := waker.Exec(ctx, in.ID, types.ExecRequest{Args: []string{"cat", "/root/wake.txt"}, Wake: !tc.noWake})
				took := time.Since(began)
				b.StopTimer()
				if err != nil || res.Stdout != "hello\n" {
					b.Fatalf("exec with wake: %v %q", err, res.Stdout)
				}
				runs = append(runs, took)
				if waker != home {
					home, away = away, home
				}
				b.StartTimer()
			}
			slices.Sort(runs)
			b.ReportMetric(float64(runs[len(runs)/2].Microseconds())/1000, "median-ms")
			b.Logf("%s: runs %v", tc.name, runs)
		})
	}
}

// startBenchNode starts a node that joins the shared node's database and
// registry, for a benchmark; it keeps the instances asked of it (placement
// local) unless set changes the configuration.
func startBenchNode(b *testing.B, name string, set ...func(*node.Config)) (*node.Node, *client.Client) {
	b.Helper()
	dir, err := os.MkdirTemp("", "envd-e2e-"+name+"-")
	if err != nil {
		b.Fatal(err)
	}
	_ = os.Chmod(dir, 0o755)
	cfg := node.Config{DataDir: filepath.Join(dir, "data"), Node: name, DSN: env.node.DSN(), DefaultTTL: time.Hour,
		Registry: env.node.RegistryAddr(), WrapAPI: env.spec.Wrap, Placement: envd.PlacementLocal}
	cfg.RegistryCredentialFile, _ = env.node.RegistryCredentialFiles()
	for _, f := range set {
		f(&cfg)
	}
	n, err := node.Start(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n.Shutdown(sctx)
		_ = os.RemoveAll(dir)
	})
	c, err := client.New(n.URL, n.Token)
	if err != nil {
		b.Fatal(err)
	}
	return n, c
}
