package api

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/envd-dev/envd/errdefs"
)

// RequestObserver is told of every request the API answered, for the
// node's metrics. route is the template the request matched
// ("/v1/instances/:i"), never the raw path, so that ids do not become
// series; a request that matched no route has route "unmatched".
type RequestObserver interface {
	ObserveRequest(method, route string, status int, d time.Duration)
}

// WithMetrics serves GET /metrics with h to the admin token or to
// scrapeToken ("" = the admin token only). Default: /metrics answers 404
// not_found to an admin.
func WithMetrics(h http.Handler, scrapeToken string) Option {
	return func(o *options) error {
		if h == nil {
			return errors.New("metrics handler is nil")
		}
		o.metrics, o.scrapeToken = h, scrapeToken
		return nil
	}
}

// WithRequestObserver tells obs of every request. Default: none.
func WithRequestObserver(obs RequestObserver) Option {
	return func(o *options) error {
		if obs == nil {
			return errors.New("request observer is nil")
		}
		o.requests = obs
		return nil
	}
}

// observeRequests reports each request's route, status and duration once
// it is answered.
func observeRequests(obs RequestObserver) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := time.Now()
		c.Next()
		route := c.FullPath()
		if route == "" {
			route = "unmatched"
		}
		obs.ObserveRequest(c.Request.Method, route, c.Writer.Status(), time.Since(start))
	}
}

// scrapeAuth lets the scrape token or an admin's token through to
// /metrics: 401 without a valid token, 403 for a tenant's.
func scrapeAuth(core Authenticator, scrapeToken string) gin.HandlerFunc {
	return func(c *gin.Context) {
		token, ok := bearerToken(c.GetHeader("Authorization"))
		if ok && scrapeToken != "" && subtle.ConstantTimeCompare([]byte(token), []byte(scrapeToken)) == 1 {
			return
		}
		p, ok := principalOf(c, core, token, ok)
		if !ok {
			return
		}
		if !p.Admin {
			writeError(c, fmt.Errorf("metrics need an admin or scrape token: %w", errdefs.ErrPermissionDenied))
		}
	}
}

// serveMetrics serves GET /metrics (outside /v1): the Prometheus text
// format, not JSON.
func serveMetrics(h http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		if h == nil {
			writeError(c, fmt.Errorf("this server has no metrics: %w", errNotFound))
			return
		}
		h.ServeHTTP(c.Writer, c.Request)
	}
}
