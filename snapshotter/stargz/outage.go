package stargz

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	rhttp "github.com/hashicorp/go-retryablehttp"

	"github.com/envd-dev/envd/errdefs"
)

// How a read of data that is not cached yet behaves while the registry is
// unreachable (refused connections, or a registry that accepts and never
// answers):
//
//   - the on-demand fetch retries (exponential backoff, MinRetryWait to
//     MaxRetryWait) until FetchTimeout after it began, each attempt bounded
//     by RequestTimeout, and then fails: the read(2) answers EIO;
//   - the kernel asks again at once for a page whose readahead failed (its
//     synchronous read of the page); without more, that second request
//     waits another FetchTimeout, and a read took two or three times the
//     bound. A request for blob bytes overlapping a request that failed
//     less than failFastWindow ago, with no success on that blob since,
//     fails at once instead. So one read(2) of uncached data waits at most
//     about FetchTimeout.

// failFastWindow is how long a failed range answers at once.
const failFastWindow = 2 * time.Second

// errRecentlyFailed is the error of a request cut short by failFastWindow.
var errRecentlyFailed = fmt.Errorf("the same blob range failed less than %v ago: %w", failFastWindow, errdefs.ErrUnavailable)

// outageTransport wraps the library's retrying transport with the fail-fast
// rule above. It owns the retry settings: the library sets them only on a
// transport that is a *rhttp.RoundTripper, which this one is not.
type outageTransport struct {
	inner http.RoundTripper
	now   func() time.Time

	mu     sync.Mutex
	failed map[string][]failedRange // by URL
}

type failedRange struct {
	b, e int64 // inclusive; e < 0: to the end
	at   time.Time
}

// newOutageTransport returns the transport for one registry host: client's
// retrying transport with retries until the request's context ends (at most
// maxRetries), waits from minWait to maxWait.
func newOutageTransport(client *http.Client, maxRetries int, minWait, maxWait time.Duration) http.RoundTripper {
	inner := client.Transport
	if rt, ok := inner.(*rhttp.RoundTripper); ok {
		rt.Client.RetryMax = maxRetries
		rt.Client.RetryWaitMin = minWait
		rt.Client.RetryWaitMax = maxWait
		rt.Client.Backoff = rhttp.DefaultBackoff
		rt.Client.CheckRetry = rhttp.DefaultRetryPolicy // stops when the context ends
		rt.Client.Logger = nil
	}
	return &outageTransport{inner: inner, now: time.Now, failed: map[string][]failedRange{}}
}

func (t *outageTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	key := req.URL.String()
	ranges := parseRanges(req.Header.Get("Range"))
	if t.recentlyFailed(key, ranges) {
		return nil, errRecentlyFailed
	}
	resp, err := t.inner.RoundTrip(req)
	switch {
	case err != nil && !errors.Is(err, errRecentlyFailed) && !errors.Is(req.Context().Err(), context.Canceled):
		t.record(key, ranges)
	case err == nil && resp.StatusCode >= 500:
		t.record(key, ranges)
	case err == nil:
		t.mu.Lock()
		delete(t.failed, key)
		t.mu.Unlock()
	}
	return resp, err
}

func (t *outageTransport) recentlyFailed(key string, ranges []failedRange) bool {
	if len(ranges) == 0 {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	fs := t.failed[key]
	kept := fs[:0]
	hit := false
	for _, f := range fs {
		if now.Sub(f.at) >= failFastWindow {
			continue
		}
		kept = append(kept, f)
		for _, r := range ranges {
			if overlaps(f, r) {
				hit = true
			}
		}
	}
	if len(kept) == 0 {
		delete(t.failed, key)
	} else {
		t.failed[key] = kept
	}
	return hit
}

func (t *outageTransport) record(key string, ranges []failedRange) {
	if len(ranges) == 0 {
		return // a check or a whole-blob request: nothing to cut short
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	for _, r := range ranges {
		r.at = now
		t.failed[key] = append(t.failed[key], r)
	}
	if n := len(t.failed[key]); n > 256 { // bounded: the oldest go first
		t.failed[key] = t.failed[key][n-256:]
	}
}

func overlaps(a, b failedRange) bool {
	aEnd, bEnd := a.e, b.e
	if aEnd < 0 {
		aEnd = 1<<63 - 1
	}
	if bEnd < 0 {
		bEnd = 1<<63 - 1
	}
	return a.b <= bEnd && b.b <= aEnd
}

// parseRanges reads a "bytes=a-b,c-d,e-" Range header; nil when there is
// none or it cannot be read.
func parseRanges(h string) []failedRange {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok {
		return nil
	}
	var out []failedRange
	for _, part := range strings.Split(spec, ",") {
		b, e, ok := strings.Cut(strings.TrimSpace(part), "-")
		if !ok || b == "" {
			return nil
		}
		bn, err := strconv.ParseInt(b, 10, 64)
		if err != nil {
			return nil
		}
		en := int64(-1)
		if e != "" {
			if en, err = strconv.ParseInt(e, 10, 64); err != nil {
				return nil
			}
		}
		out = append(out, failedRange{b: bn, e: en})
	}
	return out
}
