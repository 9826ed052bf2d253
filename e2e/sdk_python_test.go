package e2e

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestSDKPython runs the Python SDK's unittest suite (sdk/python/tests)
// against this package's node: its unit tests and its integration tests,
// which read ENVD_URL, ENVD_TOKEN (the admin token) and ENVD_IMAGE. It uses
// the python3 found on PATH; the SDK needs the standard library only.
func TestSDKPython(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed for the Python SDK's tests: %v", err)
	}
	c, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := commandContext(c, py, "-m", "unittest", "discover", "-v", "-s", "../sdk/python/tests")
	cmd.Env = append(os.Environ(),
		"ENVD_URL="+env.node.URL,
		"ENVD_TOKEN="+env.node.Token,
		"ENVD_IMAGE="+fixtureBase,
		"PYTHONDONTWRITEBYTECODE=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python3 -m unittest discover -s ../sdk/python/tests: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
