package mcp_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The MCP server is a client of the API: it builds from the wire contract,
// the Go client and the MCP SDK, never from the service core, the store or
// the runtime (nor their drivers), so it can run apart from a node.
func TestDependenciesAreTheClients(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/envd-dev/envd/client")
	for _, d := range deps {
		for _, banned := range []string{"github.com/envd-dev/envd/envd", "github.com/envd-dev/envd/versions", "github.com/envd-dev/envd/runtime",
			"github.com/envd-dev/envd/registry", "github.com/containerd/", "github.com/jackc/pgx", "github.com/minio/", "github.com/gin-gonic/"} {
			require.False(t, d == banned || strings.HasPrefix(d, strings.TrimSuffix(banned, "/")+"/"), "api/mcp depends on %s", d)
		}
	}
}
