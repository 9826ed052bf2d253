package builder

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// FuzzCheck: a package entry Check accepts is inert for the package
// manager and a shell alike: no whitespace, quotes, shell metacharacters or
// control characters, it cannot be read as an option, and Steps passes it
// as exactly one argument (after "--" for apt). A refused one is
// errdefs.ErrInvalidArgument.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		"graphviz", "libc6=2.36-9+deb12u4", "g++", "vim=2:9.0.1378-2", "py3-pip=23.1.2-r0", "a",
		"-o", "--allow-unauthenticated", "x;rm -rf /", "$(id)", "`id`", "x y", "x\ny", "x=", "=1",
		"x=1=2", "x=a", "UPPER", "x|y", "x>y", "x\x00y", "x=1:2:3", "x=1 -o",
	} {
		f.Add(Apt, s)
		f.Add(Apk, s)
	}
	f.Add("yum", "x")
	f.Fuzz(func(t *testing.T, manager, pkg string) {
		err := Check(manager, []string{pkg})
		if err != nil {
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			return
		}
		require.Contains(t, []string{Apt, Apk}, manager)
		require.False(t, strings.HasPrefix(pkg, "-"), "%q reads as an option", pkg)
		require.False(t, strings.ContainsAny(pkg, " \t\r\n\x00'\"`$;&|<>()*?[]{}\\!#"), "%q has a shell or space character", pkg)
		name, _, _ := strings.Cut(pkg, "=")
		require.NotEmpty(t, name)
		var install []string
		for _, st := range Steps(manager, []string{pkg}) {
			if slices.Contains(st.Args, pkg) {
				install = st.Args
			}
			if st.Args[0] == "sh" {
				require.Equal(t, []string{"sh", "-c", "rm -rf /var/lib/apt/lists/*"}, st.Args, "a spec value reached a shell script")
			}
		}
		require.NotNil(t, install, "the package is an argument of one step")
		if manager == Apt {
			require.Less(t, slices.Index(install, "--"), slices.Index(install, pkg), "apt reads %q after --", pkg)
		}
	})
}
