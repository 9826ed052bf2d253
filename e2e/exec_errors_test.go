package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// A command that cannot run answers what a shell would: exit 127 (not
// found) or 126 (not executable) with the reason on stderr, through both
// exec routes; a working directory that does not exist is a 422
// start_failed naming it.
func TestRootExecCommandNotRun(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	in := up(t, newProject(t, "cmd-not-run"), 0)

	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"nosuch"}, 127, "nosuch: executable file not found in $PATH\n"},
		{[]string{"/usr/bin/nosuch", "arg"}, 127, "/usr/bin/nosuch: no such file or directory\n"},
		{[]string{"/etc/passwd"}, 126, "/etc/passwd: permission denied\n"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			res, err := env.c.Exec(c, in.ID, types.ExecRequest{Args: tc.args})
			require.NoError(t, err)
			assert.Equal(t, tc.code, res.ExitCode)
			assert.Equal(t, tc.stderr, res.Stderr)
			assert.Empty(t, res.Stdout)

			var stdout, stderr bytes.Buffer
			code, err := env.c.ExecStream(c, in.ID, types.ExecRequest{Args: tc.args}, types.Stdio{Stdout: &stdout, Stderr: &stderr})
			require.NoError(t, err, "the WebSocket exec")
			assert.Equal(t, tc.code, code)
			assert.Equal(t, tc.stderr, stderr.String())
		})
	}

	_, err := env.c.Exec(c, in.ID, types.ExecRequest{Args: []string{"true"}, Cwd: "/nope"})
	require.ErrorIs(t, err, errdefs.ErrStartFailed)
	var ae *types.Error
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusUnprocessableEntity, ae.Status)
	assert.Equal(t, "start_failed", ae.Code)
	assert.Contains(t, ae.Message, "/nope")

	assert.Equal(t, "still here", mustSh(t, in.ID, "echo still here"), "the instance is unaffected")
}

// An image whose /bin/sh (the init's shell) is a symlink loop cannot start:
// up answers 422 start_failed with the runtime's reason, and the instance
// is Failed, not Running.
func TestRootImageThatCannotStart(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	dir := t.TempDir()
	out, err := exec.Command("bash", "../scripts/busybox-rootfs.sh", dir).CombinedOutput()
	require.NoError(t, err, string(out))
	require.NoError(t, os.Remove(filepath.Join(dir, "bin/sh")))
	require.NoError(t, os.Symlink("/bin/sh", filepath.Join(dir, "bin/sh")))
	tarball, err := tarDir(dir)
	require.NoError(t, err)
	base := fmt.Sprintf("sh-loop-%d", projectSeq.Add(1))
	_, err = env.c.ImportImage(c, base, bytes.NewReader(tarball))
	require.NoError(t, err)
	p := fmt.Sprintf("cannot-start-%d", projectSeq.Add(1))
	_, err = env.c.CreateProject(c, types.CreateProjectRequest{Name: p, Base: base})
	require.NoError(t, err)

	_, err = env.c.CreateInstance(c, p, types.CreateInstanceRequest{})
	require.ErrorIs(t, err, errdefs.ErrStartFailed)
	var ae *types.Error
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, http.StatusUnprocessableEntity, ae.Status)
	assert.Contains(t, ae.Message, "too many levels of symbolic links")

	ins, err := env.c.ListInstances(c, p)
	require.NoError(t, err)
	for _, in := range ins {
		assert.NotEqual(t, types.StateRunning, in.State, "instance %s", in.ID)
		_, _ = env.c.DeleteInstance(c, in.ID)
	}
}
