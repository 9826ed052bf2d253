package versions_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

func TestNodeRegistry(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	_, err := s.Nodes.NodeURL(ctx, "n1")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	require.NoError(t, s.Nodes.RegisterNode(ctx, "n1", "http://127.0.0.1:1"))
	require.NoError(t, s.Nodes.RegisterNode(ctx, "n1", "http://127.0.0.1:2"))
	u, err := s.Nodes.NodeURL(ctx, "n1")
	require.NoError(t, err)
	assert.Equal(t, "http://127.0.0.1:2", u, "a restart replaces the address")
}
