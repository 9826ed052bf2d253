package envd_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/metrics"
	"github.com/envd-dev/envd/versions"
)

// BenchmarkMetricsScrape measures one scrape of a node with 100 instances
// and a save, an operation and API traffic on 20 routes recorded: the
// client_golang exposition, and the hand-written text it replaced (kept
// here, as it was, for the comparison).
//
//	go test -run '^$' -bench BenchmarkMetricsScrape -benchtime 2000x ./envd/
func BenchmarkMetricsScrape(b *testing.B) {
	e := newCoreEnv(b, nil)
	m := metrics.New(testNode, e.store.Instances, e.cfg.DataDir)
	e.cfg.Observer = m
	e.restart()
	e.project("p")
	var first types.Instance
	for i := 0; i < 100; i++ {
		in := e.instance("p", types.CreateInstanceRequest{})
		if i == 0 {
			first = in
		}
	}
	e.write(first.ID, "/etc/x", "x")
	e.saved(first.ID, types.SaveRequest{})
	for i := 0; i < 20; i++ {
		m.ObserveRequest(http.MethodGet, fmt.Sprintf("/v1/route-%d", i), http.StatusOK, time.Millisecond)
	}

	for _, enc := range []string{"", "gzip"} {
		name := "client_golang"
		if enc != "" {
			name += "_" + enc // as Prometheus asks
		}
		b.Run(name, func(b *testing.B) {
			h := m.Handler()
			var size int
			for b.Loop() {
				rec := httptest.NewRecorder()
				req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
				if enc != "" {
					req.Header.Set("Accept-Encoding", enc)
				}
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("scrape: %d", rec.Code)
				}
				size = rec.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/scrape")
		})
	}
	b.Run("hand_written", func(b *testing.B) {
		var size int
		for b.Loop() {
			text, err := handWrittenMetrics(e.ctx, e.store, testNode)
			if err != nil {
				b.Fatal(err)
			}
			size = len(text)
		}
		b.ReportMetric(float64(size), "bytes/scrape")
	})
}

// handWrittenMetrics is the /metrics text before client_golang (the save
// totals were kept in memory; they cost nothing to read and are zero here).
func handWrittenMetrics(ctx context.Context, store *versions.Store, node string) (string, error) {
	counts, err := store.Instances.CountInstances(ctx, node)
	if err != nil {
		return "", err
	}
	var b strings.Builder
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
	fmt.Fprintf(&b, "# HELP envd_saves_total Saves finished by this process.\n# TYPE envd_saves_total counter\n")
	fmt.Fprintf(&b, "envd_saves_total{node=%q} %d\n", node, 1)
	fmt.Fprintf(&b, "envd_save_conflicts_total{node=%q} %d\n", node, 0)
	for _, name := range []string{"freeze", "encode", "push", "total"} {
		fmt.Fprintf(&b, "envd_save_%s_seconds_sum{node=%q} %.3f\n", name, node, 0.0)
	}
	return b.String(), nil
}
