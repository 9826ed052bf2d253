package envd_test

import (
	"bytes"
	"crypto/rand"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime/egress"
)

// TestSecretsSealedBoundAndLogged: the secret store takes an admin token
// of the tenant, keeps values only sealed under the node key, refuses
// unknown schemes and bad headers, hands the egress proxy the header of the
// bound host and scheme only (the new value after a rotation, none after a
// revocation, none with another key), and the gateway's denials land in
// the project's egress log.
func TestSecretsSealedBoundAndLogged(t *testing.T) {
	key := make([]byte, envd.SecretKeySize)
	_, _ = rand.Read(key)
	e := newCoreEnv(t, func(c *envd.Config) { c.SecretKey = key })
	ctx := e.ctx
	tok, err := e.svc.Parts().Tokens.CreateToken(ctx, e.admin, testTenant, types.CreateTokenRequest{Admin: true})
	require.NoError(t, err)
	tenantAdmin, err := e.svc.Parts().Tokens.Authenticate(ctx, tok.Token)
	require.NoError(t, err)

	_, err = e.svc.Parts().Egress.SetSecret(ctx, e.user, "api", types.SetSecretRequest{Value: "v1-plain"})
	assert.ErrorIs(t, err, errdefs.ErrPermissionDenied, "the store is admin-scoped")
	_, err = e.svc.Parts().Egress.SetSecret(ctx, tenantAdmin, "api", types.SetSecretRequest{Value: "two\nlines"})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	_, err = e.svc.Parts().Egress.SetSecret(ctx, tenantAdmin, "api", types.SetSecretRequest{Value: "v1-plain"})
	require.NoError(t, err)
	var sealed []byte
	require.NoError(t, e.store.Pool().QueryRow(ctx, `SELECT sealed FROM secrets WHERE tenant_id = $1 AND name = 'api'`, testTenant).Scan(&sealed))
	assert.False(t, bytes.Contains(sealed, []byte("v1-plain")), "the value is sealed at rest")

	for name, b := range map[string]types.SecretBinding{
		"scheme":        {Host: "api.example.org", Scheme: "ftp"},
		"header":        {Host: "api.example.org", Header: "X Bad"},
		"format":        {Host: "api.example.org", Format: "Bearer"},
		"host":          {Host: "10.0.0.1"},
		"format inject": {Host: "api.example.org", Format: "{{value}}\r\nX: y"},
	} {
		_, err := e.svc.Parts().Egress.BindSecret(ctx, tenantAdmin, "api", b)
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, name)
	}
	sec, err := e.svc.Parts().Egress.BindSecret(ctx, tenantAdmin, "api", types.SecretBinding{Host: "API.example.org"})
	require.NoError(t, err)
	assert.Equal(t, &types.SecretBinding{Host: "api.example.org", Header: "Authorization", Format: "Bearer {{value}}", Scheme: "http"}, sec.Binding)

	e.project("web")
	var id int64
	require.NoError(t, e.store.Pool().QueryRow(ctx, `SELECT id FROM projects WHERE tenant_id = $1 AND name = 'web'`, testTenant).Scan(&id))
	gwKey := "project:" + strconv.FormatInt(id, 10)
	headersOf := func(scheme, host string) []egress.Header {
		h, err := e.svc.Parts().Egress.SecretHeaders(ctx, gwKey, scheme, host)
		require.NoError(t, err)
		return h
	}
	headers := func(host string) []egress.Header { return headersOf("http", host) }
	assert.Equal(t, []egress.Header{{Name: "Authorization", Value: "Bearer v1-plain"}}, headers("api.example.org"))
	assert.Empty(t, headers("other.example.org"))
	assert.Empty(t, headersOf("https", "api.example.org"), "an http binding is not sent over HTTPS")

	// An HTTPS binding: HTTPS requests only (the value never goes out in
	// clear text).
	sec, err = e.svc.Parts().Egress.BindSecret(ctx, tenantAdmin, "api", types.SecretBinding{Host: "api.example.org", Scheme: "HTTPS"})
	require.NoError(t, err)
	assert.Equal(t, "https", sec.Binding.Scheme)
	list, err := e.svc.Parts().Egress.ListSecrets(ctx, tenantAdmin)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, "https", list[0].Binding.Scheme)
	assert.Equal(t, []egress.Header{{Name: "Authorization", Value: "Bearer v1-plain"}}, headersOf("https", "api.example.org"))
	assert.Empty(t, headers("api.example.org"), "an https binding is not sent over plain HTTP")
	_, err = e.svc.Parts().Egress.BindSecret(ctx, tenantAdmin, "api", types.SecretBinding{Host: "api.example.org"})
	require.NoError(t, err)
	_, err = e.svc.Parts().Egress.SetSecret(ctx, tenantAdmin, "api", types.SetSecretRequest{Value: "v2-plain"})
	require.NoError(t, err)
	assert.Equal(t, []egress.Header{{Name: "Authorization", Value: "Bearer v2-plain"}}, headers("api.example.org"), "rotation")

	// Another node key does not open it.
	other := make([]byte, envd.SecretKeySize)
	_, _ = rand.Read(other)
	e.cfg.SecretKey = other
	e.restart()
	_, err = e.svc.Parts().Egress.SecretHeaders(ctx, gwKey, "http", "api.example.org")
	assert.Error(t, err)
	e.cfg.SecretKey = key
	e.restart()

	_, err = e.svc.Parts().Egress.DeleteSecret(ctx, tenantAdmin, "api")
	require.NoError(t, err)
	assert.Empty(t, headers("api.example.org"), "revocation")
	list, err = e.svc.Parts().Egress.ListSecrets(ctx, tenantAdmin)
	require.NoError(t, err)
	assert.Empty(t, list)

	e.svc.Parts().Egress.EgressDenied(egress.Denial{Time: time.Now(), Instance: "web-1", Key: gwKey, Kind: "dns", Name: "other.test", Reason: "name not allowed"})
	require.Eventually(t, func() bool {
		log, err := e.svc.Parts().Egress.EgressLog(ctx, e.user, "web", 0, 0)
		require.NoError(t, err)
		return len(log) == 1 && log[0].Name == "other.test" && log[0].Kind == "dns" && log[0].Instance == "web-1"
	}, 10*time.Second, 50*time.Millisecond)
	_, err = e.svc.Parts().Egress.EgressLog(ctx, e.user, "nope", 0, 0)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

// TestSecretCacheAcrossNodes: two nodes on one database, each with its
// egress secret cache. Node B's proxy lookups are answered from its cache
// after the first; a rotation, a binding change and a revocation made on
// node A reach B's next lookups through the database's notification (B
// never asked again on its own: without it, B would keep the old value),
// and A's own next lookup sees its change at once.
func TestSecretCacheAcrossNodes(t *testing.T) {
	key := make([]byte, envd.SecretKeySize)
	_, _ = rand.Read(key)
	a := newCoreEnv(t, func(c *envd.Config) { c.SecretKey = key })
	ctx := a.ctx
	cfgB := a.cfg
	cfgB.Node = "node-b"
	cfgB.WorkDir = t.TempDir()
	cfgB.DataDir = t.TempDir()
	b, err := envd.New(cfgB, a.store, a.reg, a.engine)
	require.NoError(t, err)
	require.NoError(t, b.Start(ctx))
	t.Cleanup(b.Close)

	tok, err := a.svc.Parts().Tokens.CreateToken(ctx, a.admin, testTenant, types.CreateTokenRequest{Admin: true})
	require.NoError(t, err)
	tenantAdmin, err := a.svc.Parts().Tokens.Authenticate(ctx, tok.Token)
	require.NoError(t, err)
	a.project("web")
	var id int64
	require.NoError(t, a.store.Pool().QueryRow(ctx, `SELECT id FROM projects WHERE tenant_id = $1 AND name = 'web'`, testTenant).Scan(&id))
	gwKey := "project:" + strconv.FormatInt(id, 10)

	_, err = a.svc.Parts().Egress.SetSecret(ctx, tenantAdmin, "api", types.SetSecretRequest{Value: "v1"})
	require.NoError(t, err)
	_, err = a.svc.Parts().Egress.BindSecret(ctx, tenantAdmin, "api", types.SecretBinding{Host: "api.example.org", Scheme: "https"})
	require.NoError(t, err)

	headers := func(svc *envd.Service, scheme string) []egress.Header {
		h, err := svc.Parts().Egress.SecretHeaders(ctx, gwKey, scheme, "api.example.org")
		require.NoError(t, err)
		return h
	}
	bearer := func(v string) []egress.Header { return []egress.Header{{Name: "Authorization", Value: "Bearer " + v}} }
	// B's listener is up once a change is seen at all; from then on its
	// answers come from its cache.
	require.Eventually(t, func() bool { return assert.ObjectsAreEqual(bearer("v1"), headers(b, "https")) }, 10*time.Second, 10*time.Millisecond)
	for range 3 {
		assert.Equal(t, bearer("v1"), headers(b, "https"))
	}
	// seenOnB awaits B's answer want after a change on A, and says how long
	// the notification took.
	seenOnB := func(what, scheme string, want []egress.Header) {
		t.Helper()
		began := time.Now()
		require.Eventually(t, func() bool { return assert.ObjectsAreEqual(want, headers(b, scheme)) }, 5*time.Second, 2*time.Millisecond,
			"%s on node A is not seen by node B's proxy", what)
		t.Logf("%s on node A seen by node B after %s", what, time.Since(began).Round(time.Microsecond))
	}

	_, err = a.svc.Parts().Egress.SetSecret(ctx, tenantAdmin, "api", types.SetSecretRequest{Value: "v2"})
	require.NoError(t, err)
	assert.Equal(t, bearer("v2"), headers(a.svc, "https"), "rotation: node A's next lookup")
	seenOnB("rotation", "https", bearer("v2"))

	_, err = a.svc.Parts().Egress.BindSecret(ctx, tenantAdmin, "api", types.SecretBinding{Host: "api.example.org"})
	require.NoError(t, err)
	assert.Empty(t, headers(a.svc, "https"), "binding changed to http: node A")
	seenOnB("binding change", "http", bearer("v2"))
	assert.Empty(t, headers(b, "https"))

	// The answers are the cache's: a change that notifies no one (the
	// trigger off) is not seen; a notification then drops it. First every
	// notification of the changes above must have reached B (a late one
	// would drop B's cache after the unseen change, as it should): a
	// barrier notification, sent last, is seen after them.
	_, err = a.store.Pool().Exec(ctx, `SELECT pg_notify('envd_secrets', 't:barrier')`)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return envd.SecretNotified(b, "t:barrier") }, 10*time.Second, 2*time.Millisecond)
	require.Equal(t, bearer("v2"), headers(b, "http"), "B's cache, filled again after the barrier")
	_, err = a.store.Pool().Exec(ctx, `ALTER TABLE secrets DISABLE TRIGGER secrets_notify`)
	require.NoError(t, err)
	_, err = a.store.Pool().Exec(ctx, `UPDATE secrets SET header = 'X-Unseen' WHERE tenant_id = $1 AND name = 'api'`, testTenant)
	require.NoError(t, err)
	_, err = a.store.Pool().Exec(ctx, `ALTER TABLE secrets ENABLE TRIGGER secrets_notify`)
	require.NoError(t, err)
	for range 3 {
		assert.Equal(t, bearer("v2"), headers(b, "http"), "node B asked the database instead of its cache")
	}
	_, err = a.store.Pool().Exec(ctx, `SELECT pg_notify('envd_secrets', 't:' || $1::text)`, testTenant)
	require.NoError(t, err)
	seenOnB("a notification", "http", []egress.Header{{Name: "X-Unseen", Value: "Bearer v2"}})

	// A change by another writer than envd's API (here SQL, as a second
	// process or an operator would) is seen too: the trigger notifies.
	_, err = a.store.Pool().Exec(ctx, `UPDATE secrets SET header = 'X-Api-Key', format = '{{value}}' WHERE tenant_id = $1 AND name = 'api'`, testTenant)
	require.NoError(t, err)
	seenOnB("a direct update", "http", []egress.Header{{Name: "X-Api-Key", Value: "v2"}})

	_, err = a.svc.Parts().Egress.DeleteSecret(ctx, tenantAdmin, "api")
	require.NoError(t, err)
	assert.Empty(t, headers(a.svc, "http"), "revocation: node A")
	seenOnB("revocation", "http", nil)
}
