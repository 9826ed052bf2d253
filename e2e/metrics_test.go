package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scrape GETs url with token ("" = none) and parses the answer with
// Prometheus's own text parser.
func scrape(t *testing.T, url, token string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx(t), http.MethodGet, url, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	require.NoError(t, err)
	return fams
}

// histogramCount is the number of observations of the histogram name,
// which must be in fams.
func histogramCount(t *testing.T, fams map[string]*dto.MetricFamily, name string) uint64 {
	t.Helper()
	require.NotNil(t, fams[name], name)
	return observed(t, fams, name)
}

// observed is histogramCount where a histogram with labels that has no
// observation yet is absent (a labelled histogram shows no series until
// its first).
func observed(t *testing.T, fams map[string]*dto.MetricFamily, name string) uint64 {
	t.Helper()
	fam := fams[name]
	if fam == nil {
		return 0
	}
	require.Equal(t, dto.MetricType_HISTOGRAM, fam.GetType(), name)
	var n uint64
	for _, m := range fam.GetMetric() {
		n += m.GetHistogram().GetSampleCount()
	}
	return n
}

// TestRootMetrics: the node serves /metrics without a token on its
// metrics listener and with the scrape token on the API, and a save on a
// real runtime moves every save phase's histogram.
func TestRootMetrics(t *testing.T) {
	require.NotEmpty(t, env.node.MetricsURL, "the e2e node has a metrics listener")
	st, err := os.Stat(filepath.Join(env.dataDir, "metrics.token"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	before := scrape(t, env.node.MetricsURL, "")
	phases := []string{"spool", "freeze", "encode", "push", "commit", "total"}
	counts := map[string]uint64{}
	for _, ph := range phases {
		counts[ph] = observed(t, before, "envd_save_"+ph+"_seconds")
	}
	restores := observed(t, before, "envd_restore_seconds")

	p := newProject(t, "metrics")
	a := up(t, p, 0)
	mustSh(t, a.ID, "echo x > /etc/metrics-file")
	_, res := save(t, a.ID, "metrics")
	require.True(t, res.Current)

	after := scrape(t, env.node.URL+"/metrics", env.node.ScrapeToken)
	for _, ph := range phases {
		assert.Equal(t, counts[ph]+1, histogramCount(t, after, "envd_save_"+ph+"_seconds"), "a save moves %s", ph)
	}
	assert.Greater(t, histogramCount(t, after, "envd_restore_seconds"), restores, "a started instance moves the restore time")
	for _, name := range []string{"envd_instances", "envd_disk_free_bytes", "envd_memory_available_bytes", "go_goroutines", "process_resident_memory_bytes"} {
		assert.Contains(t, after, name)
	}

	t.Run("the metrics listener serves only /metrics", func(t *testing.T) {
		resp, err := http.Get(env.node.MetricsURL[:len(env.node.MetricsURL)-len("/metrics")] + "/v1/info")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	})
}
