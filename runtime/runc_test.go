package runtime

import (
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// debianChangelog is the head of Debian 12's runc changelog: the security
// update that backports the fix, then the release before it.
const debianChangelog = `runc (1.1.5+ds1-1+deb12u1) bookworm-security; urgency=high

  * Team upload.
  * CVE-2024-21626: several container breakouts due to internally leaked fds

 -- Shengjing Zhu <zhsj@debian.org>  Fri, 02 Feb 2024 21:53:05 +0800

runc (1.1.5+ds1-1) unstable; urgency=medium

  * New upstream version 1.1.5+ds1
`

const debianUnfixedChangelog = `runc (1.1.5+ds1-1) unstable; urgency=medium

  * New upstream version 1.1.5+ds1
`

func writeGz(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "changelog.Debian.gz")
	f, err := os.Create(p)
	require.NoError(t, err)
	zw := gzip.NewWriter(f)
	_, err = zw.Write([]byte(text))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	require.NoError(t, f.Close())
	return p
}

// fakeRunc is a runc that only prints version as `runc --version` does.
func fakeRunc(t *testing.T, version, commit string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "runc")
	script := "#!/bin/sh\nprintf 'runc version " + version + "\\ncommit: " + commit + "\\nspec: 1.0.2-dev\\n'\n"
	require.NoError(t, os.WriteFile(p, []byte(script), 0o755))
	return p
}

func TestCheckRunc(t *testing.T) {
	t.Parallel()
	fixedLog, unfixedLog := writeGz(t, debianChangelog), writeGz(t, debianUnfixedChangelog)
	for _, tc := range []struct {
		name, version, commit, changelog string
		fixed                            bool
	}{
		{"upstream fixed release", "1.1.12", "v1.1.12-0-g51d5e946", "/nonexistent", true},
		{"upstream newer", "1.2.5", "v1.2.5-0-g59923ef1", "/nonexistent", true},
		{"upstream unfixed", "1.1.11", "v1.1.11-0-g4bccb38c", "/nonexistent", false},
		{"a release candidate of 1.1.12", "1.1.12-rc.1", "v1.1.12-rc.1", "/nonexistent", false},
		{"Debian 12 with the backport", "1.1.5+ds1", "1.1.5+ds1-1+deb12u1", fixedLog, true},
		{"Debian 12 before the backport", "1.1.5+ds1", "1.1.5+ds1-1", unfixedLog, false},
		{"a changelog of another build", "1.1.5+ds1", "1.1.5+ds1-1", fixedLog, false},
		{"an old build and no changelog", "1.1.5+ds1", "1.1.5+ds1-1+deb12u1", "/nonexistent", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := CheckRunc(context.Background(), fakeRunc(t, tc.version, tc.commit), tc.changelog)
			require.NoError(t, err)
			assert.Equal(t, tc.version, info.Version)
			assert.Equal(t, tc.commit, info.Commit)
			assert.Equal(t, tc.fixed, info.Fixed, info.Why)
			assert.NotEmpty(t, info.Why)
		})
	}
}

// The runc of this machine: Debian 12's package carries the backport.
func TestCheckRuncHere(t *testing.T) {
	p, err := FindRunc("")
	require.NoError(t, err)
	info, err := CheckRunc(context.Background(), p, "/usr/share/doc/runc/changelog.Debian.gz")
	require.NoError(t, err)
	t.Logf("%s %s (%s): fixed %v: %s", info.Path, info.Version, info.Commit, info.Fixed, info.Why)
	assert.True(t, info.Fixed, info.Why)
}
