package envd_test

import (
	"crypto/rand"
	"strconv"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
)

// BenchmarkSecretHeaders measures the egress proxy's lookup of each plain
// HTTP request and each TLS connection (Service.SecretHeaders, the
// gateway's Headers callback) on the real PostgreSQL: from the secret
// cache, and asking the database each time as before it (the cache off),
// for a tenant with a bound secret and for one with none. b.N lookups run
// on GOMAXPROCS goroutines, as the proxy's connections do.
//
//	go test -run '^$' -bench BenchmarkSecretHeaders -benchtime 3s ./envd/
func BenchmarkSecretHeaders(b *testing.B) {
	key := make([]byte, envd.SecretKeySize)
	_, _ = rand.Read(key)
	e := newCoreEnv(b, func(c *envd.Config) { c.SecretKey = key })
	ctx := e.ctx
	tok, err := e.svc.Parts().Tokens.CreateToken(ctx, e.admin, testTenant, types.CreateTokenRequest{Admin: true})
	if err != nil {
		b.Fatal(err)
	}
	tenantAdmin, err := e.svc.Parts().Tokens.Authenticate(ctx, tok.Token)
	if err != nil {
		b.Fatal(err)
	}
	e.project("bound")
	e.project("unbound")
	if _, err := e.svc.Parts().Egress.SetSecret(ctx, tenantAdmin, "api", types.SetSecretRequest{Value: "v1"}); err != nil {
		b.Fatal(err)
	}
	if _, err := e.svc.Parts().Egress.BindSecret(ctx, tenantAdmin, "api", types.SecretBinding{Host: "api.example.org", Scheme: "https"}); err != nil {
		b.Fatal(err)
	}
	keyOf := func(project string) string {
		var id int64
		if err := e.store.Pool().QueryRow(ctx, `SELECT id FROM projects WHERE tenant_id = $1 AND name = $2`, testTenant, project).Scan(&id); err != nil {
			b.Fatal(err)
		}
		return "project:" + strconv.FormatInt(id, 10)
	}
	// A second tenant without any secret.
	if _, err := e.store.Pool().Exec(ctx, `INSERT INTO tenants (id) VALUES ('plain') ON CONFLICT DO NOTHING`); err != nil {
		b.Fatal(err)
	}
	if _, err := e.store.Pool().Exec(ctx, `UPDATE projects SET tenant_id = 'plain' WHERE tenant_id = $1 AND name = 'unbound'`, testTenant); err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name, key string
		want      int
	}{{"bound", keyOf("bound"), 1}, {"no_secrets", "", 0}}
	var unboundID int64
	if err := e.store.Pool().QueryRow(ctx, `SELECT id FROM projects WHERE tenant_id = 'plain' AND name = 'unbound'`).Scan(&unboundID); err != nil {
		b.Fatal(err)
	}
	cases[1].key = "project:" + strconv.FormatInt(unboundID, 10)

	run := func(b *testing.B, key string, want int) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				h, err := e.svc.Parts().Egress.SecretHeaders(ctx, key, "https", "api.example.org")
				if err != nil || len(h) != want {
					b.Errorf("headers %v, %v: want %d", h, err, want)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
	}
	for _, c := range cases {
		b.Run("cache/"+c.name, func(b *testing.B) {
			deadline := time.Now().Add(10 * time.Second)
			// The listener is up once a lookup is kept: poll for it.
			for !envd.SecretsCached(e.svc, c.key) && time.Now().Before(deadline) {
				_, _ = e.svc.Parts().Egress.SecretHeaders(ctx, c.key, "https", "api.example.org")
				time.Sleep(10 * time.Millisecond)
			}
			run(b, c.key, c.want)
		})
	}
	envd.SecretCacheOff(e.svc)
	for _, c := range cases {
		b.Run("database/"+c.name, func(b *testing.B) { run(b, c.key, c.want) })
	}
}
