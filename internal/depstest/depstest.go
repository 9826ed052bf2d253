// Package depstest checks in tests what a package links, for the surfaces
// that must stay clients of the API (api/mcp, api/e2b): they build from the
// wire contract and the Go client, never from the service core, the store,
// the runtime or their drivers.
package depstest

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// serviceSide are the module paths a client of the API must not link.
var serviceSide = []string{"github.com/envd-dev/envd/envd", "github.com/envd-dev/envd/versions", "github.com/envd-dev/envd/runtime",
	"github.com/envd-dev/envd/registry", "github.com/containerd/", "github.com/jackc/pgx", "github.com/minio/", "github.com/gin-gonic/"}

// RequireClientOnly fails t unless the package in the test's directory
// links the Go client and none of the service side; name says which
// package in the message.
func RequireClientOnly(t *testing.T, name string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/envd-dev/envd/client")
	for _, d := range deps {
		for _, banned := range serviceSide {
			require.False(t, d == banned || strings.HasPrefix(d, strings.TrimSuffix(banned, "/")+"/"), "%s depends on %s", name, d)
		}
	}
}
