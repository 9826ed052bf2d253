package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// importNewBase imports a second busybox base, "an update" of the fixture:
// /etc/motd and /etc/base-version are new in it.
func importNewBase(t *testing.T, name string) {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("bash", "../scripts/busybox-rootfs.sh", dir).CombinedOutput()
	require.NoError(t, err, string(out))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/motd"), []byte("welcome to base B\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "etc/base-version"), []byte("B\n"), 0o644))
	tarball, err := tarDir(dir)
	require.NoError(t, err)
	_, err = env.c.ImportImage(ctx(t), name, bytes.NewReader(tarball))
	require.NoError(t, err)
}

// A migration puts the current version's own layers on a new base: the
// user's files stay, the base's new files appear, a path both changed is a
// reported conflict (the user's file wins), validation runs in a trial
// instance, the switch is a CAS, and the old version restores for a
// rollback.
func TestRootMigrateOntoANewBase(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	newBase := fmt.Sprintf("fixture-b-%d", projectSeq.Add(1))
	importNewBase(t, newBase)
	p := newProject(t, "migrate")
	a := up(t, p, 0)
	mustSh(t, a.ID, "mkdir -p /home/u && echo mine > /home/u/f && echo my motd > /etc/motd")
	_, saved := save(t, a.ID, "user files")

	op, err := env.c.Migrate(c, p, types.MigrateRequest{Base: newBase, Validate: [][]string{{"test", "-f", "/etc/base-version"}}, Switch: true})
	res := succeeded[types.MigrateResult](t, op, err)
	assert.Equal(t, saved.Version, res.From)
	assert.Equal(t, saved.Version+1, res.Version)
	assert.True(t, res.Current)
	assert.Equal(t, 1, res.Validated)
	assert.Equal(t, []string{"/etc/motd"}, res.Conflicts, "only the path both sides changed")
	assert.False(t, res.DatabaseConflict)
	v, err := env.c.GetVersion(c, p, res.Version)
	require.NoError(t, err)
	assert.Equal(t, "migration", v.Kind)

	b := up(t, p, 0)
	assert.Equal(t, "B", mustSh(t, b.ID, "cat /etc/base-version"), "the new base's files")
	assert.Equal(t, "mine", mustSh(t, b.ID, "cat /home/u/f"), "the user's files")
	assert.Equal(t, "my motd", mustSh(t, b.ID, "cat /etc/motd"), "in a conflict the user's file wins")
	assert.Equal(t, "gone", mustSh(t, b.ID, "test -e /fixtures/keep/untouched || echo gone"), "the old base's own files are not carried over")

	old := up(t, p, saved.Version)
	assert.Equal(t, "none", mustSh(t, old.ID, "cat /etc/base-version 2>/dev/null || echo none"), "the old version restores as it was")

	// Migrating again onto the base the current version sits on is
	// refused at once.
	_, err = env.c.Migrate(c, p, types.MigrateRequest{Base: newBase})
	var apiErr *types.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 409, apiErr.Status, "the current version already sits on it")
	assert.Equal(t, "failed_precondition", apiErr.Code)
}
