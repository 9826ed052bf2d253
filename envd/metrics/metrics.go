// Package metrics owns envd's Prometheus metrics: one registry per node
// (never the global default), the Go and process collectors, and the
// observers the core's parts report to (save.Observer, lifecycle.Observer,
// ops.Observer, api.RequestObserver). The core does not import Prometheus;
// it calls those small interfaces, and Metrics implements them.
//
// Every series carries the label node. The families, their types and
// labels are listed in docs/api.md ("Metrics").
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/versions"
)

// Store is what the instance gauges read at scrape time.
type Store interface {
	CountInstances(ctx context.Context, node string) ([]versions.InstanceCount, error)
}

// Buckets of the histograms, in seconds.
var (
	// phaseBuckets span a save phase: 10ms (an empty layer) to ~4 min (a
	// large layer pushed to a slow registry).
	phaseBuckets = prometheus.ExponentialBuckets(0.01, 2.5, 12)
	// restoreBuckets span create to Running: 50ms to ~100s (a full pull).
	restoreBuckets = prometheus.ExponentialBuckets(0.05, 2, 12)
	// requestBuckets are Prometheus's defaults: 5ms to 10s. Long-lived
	// requests (exec WebSockets, event streams) land in +Inf.
	requestBuckets = prometheus.DefBuckets
)

// Save results, the values of envd_saves_total's label result.
const (
	ResultCurrent  = "current"
	ResultConflict = "conflict"
	ResultFailed   = "failed"
)

// Metrics is one node's metrics. Its methods are safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	saves          *prometheus.CounterVec
	saveConflicts  prometheus.Counter
	savePhases     map[string]prometheus.Observer
	pushErrors     prometheus.Counter
	lastPush       prometheus.Gauge
	restores       *prometheus.HistogramVec
	failures       *prometheus.CounterVec
	operations     *prometheus.CounterVec
	operationTimes *prometheus.HistogramVec
	requests       *prometheus.HistogramVec
	idled          *prometheus.CounterVec
}

// New makes node's metrics: its instances counted in store at each scrape,
// the disk headroom of dataDir, the memory of the machine.
func New(node string, store Store, dataDir string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), savePhases: map[string]prometheus.Observer{}}
	r := prometheus.WrapRegistererWith(prometheus.Labels{"node": node}, m.reg)
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	m.saves = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "envd_saves_total", Help: "Saves finished by this process, by result: current (switched), conflict (ready, not current), failed.",
	}, []string{"result"})
	m.saveConflicts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "envd_save_conflicts_total", Help: "Saves whose version is ready but not current (same as envd_saves_total{result=\"conflict\"}).",
	})
	for _, result := range []string{ResultCurrent, ResultConflict, ResultFailed} {
		m.saves.WithLabelValues(result) // every result is a series from the start, at 0
	}
	r.MustRegister(m.saves, m.saveConflicts)
	for _, p := range []struct{ name, help string }{
		{"spool", "Reading the upper dir into the spool, both passes."},
		{"freeze", "The freeze window: how long the instance was frozen."},
		{"encode", "Compressing the spooled layer."},
		{"push", "Pushing and verifying the version image."},
		{"commit", "Recording the version and switching current."},
		{"total", "The whole save, from the job's start to the commit."},
	} {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "envd_save_" + p.name + "_seconds", Help: "Save phase: " + p.help, Buckets: phaseBuckets,
		})
		r.MustRegister(h)
		m.savePhases[p.name] = h
	}
	m.pushErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "envd_registry_push_errors_total", Help: "Version images (saves, builds, hibernations) whose push to the registry failed.",
	})
	m.lastPush = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "envd_registry_last_push_success_timestamp_seconds", Help: "Unix time of the last version image pushed and verified; 0 = none since start.",
	})
	m.restores = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "envd_restore_seconds", Help: "Time from an instance's creation (or wake from hibernation) to Running, when its first command can run.",
		Buckets: restoreBuckets,
	}, []string{"path"})
	m.failures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "envd_instance_failures_total", Help: "Instances this node marked Failed, by reason (node_lost, task_exited, provision_failed, ...).",
	}, []string{"reason"})
	m.operations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "envd_operations_total", Help: "Operations finished by this process, by kind and outcome (succeeded, failed, canceled).",
	}, []string{"kind", "outcome"})
	m.operationTimes = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "envd_operation_seconds", Help: "How long operations ran, by kind.", Buckets: phaseBuckets,
	}, []string{"kind"})
	m.requests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "envd_http_request_duration_seconds", Help: "API requests by method, route template and status code.", Buckets: requestBuckets,
	}, []string{"method", "route", "code"})
	r.MustRegister(m.pushErrors, m.lastPush, m.restores, m.failures, m.operations, m.operationTimes, m.requests)
	m.idled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "envd_idle_actions_total", Help: "Idle actions (stop, hibernate) by result: done, canceled (activity came), failed (the instance runs on).",
	}, []string{"action", "result"})
	r.MustRegister(m.idled)
	r.MustRegister(&instances{node: node, store: store}, &headroom{dataDir: dataDir, meminfo: "/proc/meminfo"})
	return m
}

// Handler serves the registry in the Prometheus text format (or
// OpenMetrics when asked). A collector that fails (the store is down) is
// left out of that scrape and the rest is served.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// Registry is the node's registry, for tests and for more collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Saved records a finished save (save.Observer).
func (m *Metrics) Saved(res types.SaveResult) {
	result := ResultCurrent
	if res.Conflict {
		result = ResultConflict
		m.saveConflicts.Inc()
	}
	m.saves.WithLabelValues(result).Inc()
	for name, ms := range map[string]int64{
		"spool": res.SpoolMS, "freeze": res.FreezeMS, "encode": res.EncodeMS, "push": res.PushMS, "commit": res.CommitMS, "total": res.TotalMS,
	} {
		m.savePhases[name].Observe(float64(ms) / 1000)
	}
}

// SaveFailed records a save that ended with an error (save.Observer).
func (m *Metrics) SaveFailed(error) { m.saves.WithLabelValues(ResultFailed).Inc() }

// Pushed records a version image push, err nil when it was pushed and
// verified (save.Observer).
func (m *Metrics) Pushed(err error) {
	if err != nil {
		m.pushErrors.Inc()
		return
	}
	m.lastPush.SetToCurrentTime()
}

// Restored records how long an instance took to run (lifecycle.Observer);
// path is "create" or "wake".
func (m *Metrics) Restored(path string, d time.Duration) {
	m.restores.WithLabelValues(path).Observe(d.Seconds())
}

// InstanceFailed records an instance marked Failed (lifecycle.Observer).
func (m *Metrics) InstanceFailed(reason string) { m.failures.WithLabelValues(reason).Inc() }

// Idled records an idle action's end (lifecycle.Observer).
func (m *Metrics) Idled(action, result string) { m.idled.WithLabelValues(action, result).Inc() }

// OperationFinished records an operation's end (ops.Observer).
func (m *Metrics) OperationFinished(kind types.OpKind, state types.OpState, d time.Duration) {
	m.operations.WithLabelValues(string(kind), string(state)).Inc()
	m.operationTimes.WithLabelValues(string(kind)).Observe(d.Seconds())
}

// ObserveRequest records an API request (api.RequestObserver). route is
// the route's template (/v1/instances/:id), never the raw path.
func (m *Metrics) ObserveRequest(method, route string, status int, d time.Duration) {
	m.requests.WithLabelValues(method, route, strconv.Itoa(status)).Observe(d.Seconds())
}
