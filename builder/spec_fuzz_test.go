package builder

import (
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// FuzzCheckSpec: a file path CheckSpec accepts stays inside the image's
// root (absolute, clean, no ".." element) and reaches the build only as
// one argument of the fixed write script; a context source it accepts
// stays inside the context; an argv step reaches the build as given. A
// refused spec is errdefs.ErrInvalidArgument.
func FuzzCheckSpec(f *testing.F) {
	for _, s := range [][3]string{
		{"/etc/motd", "echo", "a/b"}, {"../etc/passwd", "$(id)", "../x"}, {"/etc/../../x", "a;b", "/abs"},
		{"/", "", "./a"}, {"/proc/1/mem", "`x`", "a/../b"}, {"//etc//x", "x\x00y", "."}, {"/a b/c'd", "> /x", "a\x00"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, p, arg, src string) {
		req := types.BuildRequest{
			Context: "sha256:" + strings.Repeat("0", 64),
			Files:   []types.BuildFile{{Path: p, Content: "x"}, {Path: "/ctx/file", Source: src}},
			Run:     []types.BuildStep{{Args: []string{"echo", arg}}},
		}
		if err := CheckSpec(req); err != nil {
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			return
		}
		require.True(t, path.IsAbs(p) && path.Clean(p) == p && p != "/", "%q", p)
		require.NotContains(t, strings.Split(p, "/"), "..")
		if src != "" { // "" is an empty file, not a source
			name := ContextName(src)
			require.False(t, path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || name == "", "%q leaves the context", src)
		}
		steps, err := Plan(req, func(n string) ([]byte, error) { return []byte(n), nil })
		require.NoError(t, err)
		require.Equal(t, []string{"sh", "-c", writeScript, "sh", p, "0644"}, steps[0].Args)
		require.Equal(t, []string{"echo", arg}, steps[2].Args)
		require.False(t, slices.Contains(steps[0].Args[:3], p))
	})
}
