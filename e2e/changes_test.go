package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// What changed between versions, as a user reads it: added, modified and
// deleted files (a deleted directory with its contents), noisy directories
// summarised, against the parent or any version, and clear errors.
func TestRootVersionChanges(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := newProject(t, "changes")
	a := up(t, p, 0)
	mustSh(t, a.ID, "echo changed >> /fixtures/modify-me && chmod 600 /fixtures/chmod-me && rm /fixtures/delete-me && rm -r /fixtures/deldir"+
		" && mkdir -p /home/u/src && echo code > /home/u/src/main.c && ln -s main.c /home/u/src/link"+
		" && mkdir -p /var/cache/tool && echo c > /var/cache/tool/blob")
	_, first := save(t, a.ID, "first")
	mustSh(t, a.ID, "echo more > /home/u/src/second.c")
	_, second := save(t, a.ID, "second")

	ch, err := env.c.VersionChanges(c, p, first.Version, 0, 0)
	require.NoError(t, err)
	assert.Equal(t, first.Version-1, ch.Against)
	assert.Nil(t, ch.Packages, "busybox has no package database")
	assert.Equal(t, []string{"/home/u", "/home/u/src", "/home/u/src/link", "/home/u/src/main.c", "/var/cache"}, paths(ch.Added),
		"/home is in the base, /var/cache is not; what is under /var/cache is summarised")
	assert.ElementsMatch(t, []string{"/fixtures/chmod-me", "/fixtures/modify-me"}, paths(ch.Modified))
	for _, fc := range ch.Modified {
		require.NotNil(t, fc.Was, fc.Path)
		if fc.Path == "/fixtures/chmod-me" {
			assert.Equal(t, "0600", fc.Mode)
			assert.Equal(t, "0644", fc.Was.Mode)
		} else {
			assert.Equal(t, int64(len("base content\nchanged\n")), fc.Size)
			assert.Equal(t, int64(len("base content\n")), fc.Was.Size)
		}
	}
	assert.Equal(t, []string{"/fixtures/deldir", "/fixtures/deldir/a", "/fixtures/deldir/sub", "/fixtures/deldir/sub/b", "/fixtures/delete-me"}, paths(ch.Deleted))
	require.Len(t, ch.Summarized, 1)
	assert.Equal(t, types.DirSummary{Path: "/var/cache", Reason: "caches", Added: 2, Bytes: 2}, ch.Summarized[0])

	// Against an older version: both saves' changes; against itself: none.
	ch, err = env.c.VersionChanges(c, p, second.Version, first.Version-1, 0)
	require.NoError(t, err)
	assert.Contains(t, paths(ch.Added), "/home/u/src/second.c")
	assert.Contains(t, paths(ch.Added), "/home/u/src/main.c")
	ch, err = env.c.VersionChanges(c, p, second.Version, second.Version, 0)
	require.NoError(t, err)
	assert.Equal(t, types.ChangeTotals{}, ch.Totals)
	ch, err = env.c.VersionChanges(c, p, first.Version, second.Version, 0)
	require.NoError(t, err)
	assert.Equal(t, []string{"/home/u/src/second.c"}, paths(ch.Deleted), "backwards, the newer file is deleted")

	_, err = env.c.VersionChanges(c, p, 1, 0, 0)
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "version 1 has no parent")
	_, err = env.c.VersionChanges(c, p, 99, 0, 0)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = env.c.VersionChanges(c, p, first.Version, 0, 20000)
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "limit past the maximum")
	_, err = env.c.VersionChanges(c, "no-such-project", 2, 0, 0)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

func paths(fcs []types.FileChange) []string {
	out := []string{}
	for _, fc := range fcs {
		out = append(out, fc.Path)
	}
	return out
}

// Before a save, a user sees what it would capture (against the version
// the instance sits on) and what it leaves out; after the save, nothing is
// pending.
func TestRootInstanceChanges(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	p := fmt.Sprintf("pending-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: fixtureBase, Excludes: []string{"/scratch"},
		Volumes: []string{"data:/data"}})
	require.NoError(t, err)
	a := up(t, p, 0)
	mustSh(t, a.ID, "mkdir -p /home/u /scratch && echo x > /home/u/f && echo big > /scratch/blob && echo t > /tmp/t && echo v > /data/v && rm /fixtures/delete-me")

	ch, err := env.c.InstanceChanges(c, a.ID, 0)
	require.NoError(t, err)
	assert.Equal(t, a.ID, ch.Instance)
	assert.Equal(t, 0, ch.Version)
	assert.Equal(t, 1, ch.Against, "the version the instance sits on")
	assert.Contains(t, paths(ch.Added), "/home/u/f")
	assert.Equal(t, []string{"/fixtures/delete-me"}, paths(ch.Deleted))
	for _, p := range append(paths(ch.Added), paths(ch.Modified)...) {
		for _, out := range []string{"/scratch", "/tmp/", "/data", "/etc/hosts", "/proc/"} {
			assert.False(t, strings.HasPrefix(p, out), "%s is not saved, so not listed", p)
		}
	}
	reasons := map[string]string{}
	for _, e := range ch.Excluded {
		reasons[e.Path] = e.Reason
	}
	assert.Equal(t, "the project's exclude", reasons["/scratch"])
	assert.Equal(t, "volume data (kept by the volume, not the snapshot)", reasons["/data"])
	assert.Equal(t, "temporary files (never saved)", reasons["/tmp"])
	assert.Equal(t, "written by the node at each start", reasons["/etc/hosts"])

	_, saved := save(t, a.ID, "now")
	ch, err = env.c.InstanceChanges(c, a.ID, 0)
	require.NoError(t, err)
	assert.Equal(t, 1, ch.Against, "repeated saves replace one layer over the version the instance started from")
	assert.Contains(t, paths(ch.Added), "/home/u/f")
	vc, err := env.c.VersionChanges(c, p, saved.Version, 1, 0)
	require.NoError(t, err)
	assert.Equal(t, paths(ch.Added), paths(vc.Added), "the save captured what was pending")

	_, err = env.c.InstanceChanges(c, "no-such-instance", 0)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = env.c.DeleteInstance(c, a.ID)
	require.NoError(t, err)
	_, err = env.c.InstanceChanges(c, a.ID, 0)
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "a terminated instance has no layer")
}
