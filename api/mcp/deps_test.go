package mcp_test

import (
	"testing"

	"github.com/envd-dev/envd/internal/depstest"
)

// The MCP server is a client of the API: it builds from the wire contract,
// the Go client and the MCP SDK, never from the service core, the store or
// the runtime (nor their drivers), so it can run apart from a node.
func TestDependenciesAreTheClients(t *testing.T) {
	depstest.RequireClientOnly(t, "api/mcp")
}
