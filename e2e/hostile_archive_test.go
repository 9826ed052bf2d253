package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
)

// newTenant makes a tenant with a token of its own and returns its client.
func newTenant(t *testing.T, prefix string) (string, *client.Client) {
	t.Helper()
	return newTenantAt(t, env.node.URL, prefix)
}

// newTenantAt is newTenant with a client of the node at url.
func newTenantAt(t *testing.T, url, prefix string) (string, *client.Client) {
	t.Helper()
	tenant := fmt.Sprintf("%s-%d", prefix, projectSeq.Add(1))
	tok, err := env.c.CreateToken(ctx(t), tenant, types.CreateTokenRequest{})
	require.NoError(t, err)
	tc, err := client.New(url, tok.Token)
	require.NoError(t, err)
	return tenant, tc
}

// Tenant A archives a volume; tenant B, with a project and volume of the
// same names, can neither restore A's archive by any key it can guess or
// see, nor list it, nor write over it; A restores its own. Deleting A's
// project deletes its archives' records and objects.
func TestRootHostileArchive(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	tenantA, ca := newTenant(t, "arc-a")
	tenantB, cb := newTenant(t, "arc-b")
	const p, vol = "arc", "work"
	for _, tc := range []*client.Client{ca, cb} {
		_, err := tc.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase, Volumes: []string{vol + ":/workspace"}})
		require.NoError(t, err)
	}
	aOnly := "arc-only-a"
	_, err := ca.CreateProject(c, types.CreateProjectRequest{Name: aOnly, Base: fixtureBase, Volumes: []string{vol + ":/workspace"}})
	require.NoError(t, err)

	// A writes and archives; B writes its own content.
	write := func(tc *client.Client, p, content string) {
		in, err := tc.CreateInstance(c, p, types.CreateInstanceRequest{})
		require.NoError(t, err)
		res, err := tc.Exec(c, in.ID, types.ExecRequest{Args: []string{"sh", "-c", "echo " + content + " > /workspace/data"}})
		require.NoError(t, err)
		require.Equal(t, 0, res.ExitCode, res.Stderr)
		_, err = tc.DeleteInstance(c, in.ID)
		require.NoError(t, err)
	}
	write(ca, p, "secret-of-a")
	write(ca, aOnly, "only-a")
	write(cb, p, "content-of-b")
	arcA, err := ca.ArchiveVolume(c, p, vol, types.VolumeArchiveRequest{Name: "snap"})
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(arcA.Key, "volumes/"+tenantA+"/"+p+"/"+vol+"/snap/"), arcA.Key)
	assert.Equal(t, "snap", arcA.Name)
	_, err = ca.ArchiveVolume(c, aOnly, vol, types.VolumeArchiveRequest{Name: "only"})
	require.NoError(t, err)

	// B: every key it can see or guess is not found, by key or by name.
	guesses := []string{
		arcA.Key,
		"volumes/" + tenantA + "/" + p + "/" + vol + "/snap.tar.zst",
		"volumes/" + tenantB + "/../" + tenantA + "/" + p + "/" + vol + "/snap/" + filepath.Base(arcA.Key),
		strings.Replace(arcA.Key, tenantA, tenantB, 1),
	}
	for _, key := range guesses {
		_, err = cb.RestoreVolume(c, p, vol, types.VolumeArchiveRequest{Key: key})
		assert.ErrorIs(t, err, errdefs.ErrNotFound, "key %q", key)
	}
	_, err = cb.RestoreVolume(c, p, vol, types.VolumeArchiveRequest{Name: "snap"})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = cb.RestoreVolume(c, aOnly, vol, types.VolumeArchiveRequest{Name: "only"})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = cb.ListArchives(c, aOnly, "")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	list, err := cb.ListArchives(c, p, "")
	require.NoError(t, err)
	assert.Empty(t, list, "B sees none of A's archives")

	// B cannot write over A's archive: it cannot pick a key, A's project
	// is not found for it, and its own "snap" lands under its own prefix.
	_, err = cb.ArchiveVolume(c, p, vol, types.VolumeArchiveRequest{Key: arcA.Key})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
	_, err = cb.ArchiveVolume(c, aOnly, vol, types.VolumeArchiveRequest{Name: "only", Replace: true})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = cb.DeleteArchive(c, p, vol, "snap")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	arcB, err := cb.ArchiveVolume(c, p, vol, types.VolumeArchiveRequest{Name: "snap", Replace: true})
	require.NoError(t, err)
	assert.False(t, arcB.Replaced)
	assert.True(t, strings.HasPrefix(arcB.Key, "volumes/"+tenantB+"/"), arcB.Key)
	for _, bad := range []string{"../x", "a/b", ".hidden", strings.Repeat("x", 129)} {
		_, err = cb.ArchiveVolume(c, p, vol, types.VolumeArchiveRequest{Name: bad})
		assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "name %q", bad)
	}

	// A's archive is unchanged and restores A's content.
	list, err = ca.ListArchives(c, p, vol)
	require.NoError(t, err)
	require.Len(t, list, 1)
	assert.Equal(t, arcA.Key, list[0].Key)
	assert.Equal(t, arcA.Bytes, list[0].Bytes)
	_, err = ca.ArchiveVolume(c, p, vol, types.VolumeArchiveRequest{Name: "snap"})
	assert.ErrorIs(t, err, errdefs.ErrAlreadyExists, "same name without replace")
	_, err = ca.RestoreVolume(c, p, vol, types.VolumeArchiveRequest{Name: "snap"})
	require.NoError(t, err)
	in, err := ca.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	res, err := ca.Exec(c, in.ID, types.ExecRequest{Args: []string{"cat", "/workspace/data"}})
	require.NoError(t, err)
	assert.Equal(t, "secret-of-a\n", res.Stdout)
	_, err = ca.DeleteInstance(c, in.ID)
	require.NoError(t, err)

	// Replace: the record moves to a new key, the old one is gone.
	arcA2, err := ca.ArchiveVolume(c, p, vol, types.VolumeArchiveRequest{Name: "snap", Replace: true})
	require.NoError(t, err)
	assert.True(t, arcA2.Replaced)
	assert.NotEqual(t, arcA.Key, arcA2.Key)
	_, err = ca.RestoreVolume(c, p, vol, types.VolumeArchiveRequest{Key: arcA.Key})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	objects := filepath.Join(env.dataDir, "objects")
	assert.NoFileExists(t, filepath.Join(objects, filepath.FromSlash(arcA.Key)), "the replaced object is deleted")
	require.FileExists(t, filepath.Join(objects, filepath.FromSlash(arcA2.Key)))
	_, err = ca.RestoreVolume(c, p, vol, types.VolumeArchiveRequest{Key: arcA2.Key})
	require.NoError(t, err)

	// B's content was never touched.
	_, err = cb.RestoreVolume(c, p, vol, types.VolumeArchiveRequest{Name: "snap"})
	require.NoError(t, err)
	inB, err := cb.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = cb.DeleteInstance(context.Background(), inB.ID) })
	res, err = cb.Exec(c, inB.ID, types.ExecRequest{Args: []string{"cat", "/workspace/data"}})
	require.NoError(t, err)
	assert.Equal(t, "content-of-b\n", res.Stdout)

	// Deleting A's project deletes its archives: records and objects.
	require.NoError(t, ca.DeleteProject(c, p))
	assert.NoFileExists(t, filepath.Join(objects, filepath.FromSlash(arcA2.Key)))
	_, err = os.Stat(filepath.Join(objects, filepath.FromSlash(arcB.Key)))
	assert.NoError(t, err, "B's archive stays")
	_, err = ca.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase, Volumes: []string{vol + ":/workspace"}})
	require.NoError(t, err)
	list, err = ca.ListArchives(c, p, "")
	require.NoError(t, err)
	assert.Empty(t, list, "a new project of the same name has no archives")
	_, err = ca.RestoreVolume(c, p, vol, types.VolumeArchiveRequest{Key: arcA2.Key})
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}
