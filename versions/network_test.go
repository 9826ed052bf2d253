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

// The docker setting is stored and read back; the table refuses it on any
// class but gvisor, from either side, so racing changes cannot combine
// into docker on runc.
func TestProjectDocker(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	p := newProject(t, s)
	assert.False(t, p.Docker, "default")

	_, err := s.Projects.SetProjectDocker(ctx, tenant, "p", true)
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "docker on the node-default class")
	_, err = s.Projects.SetProjectRuntimeClass(ctx, tenant, "p", "gvisor")
	require.NoError(t, err)
	got, err := s.Projects.SetProjectDocker(ctx, tenant, "p", true)
	require.NoError(t, err)
	assert.True(t, got.Docker)
	again, err := s.Projects.GetProject(ctx, tenant, "p")
	require.NoError(t, err)
	assert.True(t, again.Docker)
	_, err = s.Projects.SetProjectRuntimeClass(ctx, tenant, "p", "runc")
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "a docker project's class off gvisor")

	created, _, err := s.Projects.CreateProject(ctx, versions.Project{Tenant: tenant, Name: "d", BaseImage: "reg/base@sha256:aaa",
		RuntimeClass: "gvisor", Docker: true}, versions.Version{Message: "base"})
	require.NoError(t, err)
	assert.True(t, created.Docker)
	_, _, err = s.Projects.CreateProject(ctx, versions.Project{Tenant: tenant, Name: "r", BaseImage: "reg/base@sha256:aaa",
		RuntimeClass: "runc", Docker: true}, versions.Version{Message: "base"})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)

	_, err = s.Projects.SetProjectDocker(ctx, tenant, "missing", false)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}
