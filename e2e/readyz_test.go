package e2e

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/syncbuf"
)

// /readyz says ready while every part answers and names the part that
// does not: the registry gone (and back), then PostgreSQL stopped. The
// access log has a line per request with the id the answer carried.
func TestRootReadyz(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	var logs syncbuf.Buffer
	n, reg, dir := startCuttableNode(t, "readyz", node.Config{PrefetchWindow: -1, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})

	ready := readyz(t, n.URL, http.StatusOK)
	assert.Equal(t, types.ReadyStatus, ready.Status)
	want := []string{"containerd", "postgresql", "registry"}
	if n.Runtime().LazySnapshotter() != "" {
		want = append(want, "snapshotter")
	}
	for _, name := range want {
		assert.Equal(t, types.CheckOK, ready.Checks[name].Status, "%s: %+v", name, ready.Checks[name])
	}
	assert.Len(t, ready.Checks, len(want))

	// The registry is unreachable: not ready, because of the registry only.
	reg.stop()
	notReady := readyz(t, n.URL, http.StatusServiceUnavailable)
	assert.Equal(t, types.NotReadyStatus, notReady.Status)
	assert.Equal(t, types.CheckFailed, notReady.Checks["registry"].Status)
	assert.Contains(t, notReady.Checks["registry"].Error, reg.addr)
	for _, name := range []string{"containerd", "postgresql"} {
		assert.Equal(t, types.CheckOK, notReady.Checks[name].Status, name)
	}
	reg.start(0)
	readyz(t, n.URL, http.StatusOK)

	// A request's id is in its answer, its error body and the access log.
	cl, err := client.New(n.URL, n.Token)
	require.NoError(t, err)
	_, err = cl.GetProject(c, "no-such-project")
	var ce *types.Error
	require.ErrorAs(t, err, &ce)
	require.NotEmpty(t, ce.RequestID)
	line := accessLine(t, logs.String(), ce.RequestID)
	assert.Equal(t, "/v1/projects/:p", line["route"])
	assert.EqualValues(t, http.StatusNotFound, line["status"])
	assert.NotContains(t, logs.String(), n.Token, "the token never reaches the log")

	// PostgreSQL is stopped: not ready, naming it.
	ctls, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	require.NotEmpty(t, ctls, "Debian's postgresql is installed by scripts/setup.sh")
	out, err := exec.Command("runuser", "-u", "postgres", "--", ctls[len(ctls)-1], "-D", filepath.Join(dir, "data", "pg", "data"), "stop", "-m", "fast").CombinedOutput()
	require.NoError(t, err, string(out))
	notReady = readyz(t, n.URL, http.StatusServiceUnavailable)
	assert.Equal(t, types.CheckFailed, notReady.Checks["postgresql"].Status)
	assert.NotEmpty(t, notReady.Checks["postgresql"].Error)
	assert.Equal(t, types.CheckOK, notReady.Checks["registry"].Status)
	_, err = cl.GetProject(c, "no-such-project")
	assert.ErrorIs(t, err, errdefs.ErrUnavailable, "the API agrees")
}

// readyz asks url's /readyz, without a token, and requires status.
func readyz(t *testing.T, url string, status int) types.Readiness {
	t.Helper()
	start := time.Now()
	resp, err := http.Get(url + "/readyz")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	t.Logf("/readyz in %v: %d %s", time.Since(start), resp.StatusCode, b)
	require.Equal(t, status, resp.StatusCode, "%s", b)
	assert.NotEmpty(t, resp.Header.Get("X-Request-Id"))
	var r types.Readiness
	require.NoError(t, json.Unmarshal(b, &r), "%s", b)
	return r
}

// accessLine is the access log line of request id in the JSON log.
func accessLine(t *testing.T, log, id string) map[string]any {
	t.Helper()
	for l := range strings.Lines(log) {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "http request" && m["request_id"] == id {
			return m
		}
	}
	require.Failf(t, "no access log line", "request id %s in:\n%s", id, log)
	return nil
}
