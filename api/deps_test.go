package api_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The API is gin, auth and validation in front of small interfaces: what
// it links must not include the runtime's or the store's drivers, so that
// a client or a test of the HTTP layer does not build containerd and pgx
// (issue 30). Whatever the API needs of them (a constant, a check) lives
// in api/types or another leaf package.
func TestAPILinksNeitherContainerdNorPgx(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/envd-dev/envd/api").Output()
	require.NoError(t, err, "go list -deps")
	var bad []string
	for _, pkg := range strings.Fields(string(out)) {
		if strings.Contains(pkg, "containerd") || strings.Contains(pkg, "jackc/pgx") {
			bad = append(bad, pkg)
		}
	}
	assert.Empty(t, bad, "api links these; move what it needs into a leaf package")
}
