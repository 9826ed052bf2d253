// Command bench measures envd's save and restore paths. It needs root and
// prints a markdown report on stdout; progress goes to stderr.
//
// Scenarios (-scenario):
//
//   - save (default): Graphviz installed with apt-get in a Debian bookworm
//     instance, then the same upper dir saved by envd (eStargz, zstd, gzip),
//     by containerd's DiffService, and by tar | zstd as a speed reference.
//
//   - restore: time to first command of the Graphviz version, lazy (eStargz
//     through the stargz snapshotter) vs full pull (zstd, overlayfs), on a
//     fresh node joining the first one's PostgreSQL and registry.
//
//   - workloads: save and restore of 30,000 small files and of a 1 GiB file.
//
//   - scaling: save and lazy restore as the change and the image grow.
//
//   - disklimit: save and lazy restore of a layer on the writable-layer
//     limit's ext4 image against a plain upper dir, as ratios.
//
//   - hardening: the Graphviz install in fresh instances with the hardening,
//     limits and network rules (egress open) and without
//     (runtime.Config.Unrestricted), alternated; medians and their ratio.
//
//   - userns: instance create with runtime.Config.UserNS (the first of an
//     image chowns it) and without, and the Graphviz install in a user
//     namespace.
//
//   - sandbox: the gVisor runtime class against runc on one node, classes
//     alternated: create to the first command, exec round trip, a
//     syscall-heavy and a CPU-bound workload, an idle instance's memory,
//     the Graphviz install once each (runsc from scripts/setup.sh --tests).
//
//   - deep: save and lazy restore of a project with a 3-save and a
//     -deep-saves history (busybox base), on a node that squashes deep
//     versions and on one that does not.
//
//   - cas: the current switch under contention: 10 and 100 clients
//     through the API against a bare SQL compare-and-swap.
//
//   - pool: up to first command from a warm pool and without one.
//
//   - latency: start, exec, save and rm latency through the API, for a
//     version cached on the node and a cold lazy one, next to ctr and runc
//     on the same machine (-latency-runs rounds).
//
//   - capacity: -capacity busybox and -capacity-debian Debian instances
//     started on one node with `envd up`'s default limits (2 GiB memory,
//     10 GiB thinly provisioned disk): memory and disk per instance, API
//     latency under 50 clients, time to start and remove them all. With
//     -capacity-nodes N > 1, through N nodes on this machine (the primary
//     and N-1 joining nodes), placed by envd from the primary's API.
//
//   - dockerfile: a ten-step Dockerfile built by the node's BuildKit, built
//     again unchanged and with its last line changed, against envd's own
//     spec of the same steps (-runs rounds).
//
//   - fork-memory: a running gVisor instance forked with its memory into
//     4, request to all 4 answering an exec, against 4 cold starts from the
//     fork's version (-runs rounds), with each copy's start steps.
//
//   - checkpoint-memory: -runs memory checkpoints of a gVisor instance
//     holding 256 MiB resident, the freeze divided into its steps.
//
//   - resume-memory: a gVisor instance running a dev server is
//     checkpointed with its memory; resumes on the same node (from the
//     node's local copy, and pulled from the registry) against a cold
//     start plus the server's start, to the first answer (-runs rounds).
//
//   - resume-lazy: a gVisor instance holding 16, 64 and 256 MiB
//     (-resume-lazy-mib) checkpointed with its memory and resumed on
//     two joining nodes, memory restore lazy against full pull, request
//     to first answer (-runs rounds).
//
//   - all: every scenario, in this order.
//
//     go run ./bench [-scenario save|restore|workloads|scaling|disklimit|hardening|userns|all] [-runs 3] [-rootfs DIR] [-work DIR]
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/snapshotter"
)

const refName = "containerd DiffService (gzip)"

// variantKeys name the variants for -variants, in the default order.
var variantKeys = []string{"estargz", "zstd", "gzip", "diffservice", "tar"}

type config struct {
	rootfs string
	work   string
	runs   int
	bridge string
	subnet string
	// prefault: before every measured run, write and delete a scratch file
	// (see prefault).
	prefault bool
	only     []string // variant keys, in run order
	scenario string
	// squashAfter is the primary node's node.Config.SquashAfter (0 = no
	// squash, as in every scenario but deep).
	squashAfter int
	// nodeDefaults gives the primary node the instance limits `envd up`
	// gives (node.DefaultConfig: memory, pids, disk) instead of none.
	nodeDefaults bool
	// deepSaves is the long history of the deep scenario.
	deepSaves int
	// resumeMiB are the resume-lazy scenario's sizes (MiB a process
	// in the instance holds: sandbox memory).
	resumeMiB []int
	// registryRTT: the joining nodes reach the registry through a proxy
	// that holds each request this long (rtt.go); 0 = directly.
	registryRTT time.Duration
	// latencyRuns is the latency scenario's rounds.
	latencyRuns int
	// capacity and capacityDebian are the capacity scenario's instance
	// counts (busybox, Debian).
	capacity, capacityDebian int
	// densityN and densityDebian are the density scenario's instance
	// counts (busybox, Debian).
	densityN, densityDebian int
	// shimGroupSize is the nodes' ShimGroupSize; 0 = the node default.
	shimGroupSize int
	// capacityNodes is how many nodes the capacity scenario runs: the
	// primary and capacityNodes-1 joining nodes (1 = the primary alone).
	capacityNodes int
	// cpuProfile, if set, is the prefix of CPU profiles of the save
	// scenario's envd runs (PREFIX.VARIANT.RUN.pprof).
	cpuProfile string
	// copyUpper, if set, is where the save scenario copies the upper dir
	// after the install (for the encoder's go test benchmarks).
	copyUpper string
}

// scenarios in the order -scenario all runs them.
var scenarios = []string{"save", "restore", "workloads", "scaling", "disklimit", "hardening", "userns", "sandbox", "deep", "cas", "pool", "latency", "capacity", "density", "dockerfile", "fork-memory", "checkpoint-memory", "resume-memory", "resume-lazy"}

func main() {
	var cfg config
	flag.StringVar(&cfg.rootfs, "rootfs", "/var/tmp/envd-bench/rootfs-debian", "Debian bookworm minbase rootfs (made with scripts/debian-rootfs.sh if missing)")
	flag.StringVar(&cfg.work, "work", "/var/tmp/envd-bench/work", "work dir for containerd, the registry and spools; wiped at start")
	flag.IntVar(&cfg.runs, "runs", 3, "runs per variant; the table shows medians")
	flag.DurationVar(&cfg.registryRTT, "registry-rtt", 0, "restore scenarios: joining nodes reach the registry through a loopback proxy that holds each request this long (a registry one round trip away; bandwidth stays the loopback's)")
	flag.IntVar(&cfg.deepSaves, "deep-saves", 300, "deep scenario: saves in the long history")
	flag.IntVar(&cfg.latencyRuns, "latency-runs", 50, "latency scenario: rounds")
	flag.IntVar(&cfg.capacity, "capacity", 100, "capacity scenario: busybox instances")
	flag.IntVar(&cfg.capacityDebian, "capacity-debian", 20, "capacity scenario: Debian instances (0: none)")
	flag.IntVar(&cfg.densityN, "n", 100, "density scenario: busybox instances")
	flag.IntVar(&cfg.densityDebian, "debian", 0, "density scenario: Debian instances (0: none)")
	flag.IntVar(&cfg.capacityNodes, "capacity-nodes", 1, "capacity scenario: nodes on this machine, the primary and N-1 joining nodes, each with envd up's default limits; instances are placed by envd through the primary's API")
	pprofAddr := flag.String("pprof", "", "serve net/http/pprof of this process (the node runs in it) on this loopback address, e.g. 127.0.0.1:6061")
	flag.StringVar(&cfg.bridge, "bridge", "envdbench0", "bridge interface of the instance network")
	flag.StringVar(&cfg.subnet, "subnet", "10.231.7.0/24", "IPv4 subnet of the instance network")
	flag.BoolVar(&cfg.prefault, "prefault", true, "before every measured run, write and delete a scratch file of twice the upper dir so the run gets recently touched guest memory (see prefault.go)")
	flag.StringVar(&cfg.cpuProfile, "cpuprofile", "", "save scenario: write a CPU profile of every envd save run to PREFIX.VARIANT.RUN.pprof")
	flag.StringVar(&cfg.copyUpper, "copy-upper", "", "save scenario: copy the upper dir after the install to this new directory (ENVD_BENCH_UPPER of snapshotter's BenchmarkEncodeEstargzTree)")
	flag.StringVar(&cfg.scenario, "scenario", "save", "scenario: "+strings.Join(scenarios, ", ")+", or all")
	resumeMiB := flag.String("resume-lazy-mib", "16,64,256", "resume-lazy scenario: MiB of random bytes a process in the instance holds, one checkpoint per size")
	variantsFlag := flag.String("variants", strings.Join(variantKeys, ","), "variants to run, in this order (round-robin)")
	flag.Parse()
	for _, f := range strings.Split(*resumeMiB, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: -resume-lazy-mib: %q is not a positive number\n", f)
			os.Exit(2)
		}
		cfg.resumeMiB = append(cfg.resumeMiB, n)
	}
	for _, k := range strings.Split(*variantsFlag, ",") {
		if k = strings.TrimSpace(k); k == "" {
			continue
		}
		if !slices.Contains(variantKeys, k) {
			fmt.Fprintf(os.Stderr, "bench: unknown variant %q (want some of %s)\n", k, strings.Join(variantKeys, ","))
			os.Exit(2)
		}
		cfg.only = append(cfg.only, k)
	}
	if len(cfg.only) == 0 {
		fmt.Fprintln(os.Stderr, "bench: no variants")
		os.Exit(2)
	}
	if cfg.scenario != "all" && !slices.Contains(scenarios, cfg.scenario) {
		fmt.Fprintf(os.Stderr, "bench: unknown scenario %q (want one of %s, or all)\n", cfg.scenario, strings.Join(scenarios, ", "))
		os.Exit(2)
	}
	if cfg.runs < 1 {
		fmt.Fprintln(os.Stderr, "bench: -runs must be at least 1")
		os.Exit(2)
	}
	if cfg.capacityNodes < 1 {
		fmt.Fprintln(os.Stderr, "bench: -capacity-nodes must be at least 1")
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "bench: needs root (containerd, runc, network namespaces, iptables)")
		os.Exit(2)
	}
	if *pprofAddr != "" {
		if err := servePprof(*pprofAddr); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := runScenarios(ctx, cfg, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
}

// runScenarios runs the chosen scenario, or all of them; the node scenarios
// share one primary node.
func runScenarios(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	want := []string{cfg.scenario}
	if cfg.scenario == "all" {
		want = scenarios
	}
	if slices.Contains(want, "save") {
		if len(want) > 1 {
			fmt.Fprintln(out, "### Save of the Graphviz change (`-scenario save`)")
			fmt.Fprintln(out)
		}
		if err := run(ctx, cfg, out); err != nil {
			return fmt.Errorf("save: %w", err)
		}
	}
	node := []struct {
		name, title string
		run         func(context.Context, *bed, io.Writer) error
	}{
		{"restore", "Restore of the Graphviz version, lazy vs full pull", runRestore},
		{"workloads", "Small-files and large-file workloads", runWorkloads},
		{"scaling", "Growth with the size of the change and of the image", runScaling},
		{"disklimit", "Writable-layer size limit: save and lazy restore on an ext4 image vs a plain upper dir", runDiskLimit},
	}
	for _, sc := range []struct {
		name, title string
		run         func(context.Context, config, io.Writer) error
	}{
		{"capacity", "Capacity of one node", runCapacity},
		{"density", "Idle density of one node, shims grouped and not", runDensity},
		{"latency", "Start and exec latency", runLatency},
		{"fork-memory", "Fork of a running gVisor instance with its memory into 4, against a cold start of 4", runForkMemory},
		{"checkpoint-memory", "Freeze of a memory checkpoint of a gVisor instance with 256 MiB resident", runCheckpointMemory},
		{"resume-memory", "Resume of a memory checkpoint on the same node to a dev server's first answer, against a cold start", runResumeMemory},
		{"resume-lazy", "Resume with memory on another node: lazy memory restore vs full pull", runResumeLazy},
	} {
		defer func() {
			if rErr != nil || !slices.Contains(want, sc.name) {
				return
			}
			if len(want) > 1 {
				fmt.Fprintf(out, "\n### %s (`-scenario %s`)\n\n", sc.title, sc.name)
			}
			logf("scenario %s", sc.name)
			if err := sc.run(ctx, cfg, out); err != nil {
				rErr = fmt.Errorf("%s: %w", sc.name, err)
			}
		}()
	}
	defer func() {
		if rErr != nil || !slices.Contains(want, "dockerfile") {
			return
		}
		if len(want) > 1 {
			fmt.Fprintln(out, "\n### Dockerfile builds through BuildKit against envd's spec (`-scenario dockerfile`)")
			fmt.Fprintln(out)
		}
		logf("scenario dockerfile")
		if err := runDockerfileBench(ctx, cfg, out); err != nil {
			rErr = fmt.Errorf("dockerfile: %w", err)
		}
	}()
	defer func() {
		if rErr != nil || !slices.Contains(want, "pool") {
			return
		}
		if len(want) > 1 {
			fmt.Fprintln(out, "\n### Warm pools (`-scenario pool`)")
			fmt.Fprintln(out)
		}
		logf("scenario pool")
		if err := runPool(ctx, cfg, out); err != nil {
			rErr = fmt.Errorf("pool: %w", err)
		}
	}()
	defer func() {
		if rErr != nil || !slices.Contains(want, "cas") {
			return
		}
		if len(want) > 1 {
			fmt.Fprintln(out, "\n### The current switch under contention (`-scenario cas`)")
			fmt.Fprintln(out)
		}
		logf("scenario cas")
		if err := runCAS(ctx, cfg, out); err != nil {
			rErr = fmt.Errorf("cas: %w", err)
		}
	}()
	defer func() {
		if rErr != nil || !slices.Contains(want, "deep") {
			return
		}
		if len(want) > 1 {
			fmt.Fprintln(out, "\n### Deep histories with and without squash (`-scenario deep`)")
			fmt.Fprintln(out)
		}
		logf("scenario deep")
		if err := runDeep(ctx, cfg, out); err != nil {
			rErr = fmt.Errorf("deep: %w", err)
		}
	}()
	defer func() {
		if rErr != nil || !slices.Contains(want, "sandbox") {
			return
		}
		if len(want) > 1 {
			fmt.Fprintln(out, "\n### Cost of the gVisor runtime class against runc (`-scenario sandbox`)")
			fmt.Fprintln(out)
		}
		logf("scenario sandbox")
		if err := runSandbox(ctx, cfg, out); err != nil {
			rErr = fmt.Errorf("sandbox: %w", err)
		}
	}()
	defer func() {
		if rErr != nil || !slices.Contains(want, "userns") {
			return
		}
		if len(want) > 1 {
			fmt.Fprintln(out, "\n### Cost of user namespaces (`-scenario userns`)")
			fmt.Fprintln(out)
		}
		logf("scenario userns")
		if err := runUserNS(ctx, cfg, out); err != nil {
			rErr = fmt.Errorf("userns: %w", err)
		}
	}()
	defer func() {
		if rErr != nil || !slices.Contains(want, "hardening") {
			return
		}
		if len(want) > 1 {
			fmt.Fprintln(out, "\n### Cost of the hardening, limits and network rules on the Graphviz install (`-scenario hardening`)")
			fmt.Fprintln(out)
		}
		logf("scenario hardening")
		if err := runHardening(ctx, cfg, out); err != nil {
			rErr = fmt.Errorf("hardening: %w", err)
		}
	}()
	var b *bed
	defer func() {
		if b != nil {
			logf("cleanup: shutting the primary node down, removing %s", b.dir)
			if err := b.close(); err != nil {
				rErr = errors.Join(rErr, fmt.Errorf("cleanup: %w", err))
			}
		}
	}()
	for _, sc := range node {
		if !slices.Contains(want, sc.name) {
			continue
		}
		if b == nil {
			if err := ensureRootfs(ctx, cfg.rootfs); err != nil {
				return err
			}
			if err := os.MkdirAll(cfg.work, 0o755); err != nil {
				return err
			}
			// estargz.Build stages its parts in $TMPDIR; keep them on the work disk.
			tmp := filepath.Join(cfg.work, "tmp")
			if err := os.MkdirAll(tmp, 0o755); err != nil {
				return err
			}
			os.Setenv("TMPDIR", tmp)
			var err error
			if b, err = startBed(ctx, cfg); err != nil {
				return err
			}
		}
		if len(want) > 1 {
			fmt.Fprintf(out, "\n### %s (`-scenario %s`)\n\n", sc.title, sc.name)
		}
		logf("scenario %s", sc.name)
		if err := sc.run(ctx, b, out); err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
	}
	return nil
}

func run(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	if err := ensureRootfs(ctx, cfg.rootfs); err != nil {
		return err
	}
	if err := resetWork(cfg.work); err != nil {
		return err
	}
	// Scratch files (prefault) go here; $TMPDIR too, on the work disk.
	tmp := cfg.work + "/tmp"
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	os.Setenv("TMPDIR", tmp)

	e := &env{work: cfg.work}
	defer func() {
		logf("cleanup: removing the instance, stopping containerd, closing the registry")
		if err := e.close(); err != nil {
			rErr = errors.Join(rErr, fmt.Errorf("cleanup: %w", err))
		}
	}()
	if err := e.setup(ctx, cfg.rootfs, runtime.NetworkConfig{Bridge: cfg.bridge, Subnet: cfg.subnet}); err != nil {
		return err
	}
	logf("install: %s", installCmd)
	aptLine, aptTime, err := e.install(ctx)
	if err != nil {
		return err
	}
	logf("install: %s: %s", seconds(aptTime), aptLine)

	mounts, err := e.rt.Mounts(ctx, instanceID)
	if err != nil {
		return err
	}
	if e.upper, err = snapshotter.UpperDir(mounts); err != nil {
		return err
	}
	us, err := measureUpper(e.upper)
	if err != nil {
		return fmt.Errorf("measure upper dir: %w", err)
	}
	logf("upper dir %s: %d bytes in %d entries", e.upper, us.Bytes, us.Entries)
	if cfg.copyUpper != "" {
		if out, err := exec.CommandContext(ctx, "cp", "-a", "--", e.upper, cfg.copyUpper).CombinedOutput(); err != nil {
			return fmt.Errorf("copy upper dir to %s: %w: %s", cfg.copyUpper, err, out)
		}
		logf("upper dir copied to %s", cfg.copyUpper)
	}
	warm, err := warmUp(ctx, e.upper)
	if err != nil {
		return fmt.Errorf("warm-up read: %w", err)
	}
	logf("warm-up read: %s", seconds(warm))

	type variant struct {
		key  string
		name string
		note string
		run  func(i int) (saveRun, error)
	}
	save := func(c snapshotter.Compression) func(int) (saveRun, error) {
		return func(int) (saveRun, error) { return e.envdSave(ctx, c) }
	}
	all := []variant{
		{key: "estargz", name: "envd save, eStargz", run: save(snapshotter.Estargz)},
		{key: "zstd", name: "envd save, zstd", run: save(snapshotter.Zstd)},
		{key: "gzip", name: "envd save, gzip (pgzip)", run: save(snapshotter.Gzip)},
		{key: "diffservice", name: refName, run: func(i int) (saveRun, error) { return e.diffService(ctx, i) }},
		{key: "tar", name: "tar \\| zstd -1 -T2", note: "no whiteouts, not frozen",
			run: func(int) (saveRun, error) { return tarZstd(ctx, e.upper) }},
	}
	var variants []variant
	for _, k := range cfg.only {
		for _, v := range all {
			if v.key == k {
				variants = append(variants, v)
			}
		}
	}
	runs := make([][]saveRun, len(variants))
	scratch := 2*us.Bytes + 64<<20
	var prefaults []time.Duration
	// Round-robin, so a drift of the machine over time hits every variant,
	// and every other round in reverse order, so no variant always runs
	// right after the same other one (the tar side alternates with eStargz).
	for i := 0; i < cfg.runs; i++ {
		for jj := range variants {
			j := jj
			if i%2 == 1 {
				j = len(variants) - 1 - jj
			}
			v := variants[j]
			if cfg.prefault {
				d, err := prefault(tmp, scratch)
				if err != nil {
					return err
				}
				prefaults = append(prefaults, d)
			}
			load := saveLoad1()
			stopProfile, err := startSaveProfile(cfg.cpuProfile, v.key, i+1)
			if err != nil {
				return err
			}
			r, err := v.run(i)
			if perr := stopProfile(); err == nil {
				err = perr
			}
			if err != nil {
				return fmt.Errorf("%s, run %d: %w", v.name, i+1, err)
			}
			r.Load = load
			logf("run %d %-32s freeze %-8s total %-8s %s MB, load %.2f", i+1, v.name, seconds(r.Freeze), seconds(r.Total), megabytes(r.Bytes), load)
			runs[j] = append(runs[j], r)
		}
	}
	var results []result
	var sizeNotes []string
	for j, v := range variants {
		res := result{Name: strings.ReplaceAll(v.name, `\|`, "|"), Note: v.note, Bytes: runs[j][0].Bytes}
		var fr, sp, en, to []time.Duration
		for _, r := range runs[j] {
			fr, sp, en, to = append(fr, r.Freeze), append(sp, r.Spool), append(en, r.Encode), append(to, r.Total)
			if r.Bytes != res.Bytes {
				sizeNotes = append(sizeNotes, fmt.Sprintf("%s: layer size varied between runs (%d, %d bytes)", res.Name, res.Bytes, r.Bytes))
			}
		}
		res.Freeze, res.Spool, res.Encode, res.Total = median(fr), median(sp), median(en), median(to)
		results = append(results, res)
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, "Machine: %s\n\n", machine())
	fmt.Fprintf(&b, "Date: %s\n\n", time.Now().UTC().Format("Mon Jan _2 15:04:05 UTC 2006"))
	fmt.Fprintf(&b, "Command: `%s`\n\n", command())
	fmt.Fprintf(&b, "Change: `%s` in a Debian bookworm minbase instance, %s; last line: `%s`\n\n", installCmd, seconds(aptTime), aptLine)
	fmt.Fprintf(&b, "Upper dir: %s MB (%d bytes of regular files) in %d entries\n\n", megabytes(us.Bytes), us.Bytes, us.Entries)
	fmt.Fprintf(&b, "Each variant ran %d times on the same upper dir, round-robin; the table shows medians. "+
		"The page cache was not dropped: one warm-up read of the whole upper dir (%s) ran first, so every variant reads from a warm cache.\n\n",
		cfg.runs, seconds(warm))
	if cfg.prefault {
		fmt.Fprintf(&b, "Memory: right before every measured run a %s MB scratch file was written and deleted (`-prefault`, median %s), "+
			"so each run starts with recently touched guest memory; on this VM freed memory goes back to the host within seconds "+
			"(virtio balloon driver present: %v) and first touches are slow.\n\n",
			megabytes(scratch), seconds(median(prefaults)), balloonReportsFreePages())
	} else {
		fmt.Fprintf(&b, "Memory: no prefault (`-prefault=false`): runs that follow an idle moment may pay for first touches of guest memory (virtio balloon driver present: %v).\n\n",
			balloonReportsFreePages())
	}
	writeTable(&b, results, refName)
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, "- freeze window: from Pause to the end of Resume (cgroup freezer). envd: a first spool pass while the instance runs (snapshotter.Prepare, counted in spool), then Pause, the frozen pass that re-reads metadata and copies only what changed since (TwoPass.Frozen), Resume; the encode (snapshotter.EncodeTwoPass, from the two passes' copies, no tar written first) runs after the thaw. DiffService: the container stays paused for the whole Compare.")
	fmt.Fprintln(&b, "- total: from Pause (DiffService: from looking up the parent chain and making its view) to the layer file on disk, synced (envd) or committed to containerd's content store (DiffService); no push.")
	fmt.Fprintln(&b, "- envd skips /proc, /sys, /dev, /run, /tmp (snapshotter.DefaultExcludes) and translates whiteouts; DiffService and tar take the whole upper dir, and tar | zstd writes overlay whiteouts as char devices, not `.wh.` files. Its layer MB is the zstd output size.")
	fmt.Fprintln(&b, "- layer MB: compressed bytes, 1 MB = 10^6 bytes. ratio vs DiffService: DiffService total / variant total.")
	for _, n := range sizeNotes {
		fmt.Fprintln(&b, "- "+n)
	}
	keys := make([]string, len(variants))
	for j, v := range variants {
		keys[j] = v.key
	}
	writeSaveLimit(&b, keys, runs)
	_, err = out.Write(b.Bytes())
	return err
}

// command is how this program was started, as a go run line.
func command() string {
	return strings.TrimSpace("go run ./bench " + strings.Join(os.Args[1:], " "))
}

// machine describes the host: CPUs, memory, kernel.
func machine() string {
	var parts []string
	cpus := fmt.Sprintf("nproc %d", goruntime.NumCPU())
	if m := cpuModel(); m != "" {
		cpus += " (" + m + ")"
	}
	parts = append(parts, cpus)
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		parts = append(parts, fmt.Sprintf("%.1f GiB memory", float64(si.Totalram)*float64(si.Unit)/(1<<30)))
	}
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		parts = append(parts, "kernel "+unix.ByteSliceToString(u.Release[:]))
	}
	parts = append(parts, goruntime.Version(), goruntime.GOOS+"/"+goruntime.GOARCH)
	return strings.Join(parts, ", ")
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
