package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bad requests get a clear error with a stable code, and change nothing.
func TestBadInputChangesNothing(t *testing.T) {
	p := newProject(t, "badinput")
	before := snapshotState(t)
	token := env.node.Token
	cases := []struct {
		name, method, path, token, body string
		status                          int
		code                            string
	}{
		{"missing token", "GET", "/v1/projects", "", "", 401, "unauthenticated"},
		{"wrong token", "GET", "/v1/projects", "nope", "", 401, "unauthenticated"},
		{"unknown project", "GET", "/v1/projects/no-such-project", token, "", 404, "not_found"},
		{"unknown instance", "GET", "/v1/instances/no-such-instance", token, "", 404, "not_found"},
		{"instance id escapes", "GET", "/v1/instances/..%2F..%2Fetc", token, "", 404, "not_found"},
		{"instance id with shell characters", "GET", "/v1/instances/x%3Brm%20-rf%20%2A", token, "", 400, "invalid_argument"},
		{"unknown version", "GET", "/v1/projects/" + p + "/versions/99", token, "", 404, "not_found"},
		{"version not a number", "GET", "/v1/projects/" + p + "/versions/abc", token, "", 400, "invalid_argument"},
		{"malformed json", "POST", "/v1/projects", token, `{"name": "x", `, 400, "invalid_argument"},
		{"unknown field", "POST", "/v1/projects", token, `{"name": "x", "base": "fixture", "colour": 1}`, 400, "invalid_argument"},
		{"invalid project name", "POST", "/v1/projects", token, `{"name": "Bad_Name", "base": "fixture"}`, 400, "invalid_argument"},
		{"project name with shell characters", "POST", "/v1/projects", token, `{"name": "x;rm -rf /", "base": "fixture"}`, 400, "invalid_argument"},
		{"invalid base ref", "POST", "/v1/projects", token, `{"name": "okname", "base": "UPPER/../x"}`, 400, "invalid_argument"},
		{"unknown base image", "POST", "/v1/projects", token, `{"name": "okname", "base": "no-such-image"}`, 404, "not_found"},
		{"exclude escapes", "POST", "/v1/projects", token, `{"name": "okname", "base": "fixture", "excludes": ["../etc"]}`, 400, "invalid_argument"},
		{"unknown compression", "POST", "/v1/projects", token, `{"name": "okname", "base": "fixture", "compression": "lz4"}`, 400, "invalid_argument"},
		{"duplicate project", "POST", "/v1/projects", token, `{"name": "` + p + `", "base": "fixture"}`, 409, "already_exists"},
		{"negative ttl", "POST", "/v1/projects/" + p + "/instances", token, `{"ttl": "-1h"}`, 400, "invalid_argument"},
		{"start missing version", "POST", "/v1/projects/" + p + "/instances", token, `{"version": 42}`, 404, "not_found"},
		{"switch to missing version", "POST", "/v1/projects/" + p + "/current", token, `{"version": 42, "expected_current": 1}`, 404, "not_found"},
		{"switch without expected_current", "POST", "/v1/projects/" + p + "/current", token, `{"version": 1}`, 400, "invalid_argument"},
		{"switch to version 0", "POST", "/v1/projects/" + p + "/current", token, `{"version": 0}`, 400, "invalid_argument"},
		{"save unknown instance", "POST", "/v1/instances/nope-12345678/save", token, `{}`, 404, "not_found"},
		{"exec without command", "POST", "/v1/instances/nope-12345678/exec", token, `{"args": []}`, 400, "invalid_argument"},
		{"import image with bad name", "POST", "/v1/images?name=../../x", token, "not a tar", 400, "invalid_argument"},
		{"import image that is not a tar", "POST", "/v1/images?name=garbage", token, "not a tar at all", 400, "invalid_argument"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, env.node.URL+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			var body struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			require.NoErrorf(t, json.Unmarshal(raw, &body), "body %s", raw)
			assert.Equalf(t, tc.status, resp.StatusCode, "body %s", raw)
			assert.Equal(t, tc.code, body.Error.Code)
			assert.NotEmpty(t, body.Error.Message)
		})
	}
	assert.Equal(t, before, snapshotState(t), "bad requests must not change projects, versions or instances")
}

// snapshotState is what a user could list: projects with their current
// version and version count, and instances.
func snapshotState(t *testing.T) map[string]any {
	t.Helper()
	out := map[string]any{}
	ps, err := env.c.ListProjects(ctx(t))
	require.NoError(t, err)
	for _, p := range ps {
		vs, err := env.c.ListVersions(ctx(t), p.Name)
		require.NoError(t, err)
		out["project/"+p.Name] = []int{p.Current, len(vs)}
	}
	ins, err := env.c.ListInstances(ctx(t), "")
	require.NoError(t, err)
	for _, in := range ins {
		out["instance/"+in.ID] = in.State
	}
	return out
}
