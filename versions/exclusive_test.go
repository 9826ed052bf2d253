package versions_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Of many saves of one instance created at once (as through several
// nodes), exactly one is created; the others are refused naming it. A
// retry of the created one's key returns it; once it finished, the next
// is created.
func TestCreateExclusiveOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	p := newProject(t, s)
	in := newInstance(t, s, "excl-"+p.Tenant)
	saveOp := func(id, key string) versions.Operation {
		return versions.Operation{ID: id, Tenant: p.Tenant, Kind: "save", Target: in.ID, IdempotencyKey: key, RequestHash: "h-" + key, Node: "n1"}
	}

	const n = 8
	var (
		wg      sync.WaitGroup
		created [n]bool
		errs    [n]error
		ops     [n]versions.Operation
	)
	for i := range n {
		wg.Go(func() {
			ops[i], created[i], errs[i] = s.Operations.CreateExclusiveOperation(ctx, saveOp(fmt.Sprintf("op-x%d-%s", i, p.Tenant), fmt.Sprint("k", i)), []types.OpKind{"save"})
		})
	}
	wg.Wait()
	winner := -1
	for i := range n {
		if errs[i] == nil {
			require.Equal(t, -1, winner, "two saves were created")
			require.True(t, created[i])
			winner = i
		}
	}
	require.NotEqual(t, -1, winner, "no save was created")
	for i := range n {
		if i == winner {
			continue
		}
		require.ErrorIs(t, errs[i], errdefs.ErrFailedPrecondition)
		assert.Contains(t, errs[i].Error(), ops[winner].ID)
		assert.Equal(t, ops[winner].ID, errdefs.Details(errs[i])["operation"])
	}

	// A retry of the running save's key is that save.
	again, c, err := s.Operations.CreateExclusiveOperation(ctx, saveOp("op-retry-"+p.Tenant, fmt.Sprint("k", winner)), []types.OpKind{"save"})
	require.NoError(t, err)
	assert.False(t, c)
	assert.Equal(t, ops[winner].ID, again.ID)

	// Other kinds are not held back; an unknown instance is not found.
	_, c, err = s.Operations.CreateExclusiveOperation(ctx, versions.Operation{ID: "op-other-" + p.Tenant, Tenant: p.Tenant, Kind: "restore", Target: in.ID}, []types.OpKind{"restore"})
	require.NoError(t, err)
	assert.True(t, c)
	_, _, err = s.Operations.CreateExclusiveOperation(ctx, versions.Operation{ID: "op-nope-" + p.Tenant, Tenant: p.Tenant, Kind: "save", Target: "nope"}, []types.OpKind{"save"})
	require.ErrorIs(t, err, errdefs.ErrNotFound)

	got, err := s.Operations.UnfinishedOperationOn(ctx, in.ID, []types.OpKind{"save"})
	require.NoError(t, err)
	assert.Equal(t, ops[winner].ID, got.ID)
	require.NoError(t, s.Operations.FinishOperation(ctx, ops[winner].ID, versions.OpSucceeded, nil, nil))
	_, err = s.Operations.UnfinishedOperationOn(ctx, in.ID, []types.OpKind{"save"})
	require.ErrorIs(t, err, errdefs.ErrNotFound)
	next, c, err := s.Operations.CreateExclusiveOperation(ctx, saveOp("op-next-"+p.Tenant, "k-next"), []types.OpKind{"save"})
	require.NoError(t, err)
	assert.True(t, c)
	assert.Equal(t, "op-next-"+p.Tenant, next.ID)
}
