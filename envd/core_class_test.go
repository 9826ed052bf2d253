package envd_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/runtime"
)

// A project's runtime class reaches its instances, and an admin's
// restriction of the tenant's classes refuses what it does not allow
// before anything is made.
func TestCoreRuntimeClass(t *testing.T) {
	t.Parallel()
	e := newCoreEnv(t, nil)

	sandboxed, err := e.svc.CreateProject(e.ctx, e.user, types.CreateProjectRequest{Name: "sb", Base: baseImage, RuntimeClass: "gvisor"}, "")
	require.NoError(t, err)
	assert.Equal(t, "gvisor", sandboxed.RuntimeClass)
	got, err := e.svc.GetProject(e.ctx, e.user, "sb")
	require.NoError(t, err)
	assert.Equal(t, "gvisor", got.RuntimeClass, "shown by GET")
	in := e.instance("sb", types.CreateInstanceRequest{})
	spec, ok := e.rt.Spec(in.ID)
	require.True(t, ok)
	assert.Equal(t, runtime.ClassGVisor, spec.Class, "the instance runs on the project's class")

	plain := e.project("plain")
	assert.Empty(t, plain.RuntimeClass, "no class: each node's default")
	in = e.instance("plain", types.CreateInstanceRequest{})
	spec, _ = e.rt.Spec(in.ID)
	assert.Equal(t, runtime.Class(""), spec.Class, "the node's default decides")

	_, err = e.svc.CreateProject(e.ctx, e.user, types.CreateProjectRequest{Name: "bad", Base: baseImage, RuntimeClass: "kata"}, "")
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	_, err = e.svc.SetQuota(e.ctx, e.admin, testTenant, types.Quota{RuntimeClasses: []string{"firecracker"}})
	require.ErrorIs(t, err, errdefs.ErrInvalidArgument, "an unknown class in a restriction")

	// The admin lets the tenant use gVisor only.
	q, err := e.svc.SetQuota(e.ctx, e.admin, testTenant, types.Quota{RuntimeClasses: []string{"gvisor", "gvisor"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"gvisor"}, q.RuntimeClasses)
	u, err := e.svc.Usage(e.ctx, e.user, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"gvisor"}, u.Quota.RuntimeClasses, "the tenant sees its restriction")

	_, err = e.svc.CreateProject(e.ctx, e.user, types.CreateProjectRequest{Name: "shared", Base: baseImage, RuntimeClass: "runc"}, "")
	require.ErrorIs(t, err, errdefs.ErrPermissionDenied)
	assert.Equal(t, "runc", errdefs.Details(err)["runtime_class"])
	assert.Equal(t, []string{"gvisor"}, errdefs.Details(err)["allowed_runtime_classes"])
	_, err = e.svc.GetProject(e.ctx, e.user, "shared")
	require.ErrorIs(t, err, errdefs.ErrNotFound, "nothing was made")
	_, err = e.svc.SetProjectRuntimeClass(e.ctx, e.user, "sb", types.ProjectRuntimeClass{RuntimeClass: "runc"})
	require.ErrorIs(t, err, errdefs.ErrPermissionDenied)
	got, err = e.svc.GetProject(e.ctx, e.user, "sb")
	require.NoError(t, err)
	assert.Equal(t, "gvisor", got.RuntimeClass, "a refused setting changes nothing")

	// "plain" names no class; this node's default (runc) is not allowed.
	before, err := e.svc.Parts().Instances.ListInstances(e.ctx, e.user, "plain")
	require.NoError(t, err)
	_, err = e.svc.Parts().Instances.CreateInstance(e.ctx, e.user, "plain", types.CreateInstanceRequest{}, "")
	require.ErrorIs(t, err, errdefs.ErrPermissionDenied)
	assert.Equal(t, "runc", errdefs.Details(err)["runtime_class"])
	after, err := e.svc.Parts().Instances.ListInstances(e.ctx, e.user, "plain")
	require.NoError(t, err)
	assert.Len(t, after, len(before), "no instance was recorded")

	// Setting the allowed class lets it start, on that class.
	p, err := e.svc.SetProjectRuntimeClass(e.ctx, e.user, "plain", types.ProjectRuntimeClass{RuntimeClass: "gvisor"})
	require.NoError(t, err)
	assert.Equal(t, "gvisor", p.RuntimeClass)
	in = e.instance("plain", types.CreateInstanceRequest{})
	spec, _ = e.rt.Spec(in.ID)
	assert.Equal(t, runtime.ClassGVisor, spec.Class)
	ps, err := e.svc.ListProjects(e.ctx, e.user)
	require.NoError(t, err)
	for _, p := range ps {
		assert.Equal(t, "gvisor", p.RuntimeClass, "listed: %s", p.Name)
	}

	// Lifting the restriction: any class again.
	q, err = e.svc.SetQuota(e.ctx, e.admin, testTenant, types.Quota{})
	require.NoError(t, err)
	assert.Empty(t, q.RuntimeClasses)
	_, err = e.svc.SetProjectRuntimeClass(e.ctx, e.user, "plain", types.ProjectRuntimeClass{RuntimeClass: "runc"})
	require.NoError(t, err)
}
