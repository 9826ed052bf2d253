package runtime

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The wrapper passes runsc its flags and the shim's arguments unchanged,
// and adds --background right after the restore subcommand only when the
// image directory holds RestoreInBackground.
func TestGVisorWrapperAddsBackgroundToALazyRestore(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "runsc")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\nfor a; do printf '[%s]' \"$a\"; done\n"), 0o755))
	wrapper := filepath.Join(dir, "wrapper")
	require.NoError(t, os.WriteFile(wrapper, []byte(GVisorWrapper(fake, []string{"--exclude-committed-zero-pages"})), 0o755))
	lazy, full := filepath.Join(dir, "lazy"), filepath.Join(dir, "full")
	require.NoError(t, os.Mkdir(lazy, 0o700))
	require.NoError(t, os.Mkdir(full, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(lazy, RestoreInBackground), nil, 0o600))
	flags := "[" + strings.Join(gvisorFlags, "][") + "]"

	for name, tc := range map[string]struct{ args, want []string }{
		"lazy restore": {
			[]string{"--root", "/r", "--log", "a b", "restore", "--image-path", lazy, "--detach", "id"},
			[]string{"--root", "/r", "--log", "a b", "restore", "--background", "--image-path", lazy, "--detach", "id"},
		},
		"full restore": {
			[]string{"--root", "/r", "restore", "--image-path", full, "id"},
			[]string{"--root", "/r", "restore", "--image-path", full, "id"},
		},
		"other command": {
			[]string{"--root", "/r", "state", "id"},
			[]string{"--root", "/r", "state", "id"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command(wrapper, tc.args...).CombinedOutput()
			require.NoError(t, err, "%s", out)
			assert.Equal(t, flags+"["+strings.Join(tc.want, "][")+"]", string(out))
		})
	}
}

// The runsc wrapper passes the shim's arguments through unchanged, with
// the instances' flags first and the checkpoint flags right after the
// checkpoint subcommand (only there, only once), whatever the arguments
// hold (spaces, quotes, an id that is the word "checkpoint").
func TestWrapperScriptPlacesCheckpointFlags(t *testing.T) {
	dir := t.TempDir()
	echo := filepath.Join(dir, "runsc")
	require.NoError(t, os.WriteFile(echo, []byte("#!/bin/sh\nfor a do printf '%s\\n' \"$a\"; done\n"), 0o700))
	wrapper := filepath.Join(dir, "wrapper")
	run := func(checkpoint []string, args ...string) []string {
		t.Helper()
		require.NoError(t, os.WriteFile(wrapper, []byte(GVisorWrapper(echo, checkpoint)), 0o700))
		out, err := exec.Command(wrapper, args...).Output()
		require.NoError(t, err)
		return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	}
	flags := []string{"--exclude-committed-zero-pages"}
	assert.Equal(t, append(append([]string{}, gvisorFlags...), "--root", "/r x", "checkpoint", "--exclude-committed-zero-pages", "--image-path", "/i 'q'", "--leave-running", "checkpoint"),
		run(flags, "--root", "/r x", "checkpoint", "--image-path", "/i 'q'", "--leave-running", "checkpoint"))
	assert.Equal(t, append(append([]string{}, gvisorFlags...), "--root", "/r", "restore", "--image-path", "/i", "id"),
		run(flags, "--root", "/r", "restore", "--image-path", "/i", "id"), "other subcommands unchanged")
	assert.Equal(t, append(append([]string{}, gvisorFlags...), "--root", "/r", "checkpoint", "id"),
		run(nil, "--root", "/r", "checkpoint", "id"), "no checkpoint flags")
}
