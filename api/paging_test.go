package api_test

import (
	"encoding/json"
	"net/url"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

var nextLink = regexp.MustCompile(`^<([^>]+)>; rel="next"$`)

// A client follows the Link headers of a paged list to its end; a list
// asked without paging is whole, as before; a bad limit is a 400.
func TestPagedListFollowsLinks(t *testing.T) {
	core, srv := newServer(t)
	path := "/v1/projects/web/versions?limit=1"
	var got []int
	for range 5 {
		r := do(t, srv, "GET", path, nil, nil)
		require.Equal(t, 200, r.status, "%s", r.body)
		var vs []types.Version
		require.NoError(t, json.Unmarshal(r.body, &vs))
		for _, v := range vs {
			got = append(got, v.Number)
		}
		link := r.header.Get("Link")
		if link == "" {
			break
		}
		m := nextLink.FindStringSubmatch(link)
		require.NotNil(t, m, "Link %q", link)
		u, err := url.Parse(m[1])
		require.NoError(t, err)
		assert.Equal(t, "/v1/projects/web/versions", u.Path)
		assert.Equal(t, "1", u.Query().Get("limit"), "the next page keeps the limit")
		path = u.String()
	}
	assert.Equal(t, []int{1, 2, 3}, got)
	call, ok := core.LastCall("ListVersionsPage")
	require.True(t, ok)
	assert.Equal(t, []any{"web", types.Page{Limit: 1, Token: "3"}}, call.Args)

	r := do(t, srv, "GET", "/v1/projects/web/versions", nil, nil)
	assert.Equal(t, 200, r.status)
	assert.Empty(t, r.header.Get("Link"))
	_, ok = core.LastCall("ListVersions")
	assert.True(t, ok, "no limit and no token: the whole list")

	for _, q := range []string{"limit=0", "limit=1001", "limit=x"} {
		r := do(t, srv, "GET", "/v1/instances?"+q, nil, nil)
		assert.Equal(t, 400, r.status, q)
		assert.Equal(t, "invalid_argument", errorOf(t, r).Code, q)
	}
}
