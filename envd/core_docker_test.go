package envd_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime"
)

// A project's docker setting reaches its instances; it is refused, before
// anything is made, on a project whose class is not gvisor, and a docker
// project's class cannot move off gvisor.
func TestCoreDocker(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)

	d, err := e.svc.CreateProject(e.ctx, e.user, types.CreateProjectRequest{Name: "dind", Base: baseImage, RuntimeClass: "gvisor", Docker: true}, "")
	require.NoError(t, err)
	assert.True(t, d.Docker)
	in := e.instance("dind", types.CreateInstanceRequest{})
	spec, ok := e.rt.Spec(in.ID)
	require.True(t, ok)
	assert.True(t, spec.Docker, "the instance is a docker instance")
	assert.Equal(t, runtime.ClassGVisor, spec.Class)

	for _, class := range []string{"runc", ""} {
		_, err = e.svc.CreateProject(e.ctx, e.user, types.CreateProjectRequest{Name: "bad", Base: baseImage, RuntimeClass: class, Docker: true}, "")
		require.ErrorIs(t, err, runtime.ErrDockerNeedsGVisor, "class %q", class)
		assert.Equal(t, "failed_precondition", errdefs.Code(err))
		assert.Equal(t, "docker", errdefs.Details(err)["feature"])
		_, err = e.svc.GetProject(e.ctx, e.user, "bad")
		require.ErrorIs(t, err, errdefs.ErrNotFound, "nothing was made")
	}

	_, err = e.svc.SetProjectRuntimeClass(e.ctx, e.user, "dind", types.ProjectRuntimeClass{RuntimeClass: "runc"})
	require.ErrorIs(t, err, runtime.ErrDockerNeedsGVisor)
	plain := e.project("plain")
	assert.False(t, plain.Docker)
	_, err = e.svc.SetProjectDocker(e.ctx, e.user, "plain", types.ProjectDocker{Docker: true})
	require.ErrorIs(t, err, runtime.ErrDockerNeedsGVisor)
	in = e.instance("plain", types.CreateInstanceRequest{})
	spec, _ = e.rt.Spec(in.ID)
	assert.False(t, spec.Docker)

	got, err := e.svc.SetProjectDocker(e.ctx, e.user, "dind", types.ProjectDocker{Docker: false})
	require.NoError(t, err)
	assert.False(t, got.Docker)
	got, err = e.svc.SetProjectRuntimeClass(e.ctx, e.user, "dind", types.ProjectRuntimeClass{RuntimeClass: "runc"})
	require.NoError(t, err, "docker off, the class may move")
	assert.Equal(t, "runc", got.RuntimeClass)
}
