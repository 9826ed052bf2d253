package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSDKTypeScript builds the TypeScript SDK (sdk/typescript) and runs its
// unit tests and its integration tests, with Node's own test runner, against
// this package's node. scripts/setup.sh installs the SDK's npm packages.
func TestSDKTypeScript(t *testing.T) {
	dir, err := filepath.Abs("../sdk/typescript")
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "typescript", "package.json")); err != nil {
		t.Fatalf("sdk/typescript/node_modules is missing or incomplete (%v): run scripts/setup.sh", err)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("npm is not on PATH (%v): install Node.js 20 or newer, then run scripts/setup.sh", err)
	}
	suffix := make([]byte, 4)
	_, _ = rand.Read(suffix)
	environ := append(os.Environ(),
		"ENVD_URL="+env.node.URL,
		"ENVD_TOKEN="+env.node.Token,
		"ENVD_IMAGE="+fixtureBase,
		"ENVD_PROJECT=sdkts-"+hex.EncodeToString(suffix),
	)
	for _, script := range []string{"build", "test:unit", "test:integration"} {
		cmd := commandContext(ctx(t), "npm", "run", "--silent", script)
		cmd.Dir, cmd.Env = dir, environ
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("npm run %s in sdk/typescript: %v\n%s", script, err, out)
		}
		t.Logf("npm run %s: ok %s", script, nodeTestSummary(string(out)))
	}
	// ENVD_SDK_BENCH=1 also measures the SDK against raw HTTP calls (1,000
	// execs, 100 saves: minutes, so not by default).
	if os.Getenv("ENVD_SDK_BENCH") != "" {
		cmd := commandContext(ctx(t), "node", "bench/overhead.mjs")
		cmd.Dir, cmd.Env = dir, environ
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "bench/overhead.mjs: %s", out)
		t.Logf("bench/overhead.mjs: %s", out)
	}
}

// nodeTestSummary picks the test runner's counts ("# pass 35", ...) from its output.
func nodeTestSummary(out string) string {
	var parts []string
	for _, m := range regexp.MustCompile(`(?m)^# (tests|pass|fail) (\d+)$`).FindAllStringSubmatch(out, -1) {
		parts = append(parts, m[1]+" "+m[2])
	}
	return strings.Join(parts, ", ")
}
