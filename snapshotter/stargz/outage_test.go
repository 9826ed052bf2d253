package stargz

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	rhttp "github.com/hashicorp/go-retryablehttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// retrying is the client the library makes for a registry host.
func retrying(perRequest time.Duration) *http.Client {
	c := rhttp.NewClient()
	c.HTTPClient.Timeout = perRequest
	c.Logger = nil
	return c.StandardClient()
}

func rangedGet(t *testing.T, ctx context.Context, tr http.RoundTripper, url, rng string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Range", rng)
	return tr.RoundTrip(req)
}

// A registry that accepts and never answers: the fetch ends with its
// context; the kernel's immediate second request for the same bytes fails
// at once instead of waiting as long again; other bytes still wait.
func TestOutageTransportFrozenRegistry(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	tr := newOutageTransport(retrying(10*time.Second), 100, 10*time.Millisecond, 50*time.Millisecond)
	url := srv.URL + "/v2/a/blobs/sha256:x"

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := rangedGet(t, ctx, tr, url, "bytes=0-4095,8192-12287")
	require.Error(t, err)
	assert.NotErrorIs(t, err, errRecentlyFailed)

	tests := []struct {
		name, rng string
		fast      bool
	}{
		{"same range", "bytes=0-4095", true},
		{"overlapping", "bytes=4000-5000", true},
		{"open ended over it", "bytes=10000-", true},
		{"elsewhere", "bytes=20000-20100", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			_, err := rangedGet(t, ctx, tr, url, tc.rng)
			require.Error(t, err)
			if tc.fast {
				assert.ErrorIs(t, err, errRecentlyFailed)
			} else {
				assert.NotErrorIs(t, err, errRecentlyFailed)
			}
		})
	}

	// Past the window the range is tried again.
	ot := tr.(*outageTransport)
	ot.now = func() time.Time { return time.Now().Add(failFastWindow) }
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	_, err = rangedGet(t, ctx2, tr, url, "bytes=0-4095")
	assert.NotErrorIs(t, err, errRecentlyFailed)
}

// A registry that refuses connections for a while: the fetch keeps
// retrying within its context and succeeds once the registry is back.
func TestOutageTransportRetriesThroughOutage(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // refused from now on
	back := make(chan error, 1)
	go func() {
		time.Sleep(700 * time.Millisecond)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			back <- err
			return
		}
		back <- nil
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Range", "bytes 0-3/10")
			w.WriteHeader(http.StatusPartialContent)
			_, _ = w.Write([]byte("data"))
		}))
	}()
	tr := newOutageTransport(retrying(time.Second), 100, 20*time.Millisecond, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rangedGet(t, ctx, tr, "http://"+addr+"/v2/a/blobs/sha256:x", "bytes=0-3")
	require.NoError(t, <-back, "listen again on %s", addr)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusPartialContent, resp.StatusCode)
	assert.Equal(t, "data", string(b))
}

func TestParseRanges(t *testing.T) {
	tests := []struct {
		name, h string
		want    []failedRange
	}{
		{"one", "bytes=0-1", []failedRange{{b: 0, e: 1}}},
		{"several", "bytes=1-2,5-", []failedRange{{b: 1, e: 2}, {b: 5, e: -1}}},
		{"none", "", nil},
		{"suffix form is not ours", "bytes=-500", nil},
		{"garbage", "bytes=a-b", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, parseRanges(tc.h))
		})
	}
}
