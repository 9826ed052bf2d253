package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/metrics"
	"github.com/envd-dev/envd/versions"
)

// counts is a store of fixed instance counts: the rules and dashboard
// checks need the families, not a database.
type counts []versions.InstanceCount

func (c counts) CountInstances(context.Context, string) ([]versions.InstanceCount, error) {
	return c, nil
}

// families are the names a Prometheus server would see from a node that
// has seen every kind of event once.
func families(t *testing.T) map[string]bool {
	t.Helper()
	m := metrics.New("n", counts{{State: types.StateRunning, Count: 1}}, t.TempDir())
	m.Saved(types.SaveResult{TotalMS: 1})
	m.SaveFailed(errors.New("x"))
	m.Pushed(nil)
	m.Pushed(errors.New("x"))
	m.Restored("create", time.Second)
	m.InstanceFailed(types.ReasonNodeLost)
	m.OperationFinished(types.OpKindSave, types.OpSucceeded, time.Second)
	m.ObserveRequest("GET", "/v1/info", 200, time.Millisecond)
	fams, err := m.Registry().Gather()
	require.NoError(t, err)
	names := map[string]bool{"up": true} // Prometheus's own, per target
	for _, f := range fams {
		names[f.GetName()] = true
	}
	return names
}

var metricName = regexp.MustCompile(`\b((?:envd|go|process)_[a-zA-Z0-9_]+|up)\b`)

// referenced returns the metric names of a PromQL expression, histogram
// suffixes stripped.
func referenced(expr string) []string {
	var out []string
	for _, n := range metricName.FindAllString(expr, -1) {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if strings.HasSuffix(n, suffix) && strings.HasPrefix(n, "envd_") && (strings.HasSuffix(strings.TrimSuffix(n, suffix), "_seconds")) {
				n = strings.TrimSuffix(n, suffix)
			}
		}
		out = append(out, n)
	}
	return out
}

// The alert rules parse, each has a severity and a summary, and every
// expression names only metrics the node exports.
func TestAlertRules(t *testing.T) {
	names := families(t)
	raw, err := os.ReadFile("../../deploy/observability/alerts.yaml")
	require.NoError(t, err)
	var file struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert       string
				Expr        string
				For         string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&file))
	require.NotEmpty(t, file.Groups)
	alerts := map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			t.Run(r.Alert, func(t *testing.T) {
				alerts[r.Alert] = true
				require.NotEmpty(t, r.Expr)
				assert.Contains(t, []string{"warning", "critical"}, r.Labels["severity"])
				assert.NotEmpty(t, r.Annotations["summary"])
				if r.For != "" {
					_, err := time.ParseDuration(r.For)
					assert.NoError(t, err, "for")
				}
				assert.Equal(t, strings.Count(r.Expr, "("), strings.Count(r.Expr, ")"), "balanced parentheses")
				refs := referenced(r.Expr)
				require.NotEmpty(t, refs)
				for _, n := range refs {
					assert.True(t, names[n], "%s is no metric of envd", n)
				}
			})
		}
	}
	for _, a := range []string{"EnvdSavesFailing", "EnvdRegistryUnreachable", "EnvdDiskNearlyFull", "EnvdInstancesLost"} {
		assert.True(t, alerts[a], "alert %s", a)
	}
}

// The dashboard is JSON and every panel queries metrics the node exports.
func TestGrafanaDashboard(t *testing.T) {
	names := families(t)
	raw, err := os.ReadFile("../../deploy/observability/grafana-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.NotEmpty(t, dash.Panels)
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			refs := referenced(tg.Expr)
			require.NotEmpty(t, refs, "%s: %s", p.Title, tg.Expr)
			for _, n := range refs {
				assert.True(t, names[n], "%s: %s is no metric of envd", p.Title, n)
			}
		}
	}
}
