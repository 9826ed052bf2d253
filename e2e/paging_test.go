package e2e

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

// Through a real node (every answer validated against docs/openapi.yaml,
// its Link header included): a project's versions and instances read page
// by page with the Go client are the whole lists, in order.
func TestPagedLists(t *testing.T) {
	t.Parallel()
	p := newProject(t, "paged")
	in := up(t, p, 0)
	mustSh(t, in.ID, "echo 1 > /home/one")
	save(t, in.ID, "two")
	mustSh(t, in.ID, "echo 2 > /home/two")
	save(t, in.ID, "three")
	up(t, p, 0)

	var nums []int
	tok := ""
	for range 10 {
		vs, next, err := env.c.ListVersionsPage(ctx(t), p, types.Page{Limit: 1, Token: tok})
		require.NoError(t, err)
		for _, v := range vs {
			nums = append(nums, v.Number)
		}
		if tok = next; tok == "" {
			break
		}
	}
	assert.Equal(t, []int{1, 2, 3}, nums)

	whole, err := env.c.ListInstances(ctx(t), p)
	require.NoError(t, err)
	var ids, want []string
	for _, w := range whole {
		want = append(want, w.ID)
	}
	tok = ""
	for range 10 {
		ins, next, err := env.c.ListInstancesPage(ctx(t), p, types.Page{Limit: 1, Token: tok})
		require.NoError(t, err)
		for _, i := range ins {
			ids = append(ids, i.ID)
		}
		if tok = next; tok == "" {
			break
		}
	}
	assert.Len(t, want, 2)
	assert.Equal(t, want, ids)

	_, _, err = env.c.ListVersionsPage(ctx(t), p, types.Page{Token: "bm90LWEtdG9rZW4"})
	assert.ErrorContains(t, err, "invalid_argument")
}
