package builder

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		manager string
		pkgs    []string
		ok      bool
	}{
		{Apt, []string{"graphviz", "libc6=2.36-9+deb12u4", "g++", "python3.11", "tzdata=2024a-0+deb12u1"}, true},
		{Apt, []string{"vim=2:9.0.1378-2"}, true},
		{Apk, []string{"graphviz", "py3-pip=23.1.2-r0", "gcc_x"}, true},
		{Apt, nil, false},
		{"yum", []string{"graphviz"}, false},
		{Apt, []string{"graphviz; rm -rf /"}, false},
		{Apt, []string{"$(reboot)"}, false},
		{Apt, []string{"-oAPT::Get::AllowUnauthenticated=true"}, false},
		{Apt, []string{"--allow-downgrades"}, false},
		{Apt, []string{"Graphviz"}, false},
		{Apt, []string{"a"}, false},
		{Apt, []string{"graphviz=`id`"}, false},
		{Apt, []string{"graphviz=1.0 && id"}, false},
		{Apt, []string{"graphviz=abc"}, false},
		{Apt, []string{"gcc_x"}, false},
		{Apk, []string{"-X http://evil/"}, false},
		{Apk, []string{"pkg=1.0|x"}, false},
		{Apt, []string{"ok", "bad name"}, false},
	} {
		err := Check(tc.manager, tc.pkgs)
		if tc.ok {
			assert.NoError(t, err, "%s %q", tc.manager, tc.pkgs)
		} else {
			assert.ErrorIs(t, err, errdefs.ErrInvalidArgument, "%s %q", tc.manager, tc.pkgs)
		}
	}
	many := make([]string, MaxPackages+1)
	for i := range many {
		many[i] = "pkg"
	}
	assert.ErrorIs(t, Check(Apt, many), errdefs.ErrInvalidArgument)
}

func TestSteps(t *testing.T) {
	t.Parallel()
	apt := Steps(Apt, []string{"tree", "graphviz", "tree"})
	require.Len(t, apt, 4)
	assert.Equal(t, []string{"apt-get", "-o", "Acquire::Retries=3", "install", "-y", "--no-install-recommends", "--", "graphviz", "tree"}, apt[1].Args,
		"sorted, deduplicated, after -- so nothing reads as an option")
	assert.Contains(t, apt[1].Env, "DEBIAN_FRONTEND=noninteractive")
	assert.Equal(t, []Step{{Args: []string{"apk", "add", "--no-cache", "graphviz"}}}, Steps(Apk, []string{"graphviz"}))
}

func TestKey(t *testing.T) {
	t.Parallel()
	a := Key("r@sha256:1", Apt, []string{"tree", "graphviz"}, [][]string{{"dot", "-V"}})
	assert.Equal(t, a, Key("r@sha256:1", Apt, []string{"graphviz", "tree", "tree"}, [][]string{{"dot", "-V"}}), "order and duplicates do not matter")
	assert.NotEqual(t, a, Key("r@sha256:2", Apt, []string{"tree", "graphviz"}, [][]string{{"dot", "-V"}}), "another base")
	assert.NotEqual(t, a, Key("r@sha256:1", Apt, []string{"tree"}, [][]string{{"dot", "-V"}}), "other packages")
	assert.NotEqual(t, a, Key("r@sha256:1", Apt, []string{"tree", "graphviz"}, [][]string{{"dot -V"}}), "other validation")
}
