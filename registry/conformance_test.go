package registry

import (
	"context"
	"encoding/xml"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOCIConformance runs the OCI distribution-spec conformance suite
// against the embedded registry. It is opt-in: scripts/conformance.sh builds
// the suite and sets ENVD_CONFORMANCE_BIN.
func TestOCIConformance(t *testing.T) {
	bin := os.Getenv("ENVD_CONFORMANCE_BIN")
	if bin == "" {
		t.Skip("opt-in: run scripts/conformance.sh (sets ENVD_CONFORMANCE_BIN to a built conformance.test)")
	}
	srv := startRegistry(t)
	results := t.TempDir()
	if d := os.Getenv("ENVD_CONFORMANCE_RESULTS"); d != "" {
		results = d
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = results
	cmd.Env = append(os.Environ(),
		"OCI_REGISTRY="+srv.Addr(),
		"OCI_TLS=disabled",
		"OCI_REPO1=a/one",
		"OCI_REPO2=a/two",
		"OCI_RESULTS_DIR="+results,
		"OCI_LOG=error",
		// The GC's credential: the suite deletes manifests, blobs and tags.
		"OCI_USERNAME="+srv.Access().GC.User,
		"OCI_PASSWORD="+srv.Access().GC.Password,
	)
	out, err := cmd.CombinedOutput()
	// The suite exits non-zero when any check fails; the totals are the result.
	if err != nil {
		var exitErr interface{ ExitCode() int }
		if !errors.As(err, &exitErr) {
			require.NoError(t, err, "run %s:\n%s", bin, out)
		}
	}
	raw, err := os.ReadFile(filepath.Join(results, "junit.xml"))
	require.NoError(t, err, "suite output:\n%s", out)
	tot, err := junitTotals(raw)
	require.NoError(t, err)
	t.Logf("OCI conformance: tests=%d failures=%d errors=%d skipped=%d (results in %s)",
		tot.Tests, tot.Failures, tot.Errors, tot.Skipped, results)
}

// junitSummary is the header of the suite's junit.xml (<testsuites ...>).
type junitSummary struct {
	Tests    int `xml:"tests,attr"`
	Failures int `xml:"failures,attr"`
	Errors   int `xml:"errors,attr"`
	Skipped  int `xml:"skipped,attr"`
}

func junitTotals(raw []byte) (junitSummary, error) {
	var s junitSummary
	err := xml.Unmarshal(raw, &s)
	return s, err
}
