package versions_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// TestSetProjectPrefetch: a list is stored with its head; a shorter one
// replaces it only when replace is set (a recording cut short does not);
// the head is kept within the list.
func TestSetProjectPrefetch(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	get := func() ([]string, int) {
		t.Helper()
		p, err := s.Projects.GetProject(ctx, tenant, "p")
		require.NoError(t, err)
		return p.Prefetch, p.PrefetchHead
	}
	long := []string{"/bin/sh", "/usr/bin/dot", "/usr/lib/libgvc.so.6", "/usr/share/fonts/a.ttf"}
	require.NoError(t, s.Projects.SetProjectPrefetch(ctx, tenant, "p", long, 3, false))
	files, head := get()
	assert.Equal(t, long, files)
	assert.Equal(t, 3, head)

	require.NoError(t, s.Projects.SetProjectPrefetch(ctx, tenant, "p", long[:2], 2, false), "refused quietly")
	files, head = get()
	assert.Equal(t, long, files, "a shorter list does not replace a longer one")
	assert.Equal(t, 3, head)

	require.NoError(t, s.Projects.SetProjectPrefetch(ctx, tenant, "p", long[:2], 9, true))
	files, head = get()
	assert.Equal(t, long[:2], files, "a whole window's list replaces it")
	assert.Equal(t, 2, head, "the head is cut to the list")

	err := s.Projects.SetProjectPrefetch(ctx, tenant, "missing", long, 0, true)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}
