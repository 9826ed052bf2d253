package envd_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Pages of versions and instances, followed by their tokens, give each
// item once; a token that is not one the list gave is invalid_argument.
func TestCorePaging(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)
	e.project("paged")
	_, err := e.store.Pool().Exec(e.ctx, `INSERT INTO versions (project_id, number, kind, state, image)
		SELECT p.id, g, 'snapshot', 'ready', 'x@sha256:' || g FROM projects p, generate_series(2, 7) g WHERE p.name = 'paged'`)
	require.NoError(t, err)
	var nums []int
	tok := ""
	for {
		vs, next, err := e.svc.ListVersionsPage(e.ctx, e.user, "paged", types.Page{Limit: 3, Token: tok})
		require.NoError(t, err)
		for _, v := range vs {
			nums = append(nums, v.Number)
		}
		if next == "" {
			break
		}
		tok = next
	}
	assert.Equal(t, []int{1, 2, 3, 4, 5, 6, 7}, nums)

	a := e.instance("paged", types.CreateInstanceRequest{})
	b := e.instance("paged", types.CreateInstanceRequest{})
	first, next, err := e.svc.Parts().Instances.ListInstancesPage(e.ctx, e.user, "", types.Page{Limit: 1})
	require.NoError(t, err)
	require.Len(t, first, 1)
	require.NotEmpty(t, next)
	second, last, err := e.svc.Parts().Instances.ListInstancesPage(e.ctx, e.user, "paged", types.Page{Limit: 1, Token: next})
	require.NoError(t, err)
	require.Len(t, second, 1)
	assert.Equal(t, []string{a.ID, b.ID}, []string{first[0].ID, second[0].ID})
	assert.Empty(t, last, "the second page is the last")

	for _, bad := range []string{"not base64!", tok[:len(tok)-2], next} {
		_, _, err := e.svc.ListVersionsPage(e.ctx, e.user, "paged", types.Page{Token: bad})
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "versions with token %q", bad)
	}
	_, _, err = e.svc.Parts().Instances.ListInstancesPage(e.ctx, e.user, "", types.Page{Token: tok})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "a versions token for instances")
	_, _, err = e.svc.ListVersionsPage(e.ctx, e.user, "paged", types.Page{Limit: 1001})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}
