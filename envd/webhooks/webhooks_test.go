package webhooks

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// TestCheckURL: what a hook's URL may be, and the stable code and reason
// of each refusal.
func TestCheckURL(t *testing.T) {
	strict := New(nil, Config{DenyNets: []netip.Prefix{netip.MustParsePrefix("10.89.0.0/16")}}, nil)
	loop := New(nil, Config{AllowLoopback: true, DenyNets: []netip.Prefix{netip.MustParsePrefix("10.89.0.0/16")}}, nil)
	tests := []struct {
		name, url  string
		h          *Hooks
		wantReason string // "" = accepted
	}{
		{"https public", "https://203.0.113.7/hook", strict, ""},
		{"private on-premises", "http://192.168.10.4:8080/hook", strict, ""},
		{"loopback by default", "http://127.0.0.1:9000/hook", strict, "address"},
		{"loopback name", "http://localhost:9000/hook", strict, "address"},
		{"ipv6 loopback", "http://[::1]:9000/hook", strict, "address"},
		{"loopback allowed", "http://127.0.0.1:9000/hook", loop, ""},
		{"metadata", "http://169.254.169.254/latest/meta-data/", loop, "address"},
		{"link-local v6", "http://[fe80::1]/", loop, "address"},
		{"ipv4-mapped metadata", "http://[::ffff:169.254.169.254]/", loop, "address"},
		{"ec2 v6 metadata", "http://[fd00:ec2::254]/", loop, "address"},
		{"instance address", "http://10.89.3.7:8080/", loop, "address"},
		{"unspecified", "http://0.0.0.0:80/", loop, "address"},
		{"ftp", "ftp://203.0.113.7/", loop, "scheme"},
		{"no scheme", "203.0.113.7/hook", loop, "scheme"},
		{"file", "file:///etc/passwd", loop, "scheme"},
		{"no host", "http:///hook", loop, "host"},
		{"user info", "https://u:p@203.0.113.7/", loop, "host"},
		{"unresolvable", "http://no-such-host.invalid/", loop, "resolve"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.h.CheckURL(context.Background(), tc.url)
			if tc.wantReason == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			assert.Equal(t, "invalid_argument", errdefs.Code(err))
			assert.Equal(t, map[string]any{"field": "url", "reason": tc.wantReason}, errdefs.Details(err))
		})
	}
}

// TestCheckEvents: subscriptions are known types, families or "*".
func TestCheckEvents(t *testing.T) {
	got, err := checkEvents(nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"*"}, got)
	got, err = checkEvents([]string{"instance.state", "operation.save", "operation.*", "quota.refused", "rollout.step", "rollout.step"})
	require.NoError(t, err)
	assert.Equal(t, []string{"instance.state", "operation.save", "operation.*", "quota.refused", "rollout.step"}, got)
	for _, bad := range []string{"instance.created", "nope", "operation.", "operation.Save", "*.*", ""} {
		_, err := checkEvents([]string{bad})
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, bad)
	}
}

// TestSendRefusesAddressAtConnect: a hook whose address became one it
// may not reach (a name re-pointed after registration) is not connected
// to; the try fails and is retried with backoff.
func TestSendRefusesAddressAtConnect(t *testing.T) {
	reached := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached = true }))
	defer srv.Close()
	h := New(nil, Config{BackoffBase: time.Second, BackoffCap: 4 * time.Second, MaxAttempts: 3}, nil)
	a := h.send(context.Background(), versions.Claimed{URL: srv.URL, Secret: "s",
		WebhookDelivery: versions.WebhookDelivery{ID: 1, EventType: types.WebhookTest, EventData: []byte(`{}`)}})
	assert.False(t, reached, "the receiver was reached")
	assert.False(t, a.Delivered)
	assert.Contains(t, a.Error, "loopback addresses are refused")
	assert.Equal(t, time.Second, a.RetryIn)
	assert.False(t, a.GiveUp)

	// The backoff doubles up to its cap; the last try gives up.
	assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second},
		[]time.Duration{h.backoff(1), h.backoff(2), h.backoff(3), h.backoff(4)})
	a = h.send(context.Background(), versions.Claimed{URL: srv.URL, Secret: "s",
		WebhookDelivery: versions.WebhookDelivery{ID: 1, Attempts: 2, EventType: types.WebhookTest, EventData: []byte(`{}`)}})
	assert.True(t, a.GiveUp)
}

// TestSign: the documented signature, checked against a value computed
// apart (printf '%s' '1700000000.{"seq":1}' | openssl dgst -sha256 -hmac whsec_test).
func TestSign(t *testing.T) {
	assert.Equal(t, "v1=926c3c48823e4dc937cdb0992313bcbbc472579d779ab54f0d4e09e4049838aa", Sign("whsec_test", "1700000000", []byte(`{"seq":1}`)))
}
