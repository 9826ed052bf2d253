package versions_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Archive records: one name per project volume (replace moves it to a new
// key and hands back the old one), lookups only within the tenant's own
// project, and a deleted project's records become orphans to collect.
func TestArchiveRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	_, _, err := s.Projects.CreateProject(ctx, versions.Project{Tenant: "other", Name: "p", BaseImage: "reg/base@sha256:aaa"},
		versions.Version{})
	require.NoError(t, err)

	a1 := versions.Archive{Tenant: tenant, Project: "p", Volume: "work", Name: "n1", Key: "volumes/acme/p/work/n1/1.tar.zst",
		SizeBytes: 10, Files: 2, Node: "node-a"}
	got, replaced, err := s.Volumes.PutArchive(ctx, a1, false)
	require.NoError(t, err)
	assert.Empty(t, replaced)
	assert.NotZero(t, got.ID)
	assert.False(t, got.CreatedAt.IsZero())
	got.ID, got.CreatedAt = 0, a1.CreatedAt
	assert.Equal(t, a1, got)

	// Same name: refused without replace; with it, the old key comes back.
	a2 := a1
	a2.Key, a2.SizeBytes = "volumes/acme/p/work/n1/2.tar.zst", 20
	_, _, err = s.Volumes.PutArchive(ctx, a2, false)
	assert.ErrorIs(t, err, errdefs.ErrAlreadyExists)
	got, replaced, err = s.Volumes.PutArchive(ctx, a2, true)
	require.NoError(t, err)
	assert.Equal(t, a1.Key, replaced)
	assert.Equal(t, a2.Key, got.Key)
	assert.Equal(t, int64(20), got.SizeBytes)

	// The other tenant's project of the same name records its own.
	b := versions.Archive{Tenant: "other", Project: "p", Volume: "work", Name: "n1", Key: "volumes/other/p/work/n1/3.tar.zst", SizeBytes: 5}
	_, _, err = s.Volumes.PutArchive(ctx, b, false)
	require.NoError(t, err)
	// A key the tenant does not own, even one it has seen, is not found.
	_, _, err = s.Volumes.PutArchive(ctx, versions.Archive{Tenant: tenant, Project: "nope", Volume: "work", Name: "x", Key: "k"}, false)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	tests := []struct {
		name            string
		tenant, project string
		key             string
		want            string // "" = not found
	}{
		{"own key", tenant, "p", a2.Key, a2.Key},
		{"replaced key", tenant, "p", a1.Key, ""},
		{"other tenant's key", tenant, "p", b.Key, ""},
		{"own key asked by the other tenant", "other", "p", a2.Key, ""},
		{"own key under another project", tenant, "q", a2.Key, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Volumes.GetArchiveByKey(ctx, tt.tenant, tt.project, tt.key)
			if tt.want == "" {
				assert.ErrorIs(t, err, errdefs.ErrNotFound)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got.Key)
		})
	}
	got, err = s.Volumes.GetArchive(ctx, tenant, "p", "work", "n1")
	require.NoError(t, err)
	assert.Equal(t, a2.Key, got.Key)
	got, err = s.Volumes.GetArchive(ctx, "other", "p", "work", "n1")
	require.NoError(t, err)
	assert.Equal(t, b.Key, got.Key, "names are per tenant's project")

	_, _, err = s.Volumes.PutArchive(ctx, versions.Archive{Tenant: tenant, Project: "p", Volume: "home", Name: "h", Key: "volumes/acme/p/home/h/4.tar.zst"}, false)
	require.NoError(t, err)
	list, err := s.Volumes.ListArchives(ctx, tenant, "p", "")
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, []string{"home", "work"}, []string{list[0].Volume, list[1].Volume})
	list, err = s.Volumes.ListArchives(ctx, tenant, "p", "work")
	require.NoError(t, err)
	require.Len(t, list, 1)
	_, err = s.Volumes.ListArchives(ctx, tenant, "nope", "")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	del, err := s.Volumes.DeleteArchive(ctx, tenant, "p", "home", "h")
	require.NoError(t, err)
	assert.Equal(t, "volumes/acme/p/home/h/4.tar.zst", del.Key)
	_, err = s.Volumes.DeleteArchive(ctx, "other", "p", "work", "n1")
	require.NoError(t, err)
	_, err = s.Volumes.DeleteArchive(ctx, tenant, "p", "home", "h")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)

	// Deleting the project orphans its records: no longer found, listed
	// for collection, forgotten once collected.
	orphans, err := s.Volumes.OrphanArchives(ctx, 10)
	require.NoError(t, err)
	assert.Empty(t, orphans)
	_, err = s.Projects.DeleteProject(ctx, tenant, "p")
	require.NoError(t, err)
	_, err = s.Volumes.GetArchiveByKey(ctx, tenant, "p", a2.Key)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	orphans, err = s.Volumes.OrphanArchives(ctx, 10)
	require.NoError(t, err)
	require.Len(t, orphans, 1)
	assert.Equal(t, a2.Key, orphans[0].Key)
	assert.Equal(t, "p", orphans[0].Project)
	require.NoError(t, s.Volumes.ForgetArchive(ctx, orphans[0].ID))
	orphans, err = s.Volumes.OrphanArchives(ctx, 10)
	require.NoError(t, err)
	assert.Empty(t, orphans)

	// A project of the same name made again starts without archives.
	newProject(t, s)
	list, err = s.Volumes.ListArchives(ctx, tenant, "p", "")
	require.NoError(t, err)
	assert.Empty(t, list)
}

// Two archives of one name committed at once: exactly one is recorded, the
// other is refused with ErrAlreadyExists (its caller deletes its object).
func TestPutArchiveConcurrentSameName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			_, _, errs[i] = s.Volumes.PutArchive(ctx, versions.Archive{Tenant: tenant, Project: "p", Volume: "work", Name: "same",
				Key: fmt.Sprintf("volumes/acme/p/work/same/%d.tar.zst", i), SizeBytes: 1}, false)
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		if err == nil {
			ok++
			continue
		}
		assert.ErrorIs(t, err, errdefs.ErrAlreadyExists)
	}
	assert.Equal(t, 1, ok)
	list, err := s.Volumes.ListArchives(ctx, tenant, "p", "work")
	require.NoError(t, err)
	assert.Len(t, list, 1)
}
