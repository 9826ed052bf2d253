package metrics

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/api/types"
)

// scrapeTimeout bounds the store query of one scrape.
const scrapeTimeout = 5 * time.Second

var (
	instancesDesc = prometheus.NewDesc("envd_instances", "Instances on this node by state.", []string{"state"}, nil)
	noExpiryDesc  = prometheus.NewDesc("envd_instances_without_expiry", "Live instances started with ttl none.", nil, nil)
)

// instances reads the node's instances by state from the store at scrape
// time, so the gauges are never stale and nothing has to keep them in step
// with every transition.
type instances struct {
	node  string
	store Store
}

func (c *instances) Describe(ch chan<- *prometheus.Desc) {
	ch <- instancesDesc
	ch <- noExpiryDesc
}

func (c *instances) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	counts, err := c.store.CountInstances(ctx, c.node)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(instancesDesc, fmt.Errorf("count instances: %w", err))
		return
	}
	noExpiry := 0
	for _, n := range counts {
		ch <- prometheus.MustNewConstMetric(instancesDesc, prometheus.GaugeValue, float64(n.Count), string(n.State))
		if n.State != types.StateTerminated && n.State != types.StateFailed {
			noExpiry += n.NoExpiry
		}
	}
	ch <- prometheus.MustNewConstMetric(noExpiryDesc, prometheus.GaugeValue, float64(noExpiry))
}

var (
	diskFreeDesc = prometheus.NewDesc("envd_disk_free_bytes", "Bytes available to envd on the data dir's filesystem.", nil, nil)
	diskSizeDesc = prometheus.NewDesc("envd_disk_size_bytes", "Size of the data dir's filesystem.", nil, nil)
	memAvailDesc = prometheus.NewDesc("envd_memory_available_bytes", "Memory available for new work (MemAvailable of /proc/meminfo).", nil, nil)
	memTotalDesc = prometheus.NewDesc("envd_memory_total_bytes", "Memory of the machine (MemTotal of /proc/meminfo).", nil, nil)
)

// headroom reads the node's disk (statfs of the data dir) and memory
// (/proc/meminfo) at scrape time.
type headroom struct {
	dataDir string
	meminfo string
}

func (c *headroom) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{diskFreeDesc, diskSizeDesc, memAvailDesc, memTotalDesc} {
		ch <- d
	}
}

func (c *headroom) Collect(ch chan<- prometheus.Metric) {
	var st unix.Statfs_t
	if err := unix.Statfs(c.dataDir, &st); err != nil {
		ch <- prometheus.NewInvalidMetric(diskFreeDesc, fmt.Errorf("statfs %s: %w", c.dataDir, err))
	} else {
		ch <- prometheus.MustNewConstMetric(diskFreeDesc, prometheus.GaugeValue, float64(st.Bavail)*float64(st.Bsize))
		ch <- prometheus.MustNewConstMetric(diskSizeDesc, prometheus.GaugeValue, float64(st.Blocks)*float64(st.Bsize))
	}
	avail, total, err := readMeminfo(c.meminfo)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(memAvailDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(memAvailDesc, prometheus.GaugeValue, float64(avail))
	ch <- prometheus.MustNewConstMetric(memTotalDesc, prometheus.GaugeValue, float64(total))
}

// readMeminfo returns MemAvailable and MemTotal of a /proc/meminfo file,
// in bytes.
func readMeminfo(path string) (avail, total int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "MemAvailable" && key != "MemTotal") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %s: %w", path, key, err)
		}
		if key == "MemAvailable" {
			avail = kb << 10
		} else {
			total = kb << 10
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("%s: no MemAvailable or MemTotal", path)
	}
	return avail, total, nil
}
