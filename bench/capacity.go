package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envd-dev/envd/api/types"
	envdclient "github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/errdefs"
)

// capacityClients is how many clients the API part of the capacity scenario
// runs at once.
const capacityClients = 50

// capacityRounds is how many list, get and exec requests each client makes.
const capacityRounds = 10

// runCapacity is the capacity scenario (issue 15, item 3): cfg.capacity
// idle busybox instances and cfg.capacityDebian Debian ones started on one
// node with `envd up`'s default limits (4 starts at a time), memory and
// disk per instance by part, the API's
// latency for list, get and exec with 50 concurrent clients, and the time
// to start and remove them all. Start and rm latency are reported by tenth
// of the run, so a cost that grows with the number of instances shows.
// With cfg.capacityNodes > 1 the same runs through that many nodes on this
// machine: the instances are created through the primary's API, envd
// places them, and memory and disk are summed over every node's parts.
func runCapacity(ctx context.Context, cfg config, out io.Writer) error {
	return capacity(ctx, cfg, out, nil)
}

// capacityResult is one instance group's figures of a capacity run.
type capacityResult struct {
	group                    string
	n, shims                 int
	shimsPer, sumPer         float64 // bytes per instance
	startAll, rmAll          time.Duration
	listP99, getP99, execP99 time.Duration
}

// capacity runs the capacity scenario and gives each instance group's
// figures to report, if not nil.
func capacity(ctx context.Context, cfg config, out io.Writer, report func(capacityResult)) (rErr error) {
	started := time.Now()
	load0 := loadAvg()
	debianRootfs := cfg.rootfs
	cfg.nodeDefaults = true
	b, err := busyboxBed(ctx, cfg, "capacity")
	defer b.closeInto(&rErr)
	if err != nil {
		return err
	}
	nodes := []*node.Node{b.primary}
	joins, err := startCapacityJoins(ctx, b, cfg.capacityNodes-1)
	// Registered after the bed's close, so it runs first: the joining
	// nodes use the primary's PostgreSQL and registry.
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
		defer cancel()
		for _, jn := range joins {
			jn.Shutdown(sctx)
		}
	}()
	if err != nil {
		return err
	}
	nodes = append(nodes, joins...)
	multi := len(nodes) > 1
	byName := map[string]*node.Node{}
	var names []string
	for _, n := range nodes {
		byName[n.Name()] = n
		names = append(names, n.Name())
	}
	type group struct {
		name, project, base string
		count               int
	}
	groups := []group{{name: "busybox", project: "cap-busybox", base: baseImage, count: cfg.capacity}}
	if cfg.capacityDebian > 0 {
		if err := ensureRootfs(ctx, debianRootfs); err != nil {
			return err
		}
		t := time.Now()
		img, err := b.importRootfs(ctx, "bookworm", debianRootfs)
		if err != nil {
			return err
		}
		logf("imported %s as %q (%s MB gzip) in %s", debianRootfs, "bookworm", megabytes(img.Size), seconds(time.Since(t)))
		groups = append(groups, group{name: "Debian bookworm minbase", project: "cap-debian", base: "bookworm", count: cfg.capacityDebian})
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}}
	api, err := envdclient.New(b.primary.URL, b.primary.Token, envdclient.WithHTTPClient(hc))
	if err != nil {
		return err
	}
	mem := capacityMem{nodes: nodes}
	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "Load average (1, 5, 15 min) at the start: %s.\n\n", load0)
	if multi {
		fmt.Fprintf(&w, "%d nodes on this machine: the primary and %d joining nodes (`node.Start` with the primary's PostgreSQL and registry, data dirs on the same file system), "+
			"each with `envd up`'s default limits and spread placement. Instances are created through the primary's API and placed by envd; "+
			"memory and disk are summed over all nodes' parts. All nodes run in this process.\n\n", len(nodes), len(joins))
	}

	for _, g := range groups {
		if _, err := b.c.CreateProject(ctx, types.CreateProjectRequest{Name: g.project, Base: g.base, Compression: "estargz"}); err != nil {
			return err
		}
		// One start and rm first, so the image is pulled and the measured
		// starts are of a cached version. With more nodes, one start per
		// node, all kept until the last: envd's spread (a tenant's
		// instance already on a node outweighs having the image) puts
		// each on another node.
		warm := make([]string, len(nodes))
		var warmIDs []string
		for i := range nodes {
			in, err := b.up(ctx, g.project, 0)
			if err != nil {
				return err
			}
			warmIDs = append(warmIDs, in.ID)
			warm[i] = in.Node
		}
		for _, id := range warmIDs {
			b.remove(ctx, b.c, id)
		}
		if multi {
			logf("capacity: warm-up starts of %s on %s", g.name, placementText(placementCounts(names, warm)))
		}
		goruntime.GC()
		before, err := mem.sample(nil)
		if err != nil {
			return err
		}
		freeBefore := diskFree(b.primary.DataDir())
		logf("capacity: starting %d %s instances", g.count, g.name)
		ids := make([]string, g.count)
		placed := make([]string, g.count) // node of ids[i]
		startLat := make([]time.Duration, g.count)
		t := time.Now()
		if err := parallel(ctx, g.count, 4, func(i int) error {
			s := time.Now()
			in, err := api.CreateInstance(ctx, g.project, types.CreateInstanceRequest{TTL: "2h"})
			startLat[i] = time.Since(s)
			if err != nil {
				return err
			}
			if in.State != types.StateRunning {
				return fmt.Errorf("instance %s is %s: %s", in.ID, in.State, in.Message)
			}
			ids[i], placed[i] = in.ID, in.Node
			return nil
		}); err != nil {
			return fmt.Errorf("start %s instances: %w", g.name, err)
		}
		startAll := time.Since(t)
		logf("capacity: %d %s instances started in %s", g.count, g.name, seconds(startAll))
		time.Sleep(5 * time.Second) // settle: inits idle, page cache of the start written back
		goruntime.GC()
		nodeOf := map[string]string{}
		for i, id := range ids {
			nodeOf[id] = placed[i]
		}
		after, err := mem.sample(nodeOf)
		if err != nil {
			return err
		}
		load := loadAvg()
		disk, err := layerDisk(b, byName, ids, placed)
		if err != nil {
			return err
		}
		disk.dataDir = freeBefore - diskFree(b.primary.DataDir())

		logf("capacity: API with %d clients", capacityClients)
		lat, err := apiUnderLoad(ctx, api, g.project, ids)
		if err != nil {
			return err
		}
		time.Sleep(2 * time.Second) // agents the last execs started connect
		nAgents, agentsPSS := execAgents()

		logf("capacity: removing %d %s instances", g.count, g.name)
		rmLat := make([]time.Duration, g.count)
		t = time.Now()
		if err := parallel(ctx, g.count, 4, func(i int) error {
			s := time.Now()
			_, err := api.DeleteInstance(ctx, ids[i])
			rmLat[i] = time.Since(s)
			return err
		}); err != nil {
			return fmt.Errorf("remove %s instances: %w", g.name, err)
		}
		rmAll := time.Since(t)

		n := float64(g.count)
		if report != nil {
			report(capacityResult{group: g.name, n: g.count, shims: after.nShims,
				shimsPer: float64(after.shims-before.shims) / n, sumPer: float64(after.sum()-before.sum()) / n,
				startAll: startAll, rmAll: rmAll,
				listP99: percentile(lat.lat["list"], 0.99), getP99: percentile(lat.lat["get"], 0.99), execP99: percentile(lat.lat["exec"], 0.99)})
		}
		fmt.Fprintf(&w, "#### %d idle %s instances\n\n", g.count, g.name)
		fmt.Fprintf(&w, "Started 4 at a time through the API (version already pulled): %s in all; removed 4 at a time: %s. Load average after the starts: %s.\n\n",
			seconds(startAll), seconds(rmAll), load)
		counts := placementCounts(names, placed)
		if multi {
			fmt.Fprintf(&w, "Placed by envd through the primary's API (instances per node): %s. Warm-up starts (image pull) landed on: %s.\n\n",
				placementText(counts), placementText(placementCounts(names, warm)))
		}
		fmt.Fprintf(&w, "Memory per instance (after the starts minus before, divided by %d; PSS from /proc/PID/smaps_rollup, cgroup usage from the memory controller):\n\n", g.count)
		perInst := func(a, b int64) string { return fmt.Sprintf("%.2f MB", float64(a-b)/n/1e6) }
		heapWhat, ctrdWhat, pgWhat := "this process: envd's node, its FUSE server and the bench", "the node's daemon", "the node's cluster, all its processes"
		if multi {
			heapWhat = fmt.Sprintf("this process: envd's %d nodes, their FUSE servers and the bench", len(nodes))
			ctrdWhat = fmt.Sprintf("the %d nodes' daemons", len(nodes))
			pgWhat = "the primary's cluster, all its processes (the joining nodes use it)"
		}
		mdTable(&w, []string{"part", "per instance", "total after", "what"}, 1, [][]string{
			{"shims (containerd-shim-runc-v2)", perInst(after.shims, before.shims), megabytes(after.shims) + " MB", fmt.Sprintf("%d shim processes", after.nShims)},
			{"instance cgroups (init, page cache of its writes)", perInst(after.cgroups, before.cgroups), megabytes(after.cgroups) + " MB", "memory.usage_in_bytes"},
			{"envd + embedded stargz FUSE (Go heap in use)", perInst(after.goHeap, before.goHeap), megabytes(after.goHeap) + " MB", heapWhat},
			{"envd + embedded stargz FUSE (process PSS)", perInst(after.self, before.self), megabytes(after.self) + " MB", "this process"},
			{"containerd", perInst(after.containerd, before.containerd), megabytes(after.containerd) + " MB", ctrdWhat},
			{"PostgreSQL", perInst(after.postgres, before.postgres), megabytes(after.postgres) + " MB", pgWhat},
			{"kernel slab (overlay, mounts, namespaces; machine-wide)", perInst(after.slab, before.slab), megabytes(after.slab) + " MB", "/proc/meminfo Slab, shared machine: noisy"},
			{"sum of the above (PSS rows once)", perInst(after.sum(), before.sum()), megabytes(after.sum()) + " MB", ""},
		})
		fmt.Fprintln(&w)
		if multi {
			fmt.Fprintln(&w, "By node (after the starts; the rows above are these summed, plus this process, PostgreSQL and slab):")
			fmt.Fprintln(&w)
			var rows [][]string
			for _, c := range counts {
				a, bf := after.perNode[c.node], before.perNode[c.node]
				rows = append(rows, []string{c.node, strconv.Itoa(c.n), strconv.Itoa(a.nShims), megabytes(a.shims) + " MB", megabytes(a.cgroups) + " MB",
					megabytes(a.containerd) + " MB", fmt.Sprintf("%+.1f MB", float64(a.containerd-bf.containerd)/1e6), megabytes(disk.usedBy[c.node]) + " MB"})
			}
			mdTable(&w, []string{"node", "instances", "shims", "shims PSS", "instance cgroups", "containerd PSS", "containerd change", "writable layers (blocks)"}, 1, rows)
			fmt.Fprintln(&w)
		}
		fmt.Fprintf(&w, "Limits of each instance (the node's defaults): %s. Disk per instance (writable layers are ext4 images, thinly provisioned at overcommit %g):\n\n",
			disk.limits, disk.overcommit)
		dataDirPart, layerPart := "data dir's file system (free before minus after)", "writable layer, blocks on the node's disk"
		if multi {
			dataDirPart, layerPart = "all nodes' data dirs' file system (free before minus after)", "writable layer, blocks on the nodes' disk"
		}
		mdTable(&w, []string{"part", "per instance", "total", "what"}, 1, [][]string{
			{layerPart, fmt.Sprintf("%.2f MB", float64(disk.used)/n/1e6), megabytes(disk.used) + " MB", "st_blocks of the layer images"},
			{"writable layer, limit", fmt.Sprintf("%.2f GB", float64(disk.limit)/n/1e9), fmt.Sprintf("%.1f GB", float64(disk.limit)/1e9), "what the limits would reserve in full"},
			{dataDirPart, fmt.Sprintf("%.2f MB", float64(disk.dataDir)/n/1e6), megabytes(disk.dataDir) + " MB", "images, snapshots, state; the machine is shared: noisy"},
		})
		fmt.Fprintln(&w)
		fmt.Fprintf(&w, "Exec agents after the API phase (every instance's init starts its agent, so the instance cgroups row above counts them): %d agents, %s MB PSS in all, %.2f MB each.",
			nAgents, megabytes(agentsPSS), float64(agentsPSS)/float64(max(nAgents, 1))/1e6)
		for _, nd := range nodes {
			if err := nd.Runtime().AgentErr(); err != nil {
				if multi {
					fmt.Fprintf(&w, " Last failed agent start on %s: %v.", nd.Name(), err)
				} else {
					fmt.Fprintf(&w, " Last failed agent start: %v.", err)
				}
			}
		}
		fmt.Fprint(&w, "\n\n")
		fmt.Fprintf(&w, "API with %d concurrent clients of one tenant over %d instances (each client %d requests of each kind, interleaved; list = one page of up to 100; exec = `true` in a random instance). "+
			"%d execs were refused by the tenant's limit of concurrent execs on a node (429 resource_exhausted) and are not in the exec row.\n\n", capacityClients, g.count, capacityRounds, lat.refused)
		var cells [][]string
		for _, k := range []string{"list", "get", "exec"} {
			ds := lat.lat[k]
			cells = append(cells, []string{k, strconv.Itoa(len(ds)), msf(median(ds)), msf(percentile(ds, 0.99)), fmt.Sprintf("%.0f/s", float64(len(ds))/lat.took.Seconds())})
		}
		mdTable(&w, []string{"request", "requests", "p50", "p99", "throughput (all kinds running together)"}, 1, cells)
		fmt.Fprintln(&w)
		fmt.Fprintln(&w, "Start and rm latency by tenth of the run (a cost that grows with the instances already there shows as a rising row):")
		fmt.Fprintln(&w)
		var dec [][]string
		for _, row := range []struct {
			name string
			ds   []time.Duration
		}{{"up p50", startLat}, {"rm p50", rmLat}} {
			cells := []string{row.name}
			for d := 0; d < 10; d++ {
				lo, hi := d*len(row.ds)/10, (d+1)*len(row.ds)/10
				cells = append(cells, msf(median(row.ds[lo:hi])))
			}
			dec = append(dec, cells)
		}
		mdTable(&w, []string{"", "1st", "2nd", "3rd", "4th", "5th", "6th", "7th", "8th", "9th", "10th"}, 1, dec)
		fmt.Fprintln(&w)
	}
	fmt.Fprintf(&w, "- Load average at the end: %s. Scenario wall time: %s.\n", loadAvg(), seconds(time.Since(started)))
	_, err = out.Write(w.Bytes())
	return err
}

// parallel runs f(0..n-1) with at most width at once and returns the first
// error.
func parallel(ctx context.Context, n, width int, f func(i int) error) error {
	sem := make(chan struct{}, width)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(i); err != nil {
				mu.Lock()
				first = errors.Join(first, fmt.Errorf("#%d: %w", i, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(first, ctx.Err())
}

type apiLatency struct {
	lat  map[string][]time.Duration
	took time.Duration
	// refused counts execs refused by the tenant's concurrent-exec limit
	// (resource_exhausted); they are not in lat.
	refused int
}

// apiUnderLoad runs capacityClients clients, each doing capacityRounds rounds of list
// (the project's instances, one page of 100), get and exec `true` of a
// random instance.
func apiUnderLoad(ctx context.Context, c *envdclient.Client, project string, ids []string) (apiLatency, error) {
	res := apiLatency{lat: map[string][]time.Duration{}}
	var mu sync.Mutex
	add := func(k string, d time.Duration) {
		mu.Lock()
		res.lat[k] = append(res.lat[k], d)
		mu.Unlock()
	}
	t := time.Now()
	err := parallel(ctx, capacityClients, capacityClients, func(int) error {
		for r := 0; r < capacityRounds; r++ {
			s := time.Now()
			if _, _, err := c.ListInstancesPage(ctx, project, types.Page{Limit: 100}); err != nil {
				return err
			}
			add("list", time.Since(s))
			id := ids[rand.IntN(len(ids))]
			s = time.Now()
			if _, err := c.GetInstance(ctx, id); err != nil {
				return err
			}
			add("get", time.Since(s))
			s = time.Now()
			rr, err := c.Exec(ctx, id, types.ExecRequest{Args: []string{"true"}})
			if errors.Is(err, errdefs.ErrResourceExhausted) {
				mu.Lock()
				res.refused++
				mu.Unlock()
				continue
			}
			if err != nil {
				return err
			}
			if rr.ExitCode != 0 {
				return fmt.Errorf("exec true in %s: exit %d", id, rr.ExitCode)
			}
			add("exec", time.Since(s))
		}
		return nil
	})
	res.took = time.Since(t)
	return res, err
}

// execAgents counts the instances' exec agents on the machine (their
// command line starts with the path they run at inside an instance) and
// sums their PSS.
func execAgents() (n int, total int64) {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err == nil && strings.HasPrefix(string(raw), "/dev/.envd-agent\x00") {
			n++
			total += pss(pid)
		}
	}
	return n, total
}

// capacityMem reads the memory of the nodes' parts.
type capacityMem struct {
	nodes []*node.Node // the primary first
}

type memSample struct {
	shims, cgroups, goHeap, self, containerd, postgres, slab int64
	nShims                                                   int
	// perNode is the shims, cgroups and containerd of each node by name;
	// the fields above are their sums.
	perNode map[string]nodeMem
}

// nodeMem is what one node's own processes and instances take.
type nodeMem struct {
	shims, cgroups, containerd int64
	nShims                     int
}

// sum counts each part once: the Go heap is inside the process's PSS.
func (s memSample) sum() int64 {
	return s.shims + s.cgroups + s.self + s.containerd + s.postgres + s.slab
}

// sample reads every part; cgroups of the instances in nodeOf (instance
// id to the name of the node it runs on).
func (m capacityMem) sample(nodeOf map[string]string) (memSample, error) {
	s := memSample{perNode: map[string]nodeMem{}}
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	s.goHeap = int64(ms.HeapInuse)
	s.self = pss(os.Getpid())
	s.slab = meminfo("Slab")
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return s, err
	}
	var postmaster int
	children := map[int][]int{}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		cmdline := strings.Join(args, " ")
		base := filepath.Base(args[0])
		for _, nd := range m.nodes {
			dataDir := nd.DataDir()
			pm := s.perNode[nd.Name()]
			switch {
			case base == "containerd-shim-runc-v2" && mentionsPath(cmdline, filepath.Join(dataDir, "containerd", "containerd.sock")):
				v := pss(pid)
				s.shims += v
				s.nShims++
				pm.shims += v
				pm.nShims++
			case base == "containerd" && mentionsPath(cmdline, dataDir):
				v := pss(pid)
				s.containerd += v
				pm.containerd += v
			case strings.HasSuffix(base, "postgres") && mentionsPath(cmdline, dataDir):
				postmaster = pid // only the primary runs one
			}
			s.perNode[nd.Name()] = pm
		}
		if pp := ppid(pid); pp > 0 {
			children[pp] = append(children[pp], pid)
		}
	}
	if postmaster > 0 {
		s.postgres = pss(postmaster)
		for _, c := range children[postmaster] {
			s.postgres += pss(c)
		}
	}
	for id, nd := range nodeOf {
		matches, _ := filepath.Glob("/sys/fs/cgroup/memory/envd-*/*/" + id + "/memory.usage_in_bytes")
		if len(matches) != 1 {
			return s, fmt.Errorf("memory cgroup of instance %s: %d matches", id, len(matches))
		}
		raw, err := os.ReadFile(matches[0])
		if err != nil {
			return s, err
		}
		v, _ := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
		s.cgroups += v
		pm := s.perNode[nd]
		pm.cgroups += v
		s.perNode[nd] = pm
	}
	return s, nil
}

// mentionsPath tells whether a command line names path itself or a file
// below it, so that a node's data dir .../cap-node-2 does not match the
// processes of .../cap-node-20.
func mentionsPath(cmdline, path string) bool {
	for i := 0; ; {
		j := strings.Index(cmdline[i:], path)
		if j < 0 {
			return false
		}
		end := i + j + len(path)
		if end == len(cmdline) || strings.ContainsRune(" /=,:\"'", rune(cmdline[end])) {
			return true
		}
		i = i + j + 1
	}
}

// startCapacityJoins starts n joining nodes for the capacity scenario, on
// the primary's PostgreSQL and registry, each with `envd up`'s default
// limits and placement (spread) and a data dir below the bed's, which
// close removes. It returns the nodes started, also on error; the caller
// shuts them down before the primary.
func startCapacityJoins(ctx context.Context, b *bed, n int) ([]*node.Node, error) {
	var joins []*node.Node
	if n <= 0 {
		return nil, nil
	}
	nodeCred, _ := b.primary.RegistryCredentialFiles()
	d := node.DefaultConfig()
	for i := 2; i <= n+1; i++ {
		t := time.Now()
		jn, err := node.Start(ctx, node.Config{DataDir: filepath.Join(b.dir, fmt.Sprintf("cap-node-%d", i)), DSN: b.primary.DSN(),
			Registry: b.primary.RegistryAddr(), RegistryCredentialFile: nodeCred, DefaultTTL: 2 * time.Hour, Logger: b.log,
			SquashAfter: b.cfg.squashAfter, DefaultLimits: d.DefaultLimits, Placement: envd.PlacementSpread, ShimGroupSize: b.cfg.shimGroupSize})
		if err != nil {
			return joins, fmt.Errorf("start joining node %d: %w", i, err)
		}
		joins = append(joins, jn)
		logf("joining node %s: %s, up in %s", jn.Name(), jn.URL, seconds(time.Since(t)))
	}
	return joins, nil
}

// nodeCount is how many instances landed on a node.
type nodeCount struct {
	node string
	n    int
}

// placementCounts counts placed (the node of each instance) by node: every
// node of order in that order, those with none too, then any node not in
// order (an instance placed on an unexpected node shows, it is not
// dropped) by name.
func placementCounts(order, placed []string) []nodeCount {
	by := map[string]int{}
	for _, p := range placed {
		by[p]++
	}
	var out []nodeCount
	for _, o := range order {
		out = append(out, nodeCount{o, by[o]})
		delete(by, o)
	}
	var rest []string
	for k := range by {
		rest = append(rest, k)
	}
	slices.Sort(rest)
	for _, k := range rest {
		name := k
		if name == "" {
			name = "(no node given)"
		}
		out = append(out, nodeCount{name, by[k]})
	}
	return out
}

// placementText is counts as "a 2, b 0, c 1".
func placementText(counts []nodeCount) string {
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = fmt.Sprintf("%s %d", c.node, c.n)
	}
	return strings.Join(parts, ", ")
}

// diskUse is what a group of instances takes of the nodes' disk.
type diskUse struct {
	used, limit, dataDir int64
	usedBy               map[string]int64 // used, by node name
	limits               string
	overcommit           float64
}

// layerDisk sums the writable-layer images of ids (ids[i] runs on the
// node named placed[i], one of nodes) and reads the limits the first one
// runs with.
func layerDisk(b *bed, nodes map[string]*node.Node, ids, placed []string) (diskUse, error) {
	d := diskUse{overcommit: b.primary.Runtime().DiskOvercommit(), usedBy: map[string]int64{}}
	for i, id := range ids {
		nd, ok := nodes[placed[i]]
		if !ok {
			return d, fmt.Errorf("instance %s is on node %q, not one of the bench's", id, placed[i])
		}
		u, err := nd.Runtime().DiskUsage(id)
		if err != nil {
			return d, err
		}
		d.used += u.UsedBytes
		d.limit += u.LimitBytes
		d.usedBy[placed[i]] += u.UsedBytes
	}
	if len(ids) > 0 {
		in, err := b.c.GetInstance(context.Background(), ids[0])
		if err != nil {
			return d, err
		}
		if l := in.Limits; l != nil {
			d.limits = fmt.Sprintf("memory %d MiB, pids %d, disk %d GiB", l.MemoryBytes>>20, l.Pids, l.DiskBytes>>30)
		}
	}
	return d, nil
}

// diskFree is the free bytes of dir's file system.
func diskFree(dir string) int64 {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return 0
	}
	return int64(st.Bavail) * st.Bsize
}

// pss is a process's proportional set size in bytes (0 if gone).
func pss(pid int) int64 {
	return kbField(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"), "Pss")
}

func meminfo(field string) int64 { return kbField("/proc/meminfo", field) }

// kbField reads "Field: N kB" from a /proc file, in bytes.
func kbField(path, field string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != field {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		return n << 10
	}
	return 0
}

// ppid is a process's parent (0 if gone).
func ppid(pid int) int {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// After the command in parentheses: state, ppid.
	_, rest, ok := strings.Cut(string(raw), ") ")
	if !ok {
		return 0
	}
	f := strings.Fields(rest)
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// importRootfs imports a rootfs directory as a base image named name.
func (b *bed) importRootfs(ctx context.Context, name, dir string) (types.Image, error) {
	tarCmd := exec.CommandContext(ctx, "tar", "--numeric-owner", "--xattrs", "-C", dir, "-cf", "-", ".")
	pipe, err := tarCmd.StdoutPipe()
	if err != nil {
		return types.Image{}, err
	}
	var tarErr strings.Builder
	tarCmd.Stderr = &tarErr
	if err := tarCmd.Start(); err != nil {
		return types.Image{}, err
	}
	img, ierr := b.c.ImportImage(ctx, name, pipe)
	if ierr != nil {
		_ = tarCmd.Process.Kill()
	}
	if err := tarCmd.Wait(); err != nil && ierr == nil {
		return img, fmt.Errorf("tar %s: %w: %s", dir, err, tarErr.String())
	}
	if ierr != nil {
		return img, fmt.Errorf("import %s: %w", dir, ierr)
	}
	return img, nil
}
