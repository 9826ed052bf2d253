package e2e

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Spool dirs of saves and hibernations and the scratch of image imports
// that a process left when it died are removed when envd starts again;
// anything else in the work dir is left alone.
func TestRootRestartRemovesLeftoverScratch(t *testing.T) {
	leftovers := []string{
		"op-0badc0de/layer.tar",                // a save's spool
		"op-0badc0de/sha256-1234",              // its encoded layer
		"hibernate-i-0badc0de/layer.tar",       // a hibernation's
		"import-123456.tar",                    // an import's received tar
		"import-987654/rootfs.tar",             // and its encode dir
		"op-0badc0de-memory/pages.img",         // a checkpoint's memory image
		"resume-i-0badc0de-42/image/pages.img", // a resume's pulled memory image
	}
	for _, l := range leftovers {
		p := filepath.Join(workDir(), l)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, make([]byte, 1<<20), 0o600))
	}
	other := filepath.Join(workDir(), "not-scratch")
	require.NoError(t, os.WriteFile(other, []byte("kept"), 0o600))
	t.Cleanup(func() { os.Remove(other) })

	restartNode(t)

	for _, l := range leftovers {
		_, err := os.Stat(filepath.Join(workDir(), l))
		assert.ErrorIs(t, err, os.ErrNotExist, "%s left over after a restart", l)
		_, err = os.Stat(filepath.Join(workDir(), filepath.Dir(l)))
		if filepath.Dir(l) != "." {
			assert.ErrorIs(t, err, os.ErrNotExist, "%s left over after a restart", filepath.Dir(l))
		}
	}
	_, err := os.Stat(other)
	assert.NoError(t, err, "what is not scratch stays")

	// The node still saves after it.
	p := newProject(t, "scratch")
	a := up(t, p, 0)
	mustSh(t, a.ID, "echo kept > /marker")
	_, res := save(t, a.ID, "after the restart")
	assert.True(t, res.Current)
}
