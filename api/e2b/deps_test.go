package e2b_test

import (
	"testing"

	"github.com/envd-dev/envd/internal/depstest"
)

// The E2B surface is a client of the API, as api/mcp is: it builds from the
// wire contract and the Go client, never from the service core, the store
// or the runtime (its store comes in as an interface).
func TestDependenciesAreTheClients(t *testing.T) {
	depstest.RequireClientOnly(t, "api/e2b")
}
