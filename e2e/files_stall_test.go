package e2e

import (
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
)

// osThreads is this process's (the node's) OS thread count.
func osThreads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

// Archive downloads whose clients stop reading, from several tenants up
// to each one's limit, hold no OS thread: the node's thread count stays
// where it was, a tenant's next download is 429 resource_exhausted with
// Retry-After, and the node answers /healthz.
func TestRootFilesStalledArchivesHoldNoThread(t *testing.T) {
	const tenants, perTenant = 8, 4 // perTenant: the default archives limit
	type tenant struct {
		c  *client.Client
		in string
	}
	var ts []tenant
	for i := range tenants {
		_, tc := newTenant(t, "stall")
		project := "stall-" + strconv.Itoa(int(projectSeq.Add(1)))
		_, err := tc.CreateProject(ctx(t), types.CreateProjectRequest{Name: project, Base: fixtureBase})
		require.NoError(t, err)
		in, err := tc.CreateInstance(ctx(t), project, types.CreateInstanceRequest{})
		require.NoError(t, err)
		t.Cleanup(func() { _, _ = tc.DeleteInstance(ctx(t), in.ID) })
		// More than the socket buffers hold, so that a download whose
		// client does not read stays in progress.
		_, err = tc.WriteFile(ctx(t), in.ID, "/big/blob", strings.NewReader(strings.Repeat("x", 32<<20)), client.WithMkdir())
		require.NoError(t, err, "tenant %d", i)
		ts = append(ts, tenant{tc, in.ID})
	}
	// A download of each tenant first: the node's own threads for this
	// work are counted in the baseline.
	for _, tn := range ts {
		r, err := tn.c.DownloadArchive(ctx(t), tn.in, "/big")
		require.NoError(t, err)
		_, err = io.Copy(io.Discard, r)
		require.NoError(t, err)
		r.Close()
	}
	before := osThreads(t)

	for _, tn := range ts {
		for range perTenant {
			r, err := tn.c.DownloadArchive(ctx(t), tn.in, "/big")
			require.NoError(t, err)
			t.Cleanup(func() { r.Close() })
			buf := make([]byte, 512)
			_, err = io.ReadFull(r, buf) // the first header, then the client stops reading
			require.NoError(t, err)
		}
		_, err := tn.c.DownloadArchive(ctx(t), tn.in, "/big")
		requireCode(t, err, "resource_exhausted")
		var e *types.Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, "archives", e.Details["kind"])
	}
	// The stalled walks fill their buffers and block; their threads (before
	// the fix, one locked thread each) are not held meanwhile.
	require.Eventually(t, func() bool { return osThreads(t) <= before+tenants*perTenant/4 }, 10*time.Second, 100*time.Millisecond,
		"%d stalled downloads: %d OS threads, %d before", tenants*perTenant, osThreads(t), before)
	hr, err := http.Get(env.node.URL + "/healthz")
	require.NoError(t, err)
	hr.Body.Close()
	assert.Equal(t, http.StatusOK, hr.StatusCode)
}
