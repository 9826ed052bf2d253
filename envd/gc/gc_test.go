package gc

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/envd-dev/envd/envd/names"
)

// The sweep's orphan scan looks only at project repositories: never at
// imported images nor at repositories envd did not make.
func TestIsProjectRepo(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		repo string
		want bool
	}{
		{names.ProjectRepo("acme", "web"), true},
		{names.ImageRepo("debian"), false},
		{"envd/images/x", false},
		{"envd/acme", false},
		{"envd/acme/web/extra", false},
		{"envd//web", false},
		{"other/acme/web", false},
		{"library/busybox", false},
	} {
		assert.Equal(t, c.want, IsProjectRepo(c.repo), c.repo)
	}
}
