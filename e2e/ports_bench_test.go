package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
)

// The port proxy's overhead against a direct connection to the instance's
// bridge address, in one run, alternating: the same server (testdata/wsecho
// on 0.0.0.0:9000, keep-alive) reached both ways.
//
//	go test -count=1 -run '^$' -bench BenchmarkRootPorts -benchtime 2000x ./e2e/
//
// BenchmarkRootPortsLatency: b.N small GETs each way; reports p50 and p99
// in microseconds and their ratios (proxy / direct).
// BenchmarkRootPortsDownload: b.N downloads of 1 GiB each way; reports
// MiB/s each way and the ratio (proxy / direct). Run it with -benchtime 3x.

// portsBenchTarget starts an instance with wsecho on 0.0.0.0:9000 and returns
// the path-form base URL and the direct one.
func portsBenchTarget(b *testing.B) (proxy, direct string) {
	b.Helper()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	project := fmt.Sprintf("ports-bench-%d", projectSeq.Add(1))
	_, err := env.c.CreateProject(c, types.CreateProjectRequest{Name: project, Base: fixtureBase})
	require.NoError(b, err)
	in, err := env.c.CreateInstance(c, project, types.CreateInstanceRequest{})
	require.NoError(b, err)
	b.Cleanup(func() { _, _ = env.c.DeleteInstance(context.Background(), in.ID) })
	wsEchoOn(b, in.ID, "0.0.0.0:9000")
	in, err = env.c.GetInstance(c, in.ID)
	require.NoError(b, err)
	require.NotEmpty(b, in.Address)
	return env.c.PortURL(in.ID, 9000, ""), "http://" + net.JoinHostPort(in.Address, "9000")
}

func portsFetch(b *testing.B, hc *http.Client, url string, auth bool) int64 {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(b, err)
	if auth {
		req.Header.Set("Authorization", "Bearer "+env.node.Token)
	}
	resp, err := hc.Do(req)
	require.NoError(b, err)
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	require.NoError(b, err)
	require.Equal(b, http.StatusOK, resp.StatusCode)
	return n
}

func portsPercentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

func BenchmarkRootPortsLatency(b *testing.B) {
	proxy, direct := portsBenchTarget(b)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	for range 50 { // warm both paths' connections
		portsFetch(b, hc, proxy+"small", true)
		portsFetch(b, hc, direct+"/small", false)
	}
	var viaProxy, viaDirect []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		portsFetch(b, hc, proxy+"small", true)
		t1 := time.Now()
		portsFetch(b, hc, direct+"/small", false)
		viaProxy, viaDirect = append(viaProxy, t1.Sub(t0)), append(viaDirect, time.Since(t1))
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	pp50, pp99 := portsPercentile(viaProxy, 0.50), portsPercentile(viaProxy, 0.99)
	dp50, dp99 := portsPercentile(viaDirect, 0.50), portsPercentile(viaDirect, 0.99)
	b.ReportMetric(us(pp50), "proxy-p50-us")
	b.ReportMetric(us(pp99), "proxy-p99-us")
	b.ReportMetric(us(dp50), "direct-p50-us")
	b.ReportMetric(us(dp99), "direct-p99-us")
	b.ReportMetric(float64(pp50)/float64(dp50), "p50-ratio")
	b.ReportMetric(float64(pp99)/float64(dp99), "p99-ratio")
}

func BenchmarkRootPortsDownload(b *testing.B) {
	const size = 1 << 30
	proxy, direct := portsBenchTarget(b)
	hc := &http.Client{}
	q := "zeros?n=" + strconv.Itoa(size)
	var viaProxy, viaDirect time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		require.EqualValues(b, size, portsFetch(b, hc, proxy+q, true))
		t1 := time.Now()
		require.EqualValues(b, size, portsFetch(b, hc, direct+"/"+q, false))
		viaProxy += t1.Sub(t0)
		viaDirect += time.Since(t1)
	}
	b.StopTimer()
	mibps := func(d time.Duration) float64 { return float64(b.N) * size / (1 << 20) / d.Seconds() }
	b.ReportMetric(mibps(viaProxy), "proxy-MiB/s")
	b.ReportMetric(mibps(viaDirect), "direct-MiB/s")
	b.ReportMetric(mibps(viaProxy)/mibps(viaDirect), "throughput-ratio")
}
