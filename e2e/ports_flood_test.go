package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/internal/proc"
)

// installTestProgram builds the e2e testdata program pkg (./testdata/NAME)
// static and copies it into the instance at dest.
func installTestProgram(t *testing.T, id, pkg, dest string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "build %s: %s", pkg, out)
	b, err := os.ReadFile(bin)
	require.NoError(t, err)
	var stderr bytes.Buffer
	code, err := env.c.ExecStream(ctx(t), id, types.ExecRequest{Args: []string{"/bin/sh", "-c", "cat > " + dest + " && chmod +x " + dest}},
		types.Stdio{Stdin: bytes.NewReader(b), Stdout: io.Discard, Stderr: &stderr})
	require.NoError(t, err)
	require.Equal(t, 0, code, stderr.String())
}

// One tenant floods the port proxy and the TCP tunnel with connections to
// a listener that never accepts (its backlog full, so every connect
// hangs). The node's OS thread count stays where it was, the requests past
// the tenant's dial limit are answered 429 resource_exhausted with
// Retry-After at once, the admitted ones 502 port_unreachable when the dial
// timeout ends, and /healthz answers throughout.
func TestRootPortsDialFloodShedsLoad(t *testing.T) {
	project := newProject(t, "ports-flood")
	in := up(t, project, 0)
	installTestProgram(t, in.ID, "./testdata/noaccept", "/noaccept")
	mustSh(t, in.ID, `(setsid /noaccept 127.0.0.1:7300 </dev/null >/tmp/noaccept.log 2>&1 &)`)
	require.Eventually(t, func() bool {
		ps, _ := env.c.ListPorts(ctx(t), in.ID)
		for _, p := range ps {
			if p.Port == 7300 {
				return true
			}
		}
		return false
	}, 20*time.Second, 200*time.Millisecond, "noaccept never listened")

	before, err := proc.Threads()
	require.NoError(t, err)

	const proxied, tunnels = 150, 50
	limit := envd.DefaultDialLimits.PerTenant
	c, cancel := context.WithTimeout(ctx(t), 40*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: proxied}}
	defer hc.CloseIdleConnections()

	type answer struct {
		status     int
		code       string
		retryAfter string
		took       time.Duration
	}
	answers := make(chan answer, proxied+tunnels)
	var wg sync.WaitGroup
	start := time.Now()
	for range proxied {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, rcancel := context.WithTimeout(c, 25*time.Second)
			defer rcancel()
			req, _ := http.NewRequestWithContext(rc, http.MethodGet, env.c.PortURL(in.ID, 7300, "/"), nil)
			req.Header.Set("Authorization", "Bearer "+env.node.Token)
			t0 := time.Now()
			resp, err := hc.Do(req)
			if err != nil {
				answers <- answer{status: -1, took: time.Since(t0)} // the one connection the backlog took: no answer
				return
			}
			defer resp.Body.Close()
			var body struct {
				Error struct{ Code string } `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&body)
			answers <- answer{resp.StatusCode, body.Error.Code, resp.Header.Get("Retry-After"), time.Since(t0)}
		}()
	}
	for range tunnels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			conn, err := env.c.DialPort(c, in.ID, 7300)
			if err == nil {
				conn.Close()
				answers <- answer{status: http.StatusSwitchingProtocols, took: time.Since(t0)}
				return
			}
			answers <- answer{status: -2, code: portsCode(err), took: time.Since(t0)}
		}()
	}

	// While the dials hang: the thread count and /healthz.
	peak := before
	var healthz []time.Duration
	for time.Since(start) < 8*time.Second {
		if n, err := proc.Threads(); err == nil {
			peak = max(peak, n)
		}
		t0 := time.Now()
		hctx, hcancel := context.WithTimeout(c, 5*time.Second)
		require.NoError(t, env.c.Healthz(hctx), "/healthz during the flood")
		hcancel()
		healthz = append(healthz, time.Since(t0))
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	close(answers)

	counts := map[string]int{}
	for a := range answers {
		switch {
		case a.status == http.StatusTooManyRequests:
			counts["429"]++
			assert.Equal(t, "resource_exhausted", a.code)
			assert.Equal(t, "1", a.retryAfter)
			assert.Less(t, a.took, 5*time.Second, "a refusal waited")
		case a.status == -2 && a.code == "resource_exhausted":
			counts["tunnel 429"]++
		case a.status == http.StatusBadGateway || (a.status == -2 && a.code == "port_unreachable"):
			counts["502"]++
			assert.Equal(t, "port_unreachable", a.code)
			assert.Less(t, a.took, 20*time.Second, "a dial outlived its timeout")
		default:
			counts["other"]++
		}
	}
	t.Logf("threads before %d, peak %d; answers %v; /healthz took up to %v", before, peak, counts, slices.Max(healthz))
	assert.GreaterOrEqual(t, counts["429"]+counts["tunnel 429"], proxied+tunnels-limit-1, "past the tenant's dial limit, requests are refused")
	assert.Positive(t, counts["tunnel 429"], "tunnels are refused too")
	assert.LessOrEqual(t, counts["502"]+counts["other"], limit+1, "more dials admitted than the limit")
	// Concurrent SYNs can each get a SYN-ACK before the queue is full: a
	// few connects complete and their requests hang until the client gives up.
	assert.LessOrEqual(t, counts["other"], limit/4, "answers neither refused nor timed out: %v", counts)
	assert.Less(t, peak-before, 40, "%d hanging dials grew the node from %d to %d OS threads", proxied+tunnels, before, peak)
}
