package api_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/apitest"
	"github.com/envd-dev/envd/api/types"
)

// The API serves the groups it was given parts for, each from its own
// part; a group without a part is not mounted: its routes answer 404
// not_found as any unknown route does.
func TestPartsServeOnlyTheirGroups(t *testing.T) {
	t.Parallel()
	r := &apitest.Recorder{}
	auth := &apitest.Auth{Recorder: r, Token: apitest.Token, Principal: types.Principal{Tenant: "t1"}}
	projects := &apitest.Projects{Recorder: r}
	h, err := api.New(api.Parts{Auth: auth, Projects: projects})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	res := do(t, srv, http.MethodGet, "/v1/projects/web", nil, nil)
	require.Equal(t, http.StatusOK, res.status, string(res.body))
	assert.Contains(t, string(res.body), `"name":"web"`)
	call, ok := r.LastCall("GetProject")
	require.True(t, ok)
	assert.Equal(t, "t1", call.Principal.Tenant)

	for _, path := range []string{"/v1/instances/i-1", "/v1/operations/op-1", "/v1/nodes", "/v1/info"} {
		res := do(t, srv, http.MethodGet, path, nil, nil)
		assert.Equal(t, http.StatusNotFound, res.status, path)
		assert.Equal(t, "not_found", errorOf(t, res).Code, path)
	}
	// Without a Join part there is no join route (which needs no token).
	res = do(t, srv, http.MethodPost, "/v1/cluster/join", nil, map[string]string{"Authorization": ""})
	assert.Equal(t, http.StatusNotFound, res.status)
	assert.Equal(t, "not_found", errorOf(t, res).Code)
}

// Every /v1 route authenticates: New refuses parts without Auth.
func TestPartsNeedAuth(t *testing.T) {
	t.Parallel()
	_, err := api.New(api.Parts{Projects: &apitest.Projects{Recorder: &apitest.Recorder{}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Auth")
}
