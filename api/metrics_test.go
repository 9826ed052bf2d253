package api_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
)

// requests records what the API reports.
type requests struct {
	mu   sync.Mutex
	seen []string
}

func (r *requests) ObserveRequest(method, route string, status int, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, method+" "+route+" "+http.StatusText(status))
}

// The API reports each request by its route template, never the raw path,
// and serves /metrics with the handler it was given.
func TestRequestObserverAndMetricsHandler(t *testing.T) {
	obs := &requests{}
	core := apitest.New()
	exposition := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("envd_up 1\n")) })
	h, err := api.New(core.Parts(), api.WithRequestObserver(obs), api.WithMetrics(exposition, "scrape"))
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	for _, tc := range []struct {
		name, path, token string
		want              string
	}{
		{"a route with an id", "/v1/instances/i-123", apitest.Token, "GET /v1/instances/:i OK"},
		{"no route", "/v1/nothing/here", apitest.Token, "GET unmatched Not Found"},
		{"metrics with the scrape token", "/metrics", "scrape", "GET /metrics OK"},
		{"metrics without a token", "/metrics", "", "GET /metrics Unauthorized"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodGet, srv.URL+tc.path, nil)
			require.NoError(t, err)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			resp, err := srv.Client().Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			obs.mu.Lock()
			defer obs.mu.Unlock()
			require.NotEmpty(t, obs.seen)
			assert.Equal(t, tc.want, obs.seen[len(obs.seen)-1])
		})
	}
}

// Without WithMetrics, /metrics is not found, even for the admin.
func TestMetricsNotServedByDefault(t *testing.T) {
	_, srv := newServer(t)
	r := do(t, srv, http.MethodGet, "/metrics", nil, nil)
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Contains(t, string(r.body), `"code":"not_found"`)
}
