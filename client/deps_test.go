package client_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The client and the CLI are what users and SDKs build against: they depend
// on the wire contract (api/types, errdefs, api/execproto) and a few small
// modules, never on the server's (containerd, distribution, pgx, minio, AWS).
// The wire packages themselves depend on the standard library only.
func TestDependenciesStayLight(t *testing.T) {
	const mod = "github.com/envd-dev/envd/"
	for _, tc := range []struct {
		pkgs    []string
		allowed []string // import path prefixes of non-standard packages
	}{
		{
			pkgs:    []string{mod + "api/types", mod + "errdefs", mod + "api/execproto"},
			allowed: []string{mod + "api/types", mod + "errdefs", mod + "api/execproto"},
		},
		{
			pkgs: []string{mod + "client", mod + "cmd/envctl"},
			allowed: []string{mod + "api/types", mod + "errdefs", mod + "api/execproto", mod + "client", mod + "cmd/envctl",
				"github.com/coder/websocket", "github.com/spf13/cobra", "github.com/spf13/pflag",
				"golang.org/x/sys/", "golang.org/x/term",
				// envctl cp reads and extracts directories with the project's
				// one tar walker (confined, no device nodes), and its gzip.
				mod + "internal/tarfs", "github.com/klauspost/compress",
				mod + "internal/shellwords", // standard library only
				// build --devcontainer translates on the client's side and
				// pulls features with net/http (no registry library).
				mod + "builder/devcontainer",
				"go.yaml.in/yaml/v3"}, // build -f reads YAML specs (pure Go, no dependencies)
		},
	} {
		args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, tc.pkgs...)
		out, err := exec.Command("go", args...).CombinedOutput()
		require.NoError(t, err, "go list: %s", out)
		deps := strings.Fields(string(out))
		require.NotEmpty(t, deps)
		for _, d := range deps {
			ok := false
			for _, a := range tc.allowed {
				ok = ok || d == a || strings.HasPrefix(d, a+"/") || (strings.HasSuffix(a, "/") && strings.HasPrefix(d, a))
			}
			require.True(t, ok, "%v depends on %s, which is not in the allowed list", tc.pkgs, d)
		}
	}
}
