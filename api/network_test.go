package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSetProjectNetwork(t *testing.T) {
	t.Parallel()
	core, srv := newServer(t)
	r := do(t, srv, http.MethodPut, "/v1/projects/web/network", strings.NewReader(`{"egress": "allow:10.0.0.0/8,example.org", "isolate_instances": true}`), nil)
	require.Equal(t, http.StatusOK, r.status, "body %s", r.body)
	call, ok := core.LastCall("SetProjectNetwork")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.ProjectNetwork{Egress: "allow:10.0.0.0/8,example.org", IsolateInstances: true}}, call.Args)
	var p types.Project
	require.NoError(t, json.Unmarshal(r.body, &p))
	assert.Equal(t, "allow:10.0.0.0/8,example.org", p.Egress)
	assert.True(t, p.IsolateInstances)

	r = do(t, srv, http.MethodPut, "/v1/projects/web/network", strings.NewReader(`{"egress": 3}`), nil)
	assert.Equal(t, http.StatusBadRequest, r.status)
}
