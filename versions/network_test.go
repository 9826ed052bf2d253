package versions_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

func TestProjectNetwork(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	p := newProject(t, s)
	assert.Equal(t, "open", p.Egress, "default")
	assert.False(t, p.IsolateInstances)

	got, err := s.Projects.SetProjectNetwork(ctx, tenant, "p", "allow:10.0.0.0/8,example.org", true)
	require.NoError(t, err)
	assert.Equal(t, "allow:10.0.0.0/8,example.org", got.Egress)
	assert.True(t, got.IsolateInstances)
	again, err := s.Projects.GetProject(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, got.Egress, again.Egress)
	assert.True(t, again.IsolateInstances)

	created, _, err := s.Projects.CreateProject(ctx, versions.Project{Tenant: tenant, Name: "q", BaseImage: "reg/base@sha256:aaa", Egress: "none"},
		versions.Version{Message: "base"})
	require.NoError(t, err)
	assert.Equal(t, "none", created.Egress)

	_, err = s.Projects.SetProjectNetwork(ctx, tenant, "missing", "open", false)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}
