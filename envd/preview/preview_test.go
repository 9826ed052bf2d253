package preview

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

func TestTokenVerify(t *testing.T) {
	key := []byte(strings.Repeat("k", KeySize))
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	exp := now.Add(time.Hour)
	good := Sign(key, Claims{Instance: "web-0a1b2c3d", Port: 8080, Tenant: "acme", Expires: exp})

	got, err := Verify(key, good, "web-0a1b2c3d", 8080, "acme", now)
	require.NoError(t, err)
	assert.Equal(t, exp, got)

	flip := func(tok string, i int) string {
		b := []byte(tok)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	for _, tc := range []struct {
		name, token, instance, tenant string
		port                          int
		key                           []byte
		now                           time.Time
		expired                       bool
	}{
		{name: "expired", token: good, instance: "web-0a1b2c3d", port: 8080, tenant: "acme", now: exp, expired: true},
		{name: "long expired", token: good, instance: "web-0a1b2c3d", port: 8080, tenant: "acme", now: exp.Add(time.Hour), expired: true},
		{name: "other instance", token: good, instance: "web-0a1b2c3e", port: 8080, tenant: "acme", now: now},
		{name: "other port", token: good, instance: "web-0a1b2c3d", port: 8081, tenant: "acme", now: now},
		{name: "other tenant", token: good, instance: "web-0a1b2c3d", port: 8080, tenant: "acme2", now: now},
		{name: "other key", token: good, instance: "web-0a1b2c3d", port: 8080, tenant: "acme", now: now, key: []byte(strings.Repeat("x", KeySize))},
		{name: "expiry tampered", token: flip(good, 9), instance: "web-0a1b2c3d", port: 8080, tenant: "acme", now: now},
		{name: "mac tampered", token: flip(good, len(good)-3), instance: "web-0a1b2c3d", port: 8080, tenant: "acme", now: now},
		{name: "truncated", token: good[:len(good)-4], instance: "web-0a1b2c3d", port: 8080, tenant: "acme", now: now},
		{name: "not base64", token: "!!!" + good[3:], instance: "web-0a1b2c3d", port: 8080, tenant: "acme", now: now},
		{name: "empty", token: "", instance: "web-0a1b2c3d", port: 8080, tenant: "acme", now: now},
		// Length-prefixed fields: moving a character between instance and
		// tenant gives another MAC input.
		{name: "fields shifted", token: Sign(key, Claims{Instance: "web-0a1b2c3da", Port: 8080, Tenant: "cme", Expires: exp}), instance: "web-0a1b2c3d", port: 8080, tenant: "acme", now: now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := key
			if tc.key != nil {
				k = tc.key
			}
			_, err := Verify(k, tc.token, tc.instance, tc.port, tc.tenant, tc.now)
			require.Error(t, err)
			assert.ErrorIs(t, err, errdefs.ErrUnauthenticated)
			assert.Equal(t, tc.expired, errors.Is(err, ErrExpired), "expired: %v", err)
		})
	}
}

func TestParseHost(t *testing.T) {
	for _, tc := range []struct {
		name, host, domain string
		port               int
		instance           string
		ok, bad            bool
	}{
		{name: "plain", host: "8080-web-0a1b2c3d.preview.example.com", domain: "preview.example.com", port: 8080, instance: "web-0a1b2c3d", ok: true},
		{name: "with port", host: "3000-app-1.preview.test:7443", domain: "preview.test", port: 3000, instance: "app-1", ok: true},
		{name: "upper case and trailing dots", host: "3000-App-1.Preview.Test.", domain: "preview.test.", port: 3000, instance: "app-1", ok: true},
		{name: "the API's own host", host: "127.0.0.1:7443", domain: "preview.test"},
		{name: "the domain itself", host: "preview.test", domain: "preview.test"},
		{name: "a suffix that is not a label boundary", host: "3000-a.xpreview.test", domain: "preview.test"},
		{name: "no domain configured", host: "3000-a.preview.test", domain: ""},
		{name: "two labels deep", host: "x.3000-a.preview.test", domain: "preview.test", ok: true, bad: true},
		{name: "no dash", host: "3000.preview.test", domain: "preview.test", ok: true, bad: true},
		{name: "no instance", host: "3000-.preview.test", domain: "preview.test", ok: true, bad: true},
		{name: "port zero", host: "0-a.preview.test", domain: "preview.test", ok: true, bad: true},
		{name: "leading zero", host: "080-a.preview.test", domain: "preview.test", ok: true, bad: true},
		{name: "port too big", host: "65536-a.preview.test", domain: "preview.test", ok: true, bad: true},
		{name: "port not a number", host: "http-a.preview.test", domain: "preview.test", ok: true, bad: true},
		{name: "highest port", host: "65535-a.preview.test", domain: "preview.test", port: 65535, instance: "a", ok: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port, inst, ok, err := ParseHost(tc.host, tc.domain)
			assert.Equal(t, tc.ok, ok)
			if tc.bad {
				require.Error(t, err)
				assert.ErrorIs(t, err, errdefs.ErrNotFound)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.port, port)
			assert.Equal(t, tc.instance, inst)
		})
	}
	assert.Equal(t, "8080-web-1.preview.test", Host(8080, "web-1", "preview.test"))
}
