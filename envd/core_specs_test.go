package envd_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// A saved version's exported spec carries the files it changed under /etc,
// and nothing outside; a version not ready or unknown is refused.
func TestCoreVersionSpecOfASnapshot(t *testing.T) {
	e := newCoreEnv(t, nil)
	e.project("p")
	in := e.instance("p", types.CreateInstanceRequest{})
	e.write(in.ID, "etc/app.conf", "color=blue\n")
	e.write(in.ID, "etc/os-release", "ID=changed\n")
	e.write(in.ID, "home/me/notes", "not configuration\n")
	res := e.saved(in.ID, types.SaveRequest{})

	vs, err := e.svc.VersionSpec(e.ctx, e.user, "p", res.Version)
	require.NoError(t, err)
	assert.False(t, vs.Declared)
	assert.Equal(t, 1, vs.BaseVersion)
	assert.Empty(t, vs.Spec.Manager, "no package database changed")
	assert.Empty(t, vs.Spec.Packages)
	assert.Equal(t, []types.BuildFile{
		{Path: "/etc/app.conf", Content: "color=blue\n", Mode: "0644"},
		{Path: "/etc/os-release", Content: "ID=changed\n", Mode: "0644"},
	}, vs.Spec.Files)

	again, err := e.svc.VersionSpec(e.ctx, e.user, "p", res.Version)
	require.NoError(t, err)
	assert.Equal(t, vs, again, "the second answer (from the cache) is the same")

	_, err = e.svc.VersionSpec(e.ctx, e.user, "p", 9)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = e.svc.VersionSpec(e.ctx, e.user, "../p", 1)
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}
