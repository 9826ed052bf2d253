package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/envd/metrics"
)

// metricsTokenFile holds the scrape token: created once in DataDir (0600)
// and accepted on the API's /metrics besides the admin token.
const metricsTokenFile = "metrics.token"

// newMetrics makes the node's metrics and its scrape token.
func (n *Node) newMetrics(db database) (*metrics.Metrics, string, error) {
	tokenFile := filepath.Join(n.cfg.DataDir, metricsTokenFile)
	token, err := persisted(tokenFile, func() string { return randomHex(32) })
	if err != nil {
		return nil, "", fmt.Errorf("scrape token: %w", err)
	}
	if err := os.Chmod(tokenFile, 0o600); err != nil {
		return nil, "", err
	}
	return metrics.New(n.cfg.Node, db.store.Instances, n.cfg.DataDir), token, nil
}

// apiMetrics are the API's options that serve and feed the metrics.
func (n *Node) apiMetrics() []api.Option {
	return []api.Option{api.WithMetrics(n.metrics.Handler(), n.ScrapeToken), api.WithRequestObserver(n.metrics)}
}

// serveMetrics serves /metrics alone, without a token, on
// Config.MetricsListen (meant for a private network), unless it is empty;
// Close stops it.
func (n *Node) serveMetrics() (url string, err error) {
	if n.cfg.MetricsListen == "" {
		return "", nil
	}
	ln, err := net.Listen("tcp", n.cfg.MetricsListen)
	if err != nil {
		return "", fmt.Errorf("metrics listen %s: %w", n.cfg.MetricsListen, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", n.metrics.Handler())
	srv := newHTTPServer(mux)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.cfg.Logger.Error("metrics server", "err", err)
		}
	}()
	n.onClose(func(ctx context.Context) error {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	return "http://" + ln.Addr().String() + "/metrics", nil
}
