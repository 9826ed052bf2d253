package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// badRequest is one entry of the catalogue: a request a confused or
// hostile client may send, and the stable answer it must get.
type badRequest struct {
	name, method, path, body string
	header                   map[string]string // "Authorization" defaults to the admin token; "" removes it
	status                   int
	code                     string // "" when the answer is not envd's JSON (net/http's own 431)
}

// TestBadInputCatalogue extends TestBadInputChangesNothing with the whole
// catalogue of malformed input: every request gets a 4xx with its stable
// code, nothing answers 5xx, and what a user can list (projects, versions,
// instances, images) is the same before and after.
func TestBadInputCatalogue(t *testing.T) {
	p := newProject(t, "catalogue")
	in := up(t, p, 0)
	before := snapshotState(t)
	imagesBefore, err := env.c.ListImages(ctx(t))
	require.NoError(t, err)

	long := strings.Repeat("a", 300)
	huge := `{"name": "` + strings.Repeat("x", 2<<20) + `", "base": "fixture"}`
	inst := "/v1/instances/" + in.ID
	proj := "/v1/projects/" + p
	noAuth := map[string]string{"Authorization": ""}
	key := func(k string) map[string]string { return map[string]string{"Idempotency-Key": k} }
	cases := []badRequest{
		// Authentication.
		{name: "no token", method: "GET", path: "/v1/projects", header: noAuth, status: 401, code: "unauthenticated"},
		{name: "basic auth", method: "GET", path: "/v1/projects", header: map[string]string{"Authorization": "Basic YWRtaW46YWRtaW4="}, status: 401, code: "unauthenticated"},
		{name: "empty bearer", method: "GET", path: "/v1/projects", header: map[string]string{"Authorization": "Bearer "}, status: 401, code: "unauthenticated"},
		{name: "garbage bearer", method: "GET", path: "/v1/projects", header: map[string]string{"Authorization": "Bearer \xff\xfe' OR 1=1 --"}, status: 401, code: "unauthenticated"},
		{name: "long bearer", method: "GET", path: "/v1/projects", header: map[string]string{"Authorization": "Bearer " + strings.Repeat("t", 8<<10)}, status: 401, code: "unauthenticated"},
		{name: "no token on a write", method: "POST", path: "/v1/projects", body: `{"name":"x","base":"fixture"}`, header: noAuth, status: 401, code: "unauthenticated"},
		{name: "no token on metrics", method: "GET", path: "/metrics", header: noAuth, status: 401, code: "unauthenticated"},

		// Routes and methods.
		{name: "unknown route", method: "GET", path: "/v1/nope", status: 404, code: "not_found"},
		{name: "unknown version prefix", method: "GET", path: "/v2/projects", status: 404, code: "not_found"},
		{name: "registry path on the API", method: "GET", path: "/v2/_catalog", status: 404, code: "not_found"},
		{name: "wrong method", method: "PATCH", path: "/v1/projects", status: 404, code: "not_found"},
		{name: "delete on a list", method: "DELETE", path: "/v1/projects", status: 404, code: "not_found"},
		{name: "trailing slash", method: "GET", path: "/v1/projects/", status: 404, code: "not_found"},
		{name: "dot segments", method: "GET", path: "/v1/../v1/projects/../../etc/passwd", status: 404, code: "not_found"},

		// Malformed JSON and wrong types.
		{name: "truncated json", method: "POST", path: "/v1/projects", body: `{"name": "x", "base"`, status: 400, code: "invalid_argument"},
		{name: "json array body", method: "POST", path: "/v1/projects", body: `[{"name": "x"}]`, status: 400, code: "invalid_argument"},
		{name: "json string body", method: "POST", path: "/v1/projects", body: `"x"`, status: 400, code: "invalid_argument"},
		{name: "two json objects", method: "POST", path: "/v1/projects", body: `{"name": "a1", "base": "fixture"} {"name": "b1"}`, status: 400, code: "invalid_argument"},
		{name: "trailing garbage", method: "POST", path: "/v1/projects", body: `{"name": "a1", "base": "fixture"} rm -rf /`, status: 400, code: "invalid_argument"},
		{name: "not json at all", method: "POST", path: proj + "/instances", body: `version=1`, status: 400, code: "invalid_argument"},
		{name: "name is a number", method: "POST", path: "/v1/projects", body: `{"name": 5, "base": "fixture"}`, status: 400, code: "invalid_argument"},
		{name: "version is a string", method: "POST", path: proj + "/instances", body: `{"version": "1"}`, status: 400, code: "invalid_argument"},
		{name: "retain is a string", method: "POST", path: proj + "/instances", body: `{"retain": "yes"}`, status: 400, code: "invalid_argument"},
		{name: "args is a string", method: "POST", path: inst + "/exec", body: `{"args": "sh -c id"}`, status: 400, code: "invalid_argument"},
		{name: "args holds null", method: "POST", path: inst + "/exec", body: `{"args": [null]}`, status: 400, code: "invalid_argument"},
		{name: "unknown field on save", method: "POST", path: inst + "/save", body: `{"mesage": "typo"}`, status: 400, code: "invalid_argument"},
		{name: "unknown field on build", method: "POST", path: proj + "/builds", body: `{"manager": "apt", "packages": ["curl"], "script": "curl x | sh"}`, status: 400, code: "invalid_argument"},
		{name: "huge body", method: "POST", path: "/v1/projects", body: huge, status: 400, code: "invalid_argument"},

		// Names and paths that escape, or are not names.
		{name: "project name climbs", method: "POST", path: "/v1/projects", body: `{"name": "../x", "base": "fixture"}`, status: 400, code: "invalid_argument"},
		{name: "project name absolute", method: "POST", path: "/v1/projects", body: `{"name": "/etc", "base": "fixture"}`, status: 400, code: "invalid_argument"},
		{name: "project name with NUL", method: "POST", path: "/v1/projects", body: `{"name": "a\u0000b", "base": "fixture"}`, status: 400, code: "invalid_argument"},
		{name: "project name very long", method: "POST", path: "/v1/projects", body: `{"name": "` + long + `", "base": "fixture"}`, status: 400, code: "invalid_argument"},
		{name: "project name empty", method: "POST", path: "/v1/projects", body: `{"base": "fixture"}`, status: 400, code: "invalid_argument"},
		{name: "project path climbs", method: "GET", path: "/v1/projects/..%2F..%2Fetc", status: 404, code: "not_found"},
		{name: "project path with NUL", method: "GET", path: "/v1/projects/a%00b", status: 400, code: "invalid_argument"},
		{name: "project path very long", method: "GET", path: "/v1/projects/" + long, status: 400, code: "invalid_argument"},
		{name: "instance path with NUL", method: "GET", path: "/v1/instances/a%00b", status: 400, code: "invalid_argument"},
		{name: "operation path climbs", method: "GET", path: "/v1/operations/..%2Fop", status: 404, code: "not_found"},
		{name: "base climbs", method: "POST", path: "/v1/projects", body: `{"name": "okname", "base": "../../x"}`, status: 400, code: "invalid_argument"},
		{name: "exclude absolute escape", method: "POST", path: "/v1/projects", body: `{"name": "okname", "base": "fixture", "excludes": ["/../../etc"]}`, status: 400, code: "invalid_argument"},
		{name: "exclude with NUL", method: "POST", path: "/v1/projects", body: `{"name": "okname", "base": "fixture", "excludes": ["/a\u0000"]}`, status: 400, code: "invalid_argument"},
		{name: "volume over /etc", method: "POST", path: "/v1/projects", body: `{"name": "okname", "base": "fixture", "volumes": ["w:/etc"]}`, status: 400, code: "invalid_argument"},
		{name: "volume relative", method: "POST", path: "/v1/projects", body: `{"name": "okname", "base": "fixture", "volumes": ["w:../x"]}`, status: 400, code: "invalid_argument"},
		{name: "volume path with NUL", method: "POST", path: proj + "/volumes", body: `{"spec": "w:/work\u0000x"}`, status: 400, code: "invalid_argument"},
		{name: "volume path climbs", method: "POST", path: proj + "/volumes", body: `{"spec": "w:/work/../etc"}`, status: 400, code: "invalid_argument"},
		{name: "volume size overflows", method: "POST", path: proj + "/volumes", body: `{"spec": "w:/work:99999999999999999999G"}`, status: 400, code: "invalid_argument"},
		{name: "volume uid negative", method: "POST", path: proj + "/volumes", body: `{"spec": "w:/work:-1:0"}`, status: 400, code: "invalid_argument"},
		{name: "volume PATH addition outside", method: "POST", path: proj + "/volumes", body: `{"spec": "w:/work", "path_add": ["/usr/bin"]}`, status: 400, code: "invalid_argument"},
		{name: "image name climbs", method: "POST", path: "/v1/images?name=..%2F..%2Fx", body: "x", status: 400, code: "invalid_argument"},
		{name: "image upload of another type", method: "POST", path: "/v1/images?name=okimage", body: "x", header: map[string]string{"Content-Type": "text/html"}, status: 400, code: "invalid_argument"},
		{name: "tenant name climbs", method: "PUT", path: "/v1/admin/tenants/..%2Fx/quota", body: `{}`, status: 404, code: "not_found"},
		{name: "tenant name with shell characters", method: "PUT", path: "/v1/admin/tenants/x%3Bid/quota", body: `{}`, status: 400, code: "invalid_argument"},
		{name: "exec without a command", method: "POST", path: inst + "/exec", body: `{"args": [""]}`, status: 400, code: "invalid_argument"},
		{name: "exec ws without a command", method: "GET", path: inst + "/exec/ws", status: 400, code: "invalid_argument"},
		{name: "exec ws bad tty", method: "GET", path: inst + "/exec/ws?cmd=sh&tty=maybe", status: 400, code: "invalid_argument"},
		{name: "exec ws without an upgrade", method: "GET", path: inst + "/exec/ws?cmd=sh", status: 400, code: "invalid_argument"},
		{name: "exec ws env without =", method: "GET", path: inst + "/exec/ws?cmd=true&env=NOVALUE", header: map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, status: 400, code: "invalid_argument"},
		{name: "exec ws cwd relative", method: "GET", path: inst + "/exec/ws?cmd=true&cwd=tmp", header: map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, status: 400, code: "invalid_argument"},
		{name: "exec ws bad size", method: "GET", path: inst + "/exec/ws?cmd=sh&cols=-1&rows=10", status: 400, code: "invalid_argument"},

		{name: "exec cwd relative", method: "POST", path: inst + "/exec", body: `{"args": ["true"], "cwd": "tmp"}`, status: 400, code: "invalid_argument"},
		{name: "exec cwd with NUL", method: "POST", path: inst + "/exec", body: `{"args": ["true"], "cwd": "/tmp\u0000"}`, status: 400, code: "invalid_argument"},
		{name: "exec arg with NUL", method: "POST", path: inst + "/exec", body: `{"args": ["echo", "a\u0000b"]}`, status: 400, code: "invalid_argument"},
		{name: "exec env without =", method: "POST", path: inst + "/exec", body: `{"args": ["true"], "env": ["NOVALUE"]}`, status: 400, code: "invalid_argument"},
		{name: "exec env with NUL", method: "POST", path: inst + "/exec", body: `{"args": ["true"], "env": ["A=\u0000"]}`, status: 400, code: "invalid_argument"},
		{name: "save message with NUL", method: "POST", path: inst + "/save", body: `{"message": "a\u0000b"}`, status: 400, code: "invalid_argument"},
		{name: "save message too long", method: "POST", path: inst + "/save", body: `{"message": "` + strings.Repeat("m", 5000) + `"}`, status: 400, code: "invalid_argument"},
		{name: "base with a bad digest", method: "POST", path: "/v1/projects", body: `{"name": "okname", "base": "fixture@sha256:zz"}`, status: 400, code: "invalid_argument"},
		{name: "image name empty", method: "POST", path: "/v1/images?name=", body: "x", status: 400, code: "invalid_argument"},
		{name: "image name with NUL", method: "POST", path: "/v1/images?name=a%00b", body: "x", status: 400, code: "invalid_argument"},
		{name: "tenant name very long", method: "GET", path: "/v1/admin/tenants/" + long + "/usage", status: 400, code: "invalid_argument"},
		{name: "path version in hex", method: "GET", path: proj + "/versions/0x1", status: 400, code: "invalid_argument"},
		{name: "cancel unknown operation", method: "DELETE", path: "/v1/operations/op-00000000", status: 404, code: "not_found"},

		// Package names a shell would read.
		{name: "package with ;", method: "POST", path: proj + "/builds", body: `{"manager": "apt", "packages": ["curl;rm -rf /"]}`, status: 400, code: "invalid_argument"},
		{name: "package with $()", method: "POST", path: proj + "/builds", body: `{"manager": "apt", "packages": ["$(id)"]}`, status: 400, code: "invalid_argument"},
		{name: "package with backticks", method: "POST", path: proj + "/builds", body: "{\"manager\": \"apk\", \"packages\": [\"`id`\"]}", status: 400, code: "invalid_argument"},
		{name: "package as an option", method: "POST", path: proj + "/builds", body: `{"manager": "apt", "packages": ["--allow-unauthenticated"]}`, status: 400, code: "invalid_argument"},
		{name: "package with a space", method: "POST", path: proj + "/builds", body: `{"manager": "apt", "packages": ["curl -o x"]}`, status: 400, code: "invalid_argument"},
		{name: "package version with a pipe", method: "POST", path: proj + "/builds", body: `{"manager": "apt", "packages": ["curl=1|sh"]}`, status: 400, code: "invalid_argument"},
		{name: "package with newline", method: "POST", path: proj + "/builds", body: `{"manager": "apt", "packages": ["curl\nid"]}`, status: 400, code: "invalid_argument"},
		{name: "unknown package manager", method: "POST", path: proj + "/builds", body: `{"manager": "curl|sh", "packages": ["x1"]}`, status: 400, code: "invalid_argument"},
		{name: "no packages", method: "POST", path: proj + "/builds", body: `{"manager": "apt", "packages": []}`, status: 400, code: "invalid_argument"},
		{name: "too many packages", method: "POST", path: proj + "/builds", body: `{"manager": "apt", "packages": [` + strings.Repeat(`"x1",`, 200) + `"x2"]}`, status: 400, code: "invalid_argument"},
		{name: "empty validation command", method: "POST", path: proj + "/builds", body: `{"manager": "apt", "packages": ["x1"], "validate": [[]]}`, status: 400, code: "invalid_argument"},

		// Negative and overflowing numbers.
		{name: "version negative", method: "POST", path: proj + "/instances", body: `{"version": -1}`, status: 400, code: "invalid_argument"},
		{name: "version overflows", method: "POST", path: proj + "/instances", body: `{"version": 99999999999999999999}`, status: 400, code: "invalid_argument"},
		{name: "version fraction", method: "POST", path: proj + "/instances", body: `{"version": 1.5}`, status: 400, code: "invalid_argument"},
		{name: "version exponent", method: "POST", path: proj + "/instances", body: `{"version": 1e400}`, status: 400, code: "invalid_argument"},
		{name: "path version negative", method: "GET", path: proj + "/versions/-1", status: 400, code: "invalid_argument"},
		{name: "path version overflows", method: "GET", path: proj + "/versions/99999999999999999999", status: 400, code: "invalid_argument"},
		{name: "pin version zero", method: "POST", path: proj + "/versions/0/pin", status: 400, code: "invalid_argument"},
		{name: "switch to a negative version", method: "POST", path: proj + "/current", body: `{"version": -3, "expected_current": 1}`, status: 400, code: "invalid_argument"},
		{name: "expected current negative", method: "POST", path: inst + "/save", body: `{"expected_current": -1}`, status: 400, code: "invalid_argument"},
		{name: "generation overflows", method: "POST", path: inst + "/save", body: `{"generation": 99999999999999999999}`, status: 400, code: "invalid_argument"},
		{name: "build from negative", method: "POST", path: proj + "/builds", body: `{"manager": "apt", "packages": ["x1"], "from": -1}`, status: 400, code: "invalid_argument"},
		{name: "keep_last negative", method: "PUT", path: proj + "/retention", body: `{"keep_last": -1}`, status: 400, code: "invalid_argument"},
		{name: "quota negative", method: "PUT", path: "/v1/admin/tenants/admin/quota", body: `{"max_instances": -1}`, status: 400, code: "invalid_argument"},
		{name: "quota bytes overflow", method: "PUT", path: "/v1/admin/tenants/admin/quota", body: `{"max_stored_bytes": 1e30}`, status: 400, code: "invalid_argument"},
		{name: "event cursor negative", method: "GET", path: "/v1/operations/op-00000000/events?after=-1", status: 400, code: "invalid_argument"},
		{name: "event cursor not a number", method: "GET", path: "/v1/operations/op-00000000/events?after=x", status: 400, code: "invalid_argument"},

		// Durations.
		{name: "ttl not a duration", method: "POST", path: proj + "/instances", body: `{"ttl": "forever"}`, status: 400, code: "invalid_argument"},
		{name: "ttl negative", method: "POST", path: proj + "/instances", body: `{"ttl": "-5m"}`, status: 400, code: "invalid_argument"},
		{name: "ttl overflows", method: "POST", path: proj + "/instances", body: `{"ttl": "99999999999h"}`, status: 400, code: "invalid_argument"},
		{name: "ttl zero", method: "POST", path: proj + "/instances", body: `{"ttl": "0s"}`, status: 400, code: "invalid_argument"},
		{name: "renew without ttl", method: "POST", path: inst + "/renew", body: `{}`, status: 400, code: "invalid_argument"},
		{name: "renew bad ttl", method: "POST", path: inst + "/renew", body: `{"ttl": "1 hour"}`, status: 400, code: "invalid_argument"},
		{name: "exec timeout zero", method: "POST", path: inst + "/exec", body: `{"args": ["true"], "timeout": "0s"}`, status: 400, code: "invalid_argument"},
		{name: "exec timeout garbage", method: "POST", path: inst + "/exec", body: `{"args": ["true"], "timeout": "soon"}`, status: 400, code: "invalid_argument"},
		{name: "retention age garbage", method: "PUT", path: proj + "/retention", body: `{"keep_newer_than": "30 days"}`, status: 400, code: "invalid_argument"},
		{name: "quota max ttl garbage", method: "PUT", path: "/v1/admin/tenants/admin/quota", body: `{"max_ttl": "-1h"}`, status: 400, code: "invalid_argument"},

		// Idempotency keys.
		{name: "idempotency key of 256 bytes", method: "POST", path: "/v1/projects", body: `{"name": "okname", "base": "fixture"}`, header: key(strings.Repeat("k", 256)), status: 400, code: "invalid_argument"},
		{name: "idempotency key of 4 KiB on save", method: "POST", path: inst + "/save", body: `{}`, header: key(strings.Repeat("k", 4<<10)), status: 400, code: "invalid_argument"},
		{name: "idempotency key of 4 KiB on start", method: "POST", path: proj + "/instances", body: `{}`, header: key(strings.Repeat("k", 4<<10)), status: 400, code: "invalid_argument"},
		{name: "idempotency key of 4 KiB on build", method: "POST", path: proj + "/builds", body: `{"manager": "apt", "packages": ["x1"]}`, header: key(strings.Repeat("k", 4<<10)), status: 400, code: "invalid_argument"},
		{name: "idempotency key of 4 KiB on gc", method: "POST", path: "/v1/admin/gc", body: `{"dry_run": true}`, header: key(strings.Repeat("k", 4<<10)), status: 400, code: "invalid_argument"},
		{name: "idempotency key with a tab", method: "POST", path: inst + "/save", body: `{}`, header: key("a\tb"), status: 400, code: "invalid_argument"},

		// Headers past the server's limit.
		{name: "huge header", method: "GET", path: "/v1/projects", header: map[string]string{"X-Filler": strings.Repeat("f", 128<<10)}, status: 431},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { checkBadRequest(t, tc) })
	}
	assert.Equal(t, before, snapshotState(t), "bad requests must not change projects, versions or instances")
	imagesAfter, err := env.c.ListImages(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, imagesBefore, imagesAfter, "bad requests must not change images")
}

func checkBadRequest(t *testing.T, tc badRequest) {
	t.Helper()
	u, err := url.Parse(env.node.URL)
	require.NoError(t, err)
	// Opaque keeps the path exactly as written (dot segments, escapes).
	u.Opaque = "//" + u.Host + strings.SplitN(tc.path, "?", 2)[0]
	if _, q, ok := strings.Cut(tc.path, "?"); ok {
		u.RawQuery = q
	}
	req, err := http.NewRequest(tc.method, u.String(), strings.NewReader(tc.body))
	require.NoError(t, err)
	req.URL.Opaque = u.Opaque
	req.Header.Set("Authorization", "Bearer "+env.node.Token)
	if tc.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range tc.header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	assert.Lessf(t, resp.StatusCode, 500, "body %s", raw)
	assert.Equalf(t, tc.status, resp.StatusCode, "body %.300s", raw)
	if tc.code == "" {
		return
	}
	var body struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	require.NoErrorf(t, json.Unmarshal(raw, &body), "body %.300s", raw)
	assert.Equal(t, tc.code, body.Error.Code)
	assert.NotEmpty(t, body.Error.Message)
}
