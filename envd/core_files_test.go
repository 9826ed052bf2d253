package envd_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
)

// A node whose runtime gives no file access (the core tests' fake has no
// FileView) answers the file API with 503 unavailable, after the checks
// every request gets; its limit on one write is the default unless set.
func TestCoreFilesWithoutFileAccess(t *testing.T) {
	e := newCoreEnv(t, nil)
	e.project("web")
	in := e.instance("web", types.CreateInstanceRequest{})
	files := e.svc.Parts().Files

	_, err := files.OpenFiles(e.ctx, e.user, in.ID, types.FileUser{}, false)
	require.ErrorIs(t, err, errdefs.ErrUnavailable)
	assert.Equal(t, 503, errdefs.HTTPStatus(err))
	assert.Contains(t, err.Error(), "no file access")

	err = files.WatchFiles(e.ctx, e.user, in.ID, types.FileUser{}, "/", false, func(types.FileEvent) error { return nil })
	assert.ErrorIs(t, err, errdefs.ErrUnavailable)

	_, err = files.OpenFiles(e.ctx, e.user, "not an id", types.FileUser{}, false)
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)

	assert.Equal(t, int64(envd.DefaultMaxFileBytes), files.MaxFileBytes())
	set := newCoreEnv(t, func(c *envd.Config) { c.MaxFileBytes = 4096 })
	assert.Equal(t, int64(4096), set.svc.Parts().Files.MaxFileBytes())
}
