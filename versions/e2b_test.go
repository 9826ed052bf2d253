package versions_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// An E2B sandbox record is kept by instance id, replaced by a second put,
// read for the ids that have one, and refused for an unknown instance.
func TestE2BSandboxes(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	newProject(t, s)
	newInstance(t, s, "p-1")
	newInstance(t, s, "p-2")

	rec := versions.E2BSandbox{Template: "base:1", Metadata: map[string]string{"k": "v"}, Env: map[string]string{"A": "b"}}
	require.NoError(t, s.Instances.PutE2BSandbox(ctx, "p-1", rec))
	got, err := s.Instances.E2BSandboxes(ctx, []string{"p-1", "p-2", "nope"})
	require.NoError(t, err)
	assert.Equal(t, map[string]versions.E2BSandbox{"p-1": rec}, got)

	require.NoError(t, s.Instances.PutE2BSandbox(ctx, "p-1", versions.E2BSandbox{Template: "base"}))
	got, err = s.Instances.E2BSandboxes(ctx, []string{"p-1"})
	require.NoError(t, err)
	assert.Equal(t, versions.E2BSandbox{Template: "base", Metadata: map[string]string{}, Env: map[string]string{}}, got["p-1"])

	assert.ErrorIs(t, s.Instances.PutE2BSandbox(ctx, "nope", rec), errdefs.ErrFailedPrecondition, "no such instance")
	got, err = s.Instances.E2BSandboxes(ctx, nil)
	require.NoError(t, err)
	assert.Empty(t, got)
}
