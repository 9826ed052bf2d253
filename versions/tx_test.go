package versions_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Writes of several aggregates in one InTx commit together or not at all,
// and each aggregate's own multi-statement write nests inside it.
func TestInTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	after := 30 * time.Minute
	create := func(tx versions.Tx) error {
		// CreateProject runs its own transaction: a savepoint here.
		if _, _, err := tx.Projects.CreateProject(ctx, versions.Project{Tenant: tenant, Name: "p", BaseImage: "reg/base@sha256:aaa"},
			versions.Version{Message: "base"}); err != nil {
			return err
		}
		if _, err := tx.Projects.SetProjectIdle(ctx, tenant, "p", versions.Idle{After: &after}); err != nil {
			return err
		}
		_, err := tx.Instances.CreateInstance(ctx, versions.Instance{ID: "i1", Tenant: tenant, Project: "p", Node: "n1", Version: 1, State: "Running"})
		return err
	}

	t.Run("a failure undoes every aggregate's writes", func(t *testing.T) {
		boom := errors.New("boom")
		err := s.InTx(ctx, func(tx versions.Tx) error {
			require.NoError(t, create(tx))
			// Seen inside the transaction...
			_, err := tx.Instances.GetInstance(ctx, tenant, "i1")
			require.NoError(t, err)
			return boom
		})
		require.ErrorIs(t, err, boom)
		// ...and gone after it.
		_, err = s.Projects.GetProject(ctx, tenant, "p")
		require.ErrorIs(t, err, errdefs.ErrNotFound)
		_, err = s.Instances.GetInstance(ctx, tenant, "i1")
		require.ErrorIs(t, err, errdefs.ErrNotFound)
	})

	t.Run("success commits them together", func(t *testing.T) {
		require.NoError(t, s.InTx(ctx, create))
		idle, err := s.Projects.ProjectIdle(ctx, tenant, "p")
		require.NoError(t, err)
		require.NotNil(t, idle.After)
		assert.Equal(t, after, *idle.After)
		in, err := s.Instances.GetInstance(ctx, tenant, "i1")
		require.NoError(t, err)
		assert.Equal(t, "p", in.Project)
	})

	t.Run("a driver error is translated", func(t *testing.T) {
		err := s.InTx(ctx, create) // the same project again
		require.ErrorIs(t, err, errdefs.ErrAlreadyExists)
	})
}
