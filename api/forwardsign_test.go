package api

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Only a request signed with the cluster's key, recently, for this method,
// path and placement, is taken as forwarded by a node.
func TestForwardSignature(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	now := time.Unix(1_800_000_000, 0)
	signed := func() *http.Request {
		r, _ := http.NewRequest(http.MethodPost, "http://n/v1/instances/i-1/exec", nil)
		r.Header.Set(PlacementHeader, "placed on b: spread")
		signForwarded(key, r, now)
		return r
	}
	for _, tc := range []struct {
		name   string
		change func(r *http.Request)
		at     time.Time
		key    []byte
		want   bool
	}{
		{name: "signed", at: now, key: key, want: true},
		{name: "within the skew", at: now.Add(4 * time.Minute), key: key, want: true},
		{name: "too old", at: now.Add(6 * time.Minute), key: key},
		{name: "from the future", at: now.Add(-6 * time.Minute), key: key},
		{name: "another key", at: now, key: []byte("another key of the same length!!")},
		{name: "no key here", at: now},
		{name: "another path", at: now, key: key, change: func(r *http.Request) { r.URL.Path = "/v1/instances/i-2/exec" }},
		{name: "another method", at: now, key: key, change: func(r *http.Request) { r.Method = http.MethodDelete }},
		{name: "another placement", at: now, key: key, change: func(r *http.Request) { r.Header.Set(PlacementHeader, "placed on c") }},
		{name: "a client's 1", at: now, key: key, change: func(r *http.Request) { r.Header.Set(ForwardedHeader, "1") }},
		{name: "garbage", at: now, key: key, change: func(r *http.Request) { r.Header.Set(ForwardedHeader, "v1.x.y.z") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := signed()
			if tc.change != nil {
				tc.change(r)
			}
			assert.Equal(t, tc.want, forwardedByNode(tc.key, r, tc.at))
		})
	}
	r := signed()
	r.Header.Set(ForwardedHeader, "1")
	stripUnsigned(key, r)
	assert.Empty(t, r.Header.Get(ForwardedHeader))
	assert.Empty(t, r.Header.Get(PlacementHeader), "an unsigned placement reason is dropped with it")
}
