package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"golang.org/x/sys/unix"

	envdclient "github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/snapshotter/stargz"
)

// baseImage is the name the Debian rootfs is imported under on the primary
// node.
const baseImage = "debian"

// bed is what the node scenarios (restore, workloads, scaling) run on: a
// primary node (node.Start: private PostgreSQL, registry, containerd, stargz
// snapshotter) with the Debian rootfs imported, on which projects are made
// and saved. Restores are measured on joining nodes: a second node.Start
// with the primary's PostgreSQL and registry and a fresh data dir, so an
// empty content store and snapshotter cache, "as on another node".
type bed struct {
	cfg     config
	dir     string // WORK/nodes: data dirs of the primary and the joining nodes
	primary *node.Node
	c       *envdclient.Client
	reg     *registry.Client
	log     *slog.Logger
	joins   int
	base    types.Image
	// afterRestore, when set, runs in coldRestoreWith after the commands,
	// with the joining node's client and the instance, before it is
	// removed (restore.go: waits for the first reads to be stored, times
	// a second instance on a node that holds the image).
	afterRestore func(ctx context.Context, c *envdclient.Client, id string) error
	rtt          *rttProxy // -registry-rtt, started with the first joining node
}

// joinRegistry is the registry address joining nodes are given: the
// primary's, or the -registry-rtt proxy in front of it.
func (b *bed) joinRegistry() (string, error) {
	if b.cfg.registryRTT <= 0 {
		return b.primary.RegistryAddr(), nil
	}
	if b.rtt == nil {
		p, err := startRTTProxy(b.primary.RegistryAddr(), b.cfg.registryRTT)
		if err != nil {
			return "", err
		}
		b.rtt = p
	}
	return b.rtt.addr, nil
}

// startBed wipes WORK/nodes, starts the primary node and imports the rootfs.
// On error the caller still calls close.
func startBed(ctx context.Context, cfg config) (*bed, error) {
	// ENVD_BENCH_LOG=info (or debug) shows the nodes' own logs, e.g. the
	// timings of a lazy start's warm and read-ahead.
	level := slog.LevelWarn
	if v := os.Getenv("ENVD_BENCH_LOG"); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			return &bed{dir: filepath.Join(cfg.work, "nodes")}, fmt.Errorf("ENVD_BENCH_LOG: %w", err)
		}
	}
	b := &bed{cfg: cfg, dir: filepath.Join(cfg.work, "nodes"),
		log: slog.New(stepHandler{slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})})}
	if err := resetWork(b.dir); err != nil {
		return b, err
	}
	// The postgres user must reach its cluster dir below WORK.
	for _, d := range []string{cfg.work, b.dir} {
		_ = os.Chmod(d, 0o755)
	}
	start := time.Now()
	pcfg := node.Config{DataDir: filepath.Join(b.dir, "primary"), DefaultTTL: 2 * time.Hour, Logger: b.log,
		SquashAfter: cfg.squashAfter, ShimGroupSize: cfg.shimGroupSize}
	if cfg.nodeDefaults {
		pcfg.DefaultLimits = node.DefaultConfig().DefaultLimits
	}
	n, err := node.Start(ctx, pcfg)
	if err != nil {
		return b, fmt.Errorf("start primary node: %w", err)
	}
	b.primary = n
	if b.c, err = envdclient.New(n.URL, n.Token); err != nil {
		return b, err
	}
	b.reg = n.RegistryClient()
	if n.Runtime().LazySnapshotter() != stargz.Name {
		return b, fmt.Errorf("the primary node has no lazy snapshotter (see %s)", filepath.Join(b.dir, "primary", "stargz", "snapshotter.log"))
	}
	logf("primary node: %s, registry %s, up in %s", n.URL, n.RegistryAddr(), seconds(time.Since(start)))

	start = time.Now()
	img, err := b.importRootfs(ctx, baseImage, cfg.rootfs)
	if err != nil {
		return b, err
	}
	b.base = img
	logf("imported %s as %q (%s MB gzip) in %s", cfg.rootfs, baseImage, megabytes(img.Size), seconds(time.Since(start)))
	return b, nil
}

// closeInto closes b and joins close's error into *err: a scenario's
// `defer b.closeInto(&rErr)`, right after the bed is made (a bed that
// failed half way is closed too).
func (b *bed) closeInto(err *error) {
	if cerr := b.close(); cerr != nil {
		*err = errors.Join(*err, cerr)
	}
}

// close shuts the primary node down and removes WORK/nodes.
func (b *bed) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if b.primary != nil {
		b.primary.Shutdown(ctx)
	}
	if b.rtt != nil {
		b.rtt.close()
	}
	return removeDataDir(b.dir)
}

// removeDataDir detaches any mount left below dir and removes it.
func removeDataDir(dir string) error {
	var errs []error
	for _, m := range mountsUnder(dir) {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	if len(errs) == 0 {
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// project creates a project on the Debian base.
func (b *bed) project(ctx context.Context, name, compression string) error {
	_, err := b.c.CreateProject(ctx, types.CreateProjectRequest{Name: name, Base: baseImage, Compression: compression})
	return err
}

// up starts an instance of project on the primary node (version 0 = current).
func (b *bed) up(ctx context.Context, project string, version int) (types.Instance, error) {
	in, err := b.c.CreateInstance(ctx, project, types.CreateInstanceRequest{Version: version, TTL: "2h"})
	if err != nil {
		return in, fmt.Errorf("create instance of %s: %w", project, err)
	}
	if in.State != types.StateRunning {
		return in, fmt.Errorf("instance %s of %s is %s: %s", in.ID, project, in.State, in.Message)
	}
	return in, nil
}

// sh runs script in the instance and fails unless it exits 0; it returns
// stdout and stderr together, trimmed.
func sh(ctx context.Context, c *envdclient.Client, id, script string) (string, error) {
	res, err := c.Exec(ctx, id, types.ExecRequest{Args: []string{"/bin/sh", "-c", script}, Timeout: "15m"})
	if err != nil {
		return "", fmt.Errorf("exec %q: %w", script, err)
	}
	out := strings.TrimSpace(res.Stdout + res.Stderr)
	if res.ExitCode != 0 {
		return out, fmt.Errorf("%q exited %d: %s", script, res.ExitCode, tail(out, 10))
	}
	return out, nil
}

// save saves the instance through the API and waits for the result.
func (b *bed) save(ctx context.Context, id, msg string) (types.SaveResult, error) {
	return b.saveWith(ctx, b.c, id, msg)
}

// remove deletes an instance (best effort, logged).
func (b *bed) remove(ctx context.Context, c *envdclient.Client, id string) {
	if _, err := c.DeleteInstance(ctx, id); err != nil {
		logf("delete instance %s: %v", id, err)
	}
}

// makeVersion starts an instance of project's current version, runs script
// in it, saves it and deletes the instance. It returns the script's output
// and duration and the save's result.
func (b *bed) makeVersion(ctx context.Context, project, script, msg string) (string, time.Duration, types.SaveResult, error) {
	in, err := b.up(ctx, project, 0)
	if err != nil {
		return "", 0, types.SaveResult{}, err
	}
	defer b.remove(context.WithoutCancel(ctx), b.c, in.ID)
	start := time.Now()
	out, err := sh(ctx, b.c, in.ID, script)
	d := time.Since(start)
	if err != nil {
		return out, d, types.SaveResult{}, err
	}
	res, err := b.save(ctx, in.ID, msg)
	return out, d, res, err
}

// restoreRun is one cold restore on a joining node.
type restoreRun struct {
	Create      time.Duration   // CreateInstance: pull (or lazy mount) + create + start
	Cmds        []time.Duration // each command, in order
	Outputs     []string
	Fetched     int64 // bytes fetched from the registry by the time the last command answered
	ImageBytes  int64 // compressed bytes of the image's layers
	LazyLayers  int   // layers mounted lazily
	Layers      int
	Snapshotter string

	// FetchedFirst is the bytes fetched by the time the first command
	// answered.
	FetchedFirst int64
}

// firstCommand is the time to first command: create + the first command.
func (r restoreRun) firstCommand() time.Duration {
	if len(r.Cmds) == 0 {
		return r.Create
	}
	return r.Create + r.Cmds[0]
}

// coldRestore starts a joining node in a fresh data dir, creates an instance
// of project's version on it, runs cmds in order (each must exit 0), reads
// how many bytes were fetched, then deletes the instance, shuts the node
// down and removes its data dir.
func (b *bed) coldRestore(ctx context.Context, project string, version int, cmds []string) (r restoreRun, rErr error) {
	return b.coldRestoreOn(ctx, project, version, cmds, false)
}

// coldRestoreOn is coldRestore on a joining node that pulls lazily, or, with
// full, on one without the lazy snapshotter (whole images, overlayfs).
func (b *bed) coldRestoreOn(ctx context.Context, project string, version int, cmds []string, full bool) (r restoreRun, rErr error) {
	return b.coldRestoreWith(ctx, project, version, cmds, full, types.Limits{})
}

// coldRestoreWith is coldRestoreOn on a joining node whose instances get
// limits by default.
func (b *bed) coldRestoreWith(ctx context.Context, project string, version int, cmds []string, full bool, limits types.Limits) (r restoreRun, rErr error) {
	v, err := b.c.GetVersion(ctx, project, version)
	if err != nil {
		return r, err
	}
	img, err := b.reg.Get(ctx, v.Image)
	if err != nil {
		return r, fmt.Errorf("image of %s v%d: %w", project, version, err)
	}
	b.joins++
	dir := filepath.Join(b.dir, fmt.Sprintf("join-%d", b.joins))
	if b.cfg.prefault {
		if _, err := prefault(b.dir, 512<<20); err != nil {
			return r, err
		}
	}
	nodeCred, _ := b.primary.RegistryCredentialFiles()
	regAddr, err := b.joinRegistry()
	if err != nil {
		return r, err
	}
	jn, err := node.Start(ctx, node.Config{DataDir: dir, DSN: b.primary.DSN(), Registry: regAddr, RegistryCredentialFile: nodeCred,
		DefaultTTL: 2 * time.Hour, Logger: b.log, DisableLazy: full, DefaultLimits: limits,
		// The restore is measured on this node: cache affinity would place
		// it on the primary (or an earlier joining node) that holds the image.
		Placement: envd.PlacementLocal})
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
		defer cancel()
		if jn != nil {
			jn.Shutdown(sctx)
		}
		if err := removeDataDir(dir); err != nil {
			rErr = errors.Join(rErr, fmt.Errorf("remove joining node's data dir: %w", err))
		}
	}()
	if err != nil {
		return r, fmt.Errorf("start joining node: %w", err)
	}
	if !full && jn.Runtime().LazySnapshotter() != stargz.Name {
		return r, fmt.Errorf("joining node has no lazy snapshotter (see %s)", filepath.Join(dir, "stargz", "snapshotter.log"))
	}
	jc, err := envdclient.New(jn.URL, jn.Token)
	if err != nil {
		return r, err
	}

	start := time.Now()
	in, err := jc.CreateInstance(ctx, project, types.CreateInstanceRequest{Version: version, TTL: "2h"})
	r.Create = time.Since(start)
	if err != nil {
		return r, fmt.Errorf("create instance of %s v%d on the joining node: %w", project, version, err)
	}
	defer b.remove(context.WithoutCancel(ctx), jc, in.ID)
	if in.State != types.StateRunning {
		return r, fmt.Errorf("instance %s on the joining node is %s: %s", in.ID, in.State, in.Message)
	}
	fetched := func() (int64, int, error) {
		states := map[string]stargz.State{}
		mps, err := stargz.LazyMounts(filepath.Join(dir, "stargz", "root"))
		if err != nil {
			return 0, 0, err
		}
		for _, mp := range mps {
			if st, err := stargz.LayerState(mp); err == nil {
				states[st.Digest] = st
			}
		}
		n, lazy := fetchedBytes(img.Layers, states)
		return n, lazy, nil
	}
	for i, c := range cmds {
		start := time.Now()
		out, err := sh(ctx, jc, in.ID, c)
		r.Cmds = append(r.Cmds, time.Since(start))
		r.Outputs = append(r.Outputs, out)
		if err != nil {
			return r, err
		}
		if i == 0 {
			if r.FetchedFirst, _, err = fetched(); err != nil {
				return r, err
			}
		}
	}
	if b.afterRestore != nil {
		if err := b.afterRestore(ctx, jc, in.ID); err != nil {
			return r, err
		}
	}
	if r.Fetched, r.LazyLayers, err = fetched(); err != nil {
		return r, err
	}
	r.Layers = len(img.Layers)
	for _, l := range img.Layers {
		r.ImageBytes += l.Size
	}
	cctx := namespaces.WithNamespace(ctx, "envd")
	if ctr, err := jn.Runtime().Client().LoadContainer(cctx, in.ID); err == nil {
		if info, err := ctr.Info(cctx, client.WithoutRefreshedMetadata); err == nil {
			r.Snapshotter = info.Snapshotter
		}
	}
	logf("cold restore of %s v%d: create %s, commands %v, %s, %d/%d layers lazy, fetched %s of %s MB",
		project, version, seconds(r.Create), r.Cmds, r.Snapshotter, r.LazyLayers, r.Layers, megabytes(r.Fetched), megabytes(r.ImageBytes))
	return r, nil
}

// fetchedBytes is what a restore fetched from the registry: for a layer
// mounted lazily (its digest in lazy) the bytes the stargz filesystem
// fetched so far, for any other layer its whole compressed size (pulled in
// full). It also returns how many layers were lazy.
func fetchedBytes(layers []registry.LayerInfo, lazy map[string]stargz.State) (int64, int) {
	var n int64
	var nlazy int
	for _, l := range layers {
		if st, ok := lazy[l.Digest]; ok {
			n += st.FetchedSize
			nlazy++
			continue
		}
		n += l.Size
	}
	return n, nlazy
}

// ms formats milliseconds as seconds.
func ms(v int64) string { return seconds(time.Duration(v) * time.Millisecond) }
