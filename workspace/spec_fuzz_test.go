package workspace

import (
	"fmt"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// FuzzParseSpec: a parsed volume spec satisfies the grammar (Validate),
// mounts at a clean absolute path outside the system paths, and prints back
// to a spec that parses to the same value; anything else is refused with
// errdefs.ErrInvalidArgument.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{
		"work:/workspace", "tools:/home/dev/.tools:1000:1000:2G", "w:/data:16M", "w:/data:0:0",
		"w:/data:1Gi", "w:/data:1GiB", "w:/", "w:/usr/local", "w:/../etc", "w:relative", "W:/x",
		"w:/x:-1:0", "w:/x:4294967295:0", "w:/x:1:2:3:4", "w:/x:9223372036854775807", "w:/x:16T",
		"w:/x:17T", "w:/x\x00y", "w:/x/./y", "w:/x//y", "", ":", "w:/x:", "w:/x:k", "w:/x:99999999999G",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		spec, err := ParseSpec(s)
		if err != nil {
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			return
		}
		require.NoError(t, spec.Validate())
		require.True(t, nameRE.MatchString(spec.Name))
		require.True(t, path.IsAbs(spec.Path))
		require.Equal(t, path.Clean(spec.Path), spec.Path)
		require.NotEqual(t, "/", spec.Path)
		require.NotContains(t, spec.Path, "\x00")
		for _, sys := range systemPaths {
			require.False(t, spec.Path == sys || strings.HasPrefix(spec.Path, sys+"/"), "mount at %s under %s", spec.Path, sys)
		}
		if spec.SizeBytes != 0 { // 0 is the default size
			require.GreaterOrEqual(t, spec.SizeBytes, MinSize)
			require.LessOrEqual(t, spec.SizeBytes, MaxSize)
		}

		printed := fmt.Sprintf("%s:%s:%d:%d:%d", spec.Name, spec.Path, spec.UID, spec.GID, spec.SizeBytes)
		again, err := ParseSpec(printed)
		require.NoError(t, err, "printed as %q", printed)
		require.Equal(t, spec, again)
	})
}
