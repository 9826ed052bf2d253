package envd_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/metrics"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
)

const scrapeToken = "core-test-scrape-token"

// metricsEnv is a core env whose service reports to metrics, served by
// the real API on a loopback server.
type metricsEnv struct {
	*coreEnv
	url         string
	tenantToken string
}

func newMetricsEnv(t *testing.T) *metricsEnv {
	e := newCoreEnv(t, nil)
	m := metrics.New(testNode, e.store.Instances, e.cfg.DataDir)
	e.cfg.Observer = m
	e.restart()
	h, err := api.New(node.APIParts(e.svc), api.WithMetrics(m.Handler(), scrapeToken), api.WithRequestObserver(m))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	tok, err := e.svc.Parts().Tokens.CreateToken(e.ctx, e.admin, testTenant, types.CreateTokenRequest{})
	require.NoError(t, err)
	return &metricsEnv{coreEnv: e, url: srv.URL, tenantToken: tok.Token}
}

// get sends GET path with token ("" = none) and returns the response.
func (e *metricsEnv) get(path, token string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.ctx, http.MethodGet, e.url+path, nil)
	require.NoError(e.t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(e.t, err)
	return resp
}

// scrape reads /metrics with the scrape token and parses it with
// Prometheus's own text parser.
func (e *metricsEnv) scrape() map[string]*dto.MetricFamily {
	e.t.Helper()
	return scrapeURL(e.t, e.ctx, e.url+"/metrics", scrapeToken)
}

func scrapeURL(t testing.TB, ctx context.Context, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// series returns the family's series whose labels include want.
func series(fam *dto.MetricFamily, want map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		ok := true
		for k, v := range want {
			ok = ok && labels[k] == v
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

func TestCoreMetricsFamiliesAndSave(t *testing.T) {
	e := newMetricsEnv(t)
	e.project("p")
	in := e.instance("p", types.CreateInstanceRequest{TTL: "none"})
	resp := e.get("/v1/instances/"+in.ID, e.tenantToken)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	before := e.scrape()
	for name, typ := range map[string]dto.MetricType{
		"envd_instances":                                    dto.MetricType_GAUGE,
		"envd_instances_without_expiry":                     dto.MetricType_GAUGE,
		"envd_saves_total":                                  dto.MetricType_COUNTER,
		"envd_save_conflicts_total":                         dto.MetricType_COUNTER,
		"envd_save_spool_seconds":                           dto.MetricType_HISTOGRAM,
		"envd_save_freeze_seconds":                          dto.MetricType_HISTOGRAM,
		"envd_save_encode_seconds":                          dto.MetricType_HISTOGRAM,
		"envd_save_push_seconds":                            dto.MetricType_HISTOGRAM,
		"envd_save_commit_seconds":                          dto.MetricType_HISTOGRAM,
		"envd_save_total_seconds":                           dto.MetricType_HISTOGRAM,
		"envd_restore_seconds":                              dto.MetricType_HISTOGRAM,
		"envd_http_request_duration_seconds":                dto.MetricType_HISTOGRAM,
		"envd_registry_push_errors_total":                   dto.MetricType_COUNTER,
		"envd_registry_last_push_success_timestamp_seconds": dto.MetricType_GAUGE,
		"envd_disk_free_bytes":                              dto.MetricType_GAUGE,
		"envd_disk_size_bytes":                              dto.MetricType_GAUGE,
		"envd_memory_available_bytes":                       dto.MetricType_GAUGE,
		"envd_memory_total_bytes":                           dto.MetricType_GAUGE,
		"go_goroutines":                                     dto.MetricType_GAUGE,
		"process_cpu_seconds_total":                         dto.MetricType_COUNTER,
	} {
		fam := before[name]
		if assert.NotNil(t, fam, "family %s", name) {
			assert.Equal(t, typ, fam.GetType(), "type of %s", name)
			for _, m := range fam.GetMetric() {
				assert.Len(t, series(&dto.MetricFamily{Metric: []*dto.Metric{m}}, map[string]string{"node": testNode}), 1, "%s has the node label", name)
			}
		}
	}
	running := series(before["envd_instances"], map[string]string{"state": string(types.StateRunning)})
	require.Len(t, running, 1)
	assert.Equal(t, 1.0, running[0].GetGauge().GetValue())
	assert.Equal(t, 1.0, before["envd_instances_without_expiry"].GetMetric()[0].GetGauge().GetValue())
	restores := series(before["envd_restore_seconds"], map[string]string{"path": "create"})
	require.Len(t, restores, 1)
	assert.Equal(t, uint64(1), restores[0].GetHistogram().GetSampleCount())
	assert.Greater(t, before["envd_disk_free_bytes"].GetMetric()[0].GetGauge().GetValue(), 0.0)
	assert.Greater(t, before["envd_memory_available_bytes"].GetMetric()[0].GetGauge().GetValue(), 0.0)

	// API latency is by route template: the id is not a label value.
	reqs := series(before["envd_http_request_duration_seconds"], map[string]string{"method": "GET", "route": "/v1/instances/:i", "code": "200"})
	require.Len(t, reqs, 1)
	assert.Equal(t, uint64(1), reqs[0].GetHistogram().GetSampleCount())
	for _, m := range before["envd_http_request_duration_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			assert.NotContains(t, l.GetValue(), in.ID, "no raw path in a label")
		}
	}
	for _, name := range []string{"spool", "freeze", "encode", "push", "commit", "total"} {
		assert.Zero(t, before["envd_save_"+name+"_seconds"].GetMetric()[0].GetHistogram().GetSampleCount(), "no save yet: %s", name)
	}

	e.write(in.ID, "/etc/saved", "x")
	res := e.saved(in.ID, types.SaveRequest{})
	require.True(t, res.Current)

	after := e.scrape()
	for _, name := range []string{"spool", "freeze", "encode", "push", "commit", "total"} {
		h := after["envd_save_"+name+"_seconds"].GetMetric()[0].GetHistogram()
		assert.Equal(t, uint64(1), h.GetSampleCount(), "a save moves %s", name)
	}
	total := after["envd_save_total_seconds"].GetMetric()[0].GetHistogram().GetSampleSum()
	assert.InDelta(t, float64(res.TotalMS)/1000, total, 0.0011, "the histogram holds the save's own total")
	current := series(after["envd_saves_total"], map[string]string{"result": metrics.ResultCurrent})
	require.Len(t, current, 1)
	assert.Equal(t, 1.0, current[0].GetCounter().GetValue())
	assert.Greater(t, after["envd_registry_last_push_success_timestamp_seconds"].GetMetric()[0].GetGauge().GetValue(), 0.0)
	ops := series(after["envd_operations_total"], map[string]string{"kind": string(types.OpKindSave), "outcome": string(types.OpSucceeded)})
	require.Len(t, ops, 1)
	assert.Equal(t, 1.0, ops[0].GetCounter().GetValue())
}

func TestCoreMetricsSaveFailedAndConflict(t *testing.T) {
	e := newMetricsEnv(t)
	e.project("p")
	a := e.instance("p", types.CreateInstanceRequest{})
	b := e.instance("p", types.CreateInstanceRequest{})
	e.write(a.ID, "/etc/a", "a")
	e.write(b.ID, "/etc/b", "b")
	require.True(t, e.saved(a.ID, types.SaveRequest{}).Current)
	require.True(t, e.saved(b.ID, types.SaveRequest{}).Conflict, "b started from version 1, which is no longer current")

	e.reg.failNextAppend(fmt.Errorf("registry is down: %w", errdefs.ErrUnavailable))
	op := e.save(a.ID, types.SaveRequest{})
	require.Equal(t, types.OpFailed, op.State)

	fams := e.scrape()
	for result, want := range map[string]float64{metrics.ResultCurrent: 1, metrics.ResultConflict: 1, metrics.ResultFailed: 1} {
		s := series(fams["envd_saves_total"], map[string]string{"result": result})
		if assert.Len(t, s, 1, result) {
			assert.Equal(t, want, s[0].GetCounter().GetValue(), result)
		}
	}
	assert.Equal(t, 1.0, fams["envd_save_conflicts_total"].GetMetric()[0].GetCounter().GetValue())
	assert.Equal(t, 1.0, fams["envd_registry_push_errors_total"].GetMetric()[0].GetCounter().GetValue())
	failed := series(fams["envd_operations_total"], map[string]string{"kind": string(types.OpKindSave), "outcome": string(types.OpFailed)})
	require.Len(t, failed, 1)
	assert.Equal(t, 1.0, failed[0].GetCounter().GetValue())
}

func TestCoreMetricsTokens(t *testing.T) {
	e := newMetricsEnv(t)
	for _, tc := range []struct {
		name   string
		token  string
		status int
		code   string
	}{
		{"no token", "", http.StatusUnauthorized, "unauthenticated"},
		{"unknown token", "nope", http.StatusUnauthorized, "unauthenticated"},
		{"tenant token", e.tenantToken, http.StatusForbidden, "permission_denied"},
		{"scrape token", scrapeToken, http.StatusOK, ""},
		{"admin token", "core-test-admin-token", http.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := (&metricsEnv{coreEnv: e.with(t), url: e.url}).get("/metrics", tc.token)
			defer resp.Body.Close()
			body := new(strings.Builder)
			_, _ = io.Copy(body, resp.Body)
			assert.Equal(t, tc.status, resp.StatusCode)
			if tc.code != "" {
				assert.Contains(t, body.String(), `"code":"`+tc.code+`"`)
			} else {
				assert.True(t, strings.Contains(body.String(), "# TYPE envd_instances_without_expiry gauge"), "the exposition is served")
			}
		})
	}
	// The scrape token opens /metrics only.
	resp := e.get("/v1/projects", scrapeToken)
	resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}
