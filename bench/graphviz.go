package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/envd-dev/envd/internal/mountinfo"
	"github.com/envd-dev/envd/internal/syncbuf"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/snapshotter"
)

const (
	instanceID = "graphviz"
	namespace  = "envdbench"
	imageRepo  = "envd/images/debian"
	imageTag   = "bookworm"
	installCmd = "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends graphviz"
)

// env is everything the scenario runs on. close tears down what was started,
// in reverse order, also after a partial setup.
type env struct {
	work   string
	reg    *registry.Server
	daemon *runtime.Daemon
	rt     *runtime.Runtime
	ref    string // host:port/repo@digest of the imported rootfs, pulled
	made   bool   // the instance was created
	upper  string
	bridge string
}

// ensureRootfs makes the Debian rootfs with scripts/debian-rootfs.sh unless
// dir already holds one (the script checks the same).
func ensureRootfs(ctx context.Context, dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "usr/bin/apt-get")); err == nil {
		logf("rootfs: reusing %s", dir)
		return nil
	}
	script, err := findScript("debian-rootfs.sh")
	if err != nil {
		return err
	}
	logf("rootfs: making a Debian bookworm minbase rootfs in %s (about 80 s)", dir)
	start := time.Now()
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "bash", script, dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", script, dir, err)
	}
	logf("rootfs: done in %s", seconds(time.Since(start)))
	return nil
}

// findScript looks for scripts/NAME under the working directory (go run
// ./bench from the repo root), then next to this source file.
func findScript(name string) (string, error) {
	cands := []string{filepath.Join("scripts", name)}
	if _, file, _, ok := goruntime.Caller(0); ok {
		cands = append(cands, filepath.Join(filepath.Dir(file), "..", "scripts", name))
	}
	for _, c := range cands {
		if _, err := os.Stat(c); err == nil {
			return filepath.Abs(c)
		}
	}
	return "", fmt.Errorf("scripts/%s not found: run from the repository root", name)
}

// resetWork stops a daemon a previous run left on dir, unmounts everything
// below dir (so RemoveAll cannot reach through a mount), and recreates it
// empty.
func resetWork(dir string) error {
	if !filepath.IsAbs(dir) || strings.Count(filepath.Clean(dir), "/") < 2 {
		return fmt.Errorf("work dir %q: want an absolute path at least two levels deep (it is wiped)", dir)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "containerd", "containerd.pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if bytes.Contains(cmdline, []byte("containerd")) && bytes.Contains(cmdline, []byte(dir)) {
				logf("work: stopping containerd %d left by a previous run", pid)
				_ = syscall.Kill(pid, syscall.SIGTERM)
				for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
					time.Sleep(100 * time.Millisecond)
				}
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	for _, m := range mountsUnder(dir) {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", m, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("wipe work dir: %w", err)
	}
	return os.MkdirAll(dir, 0o755)
}

// setup starts the registry and containerd, imports and pulls the rootfs, and
// creates the instance. On error the caller still calls close.
func (e *env) setup(ctx context.Context, rootfs string, net runtime.NetworkConfig) error {
	var err error
	start := time.Now()
	e.reg, err = registry.Serve(ctx, filepath.Join(e.work, "registry"), "127.0.0.1:0")
	if err != nil {
		return err
	}
	img, err := importImage(ctx, e.reg, rootfs)
	if err != nil {
		return fmt.Errorf("import rootfs: %w", err)
	}
	logf("registry: %s, imported %s (%s MB) in %s", e.reg.Addr(), img.Ref(), megabytes(img.Size), seconds(time.Since(start)))

	start = time.Now()
	e.daemon, err = runtime.StartDaemon(ctx, filepath.Join(e.work, "containerd"))
	if err != nil {
		return err
	}
	e.bridge = net.Bridge
	e.rt, err = runtime.New(ctx, runtime.Config{
		Address:             e.daemon.Address(),
		Namespace:           namespace,
		StateDir:            filepath.Join(e.work, "state"),
		Network:             net,
		PlainHTTPRegistries: []string{e.reg.Addr()},
		RegistryCredentials: func(string) (string, string, error) {
			return e.reg.Access().Node.User, e.reg.Access().Node.Password, nil
		},
		StopGrace: 3 * time.Second,
	})
	if err != nil {
		return err
	}
	logf("containerd: pid %d, %s, started in %s", e.daemon.Pid(), e.daemon.Address(), seconds(time.Since(start)))

	start = time.Now()
	e.ref = e.reg.Addr() + "/" + img.Ref()
	if err := e.rt.Pull(ctx, e.ref); err != nil {
		return err
	}
	logf("pull: %s", seconds(time.Since(start)))
	start = time.Now()
	e.made = true
	if err := e.rt.Create(ctx, runtime.InstanceSpec{ID: instanceID, Image: e.ref}); err != nil {
		return err
	}
	logf("create: %s", seconds(time.Since(start)))
	return nil
}

// install runs the Graphviz install in the instance and returns its last
// output line. The full output goes to WORK/apt.log.
func (e *env) install(ctx context.Context) (string, time.Duration, error) {
	// stdout and stderr are copied by two goroutines: one buffer needs a lock.
	out := &syncbuf.Buffer{}
	logPath := filepath.Join(e.work, "apt.log")
	start := time.Now()
	ictx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	code, err := e.rt.Exec(ictx, instanceID, runtime.ExecSpec{
		Args:   []string{"/bin/sh", "-c", installCmd},
		Stdout: out,
		Stderr: out,
	})
	d := time.Since(start)
	_ = os.WriteFile(logPath, out.Bytes(), 0o644)
	logf("install: exit code %d, %d bytes of output in %s", code, len(out.Bytes()), logPath)
	if err != nil {
		return "", d, err
	}
	if code != 0 {
		return "", d, fmt.Errorf("%q exited %d after %s (log %s):\n%s", installCmd, code, seconds(d), logPath, tail(out.String(), 15))
	}
	return summaryLine(out.String()), d, nil
}

// summaryLine picks apt-get's "N upgraded, N newly installed, ..." line, else
// the last line without a URL (the mirror's name stays out of the report).
func summaryLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines {
		if strings.Contains(l, "newly installed") {
			return strings.TrimSpace(l)
		}
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.Contains(l, "://") {
			return l
		}
	}
	return fmt.Sprintf("(%d bytes of output, no summary line)", len(s))
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// upperStats is what the upper dir holds: every entry below its root, and
// the bytes of its regular files.
type upperStats struct {
	Entries int
	Bytes   int64
}

func measureUpper(dir string) (upperStats, error) {
	var s upperStats
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		s.Entries++
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			s.Bytes += fi.Size()
		}
		return nil
	})
	return s, err
}

// warmUp reads every file of the upper dir once (a spool to nowhere), so
// every variant starts from the same warm page cache.
func warmUp(ctx context.Context, upper string) (time.Duration, error) {
	st, err := snapshotter.Spool(ctx, upper, io.Discard, snapshotter.SpoolOptions{})
	return st.Duration, err
}

// saveRun is one measured run of a variant.
type saveRun struct {
	Freeze, Spool, Encode, Total time.Duration
	Bytes                        int64
	// Load is the 1-minute load average right before the run (the machine
	// is shared; see saveLimit).
	Load float64
	// CPU is the CPU time (user + system) the run used: the bench process's
	// own for envd's variants, tar's and zstd's for tar | zstd; 0 if not
	// measured (DiffService runs in containerd).
	CPU time.Duration
}

// envdSave is envd's save path (envd/save/save.go): a first spool pass while
// the instance runs (snapshotter.Prepare: copies files under 64 KiB, holds
// the larger ones open), Pause, the frozen pass that copies only what
// changed since (TwoPass.Frozen), Resume (the freeze window), then
// EncodeTwoPass, which encodes straight from the copies and the held files
// (no tar is written first). Spool in the table is the first pass. The
// layer file is removed afterwards.
func (e *env) envdSave(ctx context.Context, comp snapshotter.Compression) (r saveRun, _ error) {
	dir := filepath.Join(e.work, "out")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}

	cpu0 := selfCPU()
	defer func() { r.CPU = selfCPU() - cpu0 }()
	start := time.Now()
	tp, err := snapshotter.Prepare(ctx, e.upper, dir, snapshotter.SpoolOptions{Excludes: snapshotter.DefaultExcludes})
	if err != nil {
		return r, err
	}
	defer tp.Close()
	frozen := time.Now()
	r.Spool = frozen.Sub(start)
	if err := e.rt.Pause(ctx, instanceID); err != nil {
		return r, err
	}
	_, frozenErr := tp.Frozen(ctx)
	if err := e.rt.Resume(context.WithoutCancel(ctx), instanceID); err != nil {
		return r, errors.Join(frozenErr, err)
	}
	r.Freeze = time.Since(frozen)
	if frozenErr != nil {
		return r, frozenErr
	}

	layer, err := snapshotter.EncodeTwoPass(ctx, tp, dir, snapshotter.EncodeOptions{Compression: comp})
	if err != nil {
		return r, err
	}
	r.Total = time.Since(start)
	defer os.Remove(layer.Path)
	r.Encode = layer.Duration
	r.Bytes = layer.Size
	return r, nil
}

// tarZstd is the speed reference from the issue:
// tar -C UPPER -cf - . | zstd -1 -T2 > /dev/null, with the compressed bytes
// counted on their way to nowhere. It does not translate whiteouts and does
// not freeze the container.
func tarZstd(ctx context.Context, upper string) (saveRun, error) {
	var r saveRun
	start := time.Now()
	tarCmd := exec.CommandContext(ctx, "tar", "-C", upper, "-cf", "-", ".")
	zstdCmd := exec.CommandContext(ctx, "zstd", "-1", "-T2", "-c")
	pipe, err := tarCmd.StdoutPipe()
	if err != nil {
		return r, err
	}
	zstdCmd.Stdin = pipe
	cnt := &counter{}
	zstdCmd.Stdout = cnt
	var tarErr, zstdErr bytes.Buffer
	tarCmd.Stderr, zstdCmd.Stderr = &tarErr, &zstdErr
	if err := tarCmd.Start(); err != nil {
		return r, err
	}
	if err := zstdCmd.Start(); err != nil {
		_ = tarCmd.Process.Kill()
		_ = tarCmd.Wait()
		return r, err
	}
	terr := tarCmd.Wait()
	zerr := zstdCmd.Wait()
	if terr != nil {
		return r, fmt.Errorf("tar: %w: %s", terr, strings.TrimSpace(tarErr.String()))
	}
	if zerr != nil {
		return r, fmt.Errorf("zstd: %w: %s", zerr, strings.TrimSpace(zstdErr.String()))
	}
	r.Total = time.Since(start)
	r.Bytes = cnt.n
	for _, c := range []*exec.Cmd{tarCmd, zstdCmd} {
		r.CPU += c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	}
	return r, nil
}

type counter struct{ n int64 }

func (c *counter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// close removes the instance, closes the runtime, stops the daemon, closes
// the registry, and removes the bridge, firewall chain and cgroup parents the
// runtime made on the host (best effort; their names follow runtime's
// conventions for a StateDir).
func (e *env) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	if e.rt != nil {
		if e.made {
			if err := e.rt.Remove(ctx, instanceID); err != nil {
				errs = append(errs, fmt.Errorf("remove instance: %w", err))
			}
		}
		_ = e.rt.Close()
	}
	if e.daemon != nil {
		if err := e.daemon.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop containerd: %w", err))
		}
	}
	if e.reg != nil {
		if err := e.reg.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close registry: %w", err))
		}
	}
	if e.rt != nil {
		removeHostNetwork(e.bridge)
		sum := sha256.Sum256([]byte(filepath.Clean(filepath.Join(e.work, "state"))))
		cgs, _ := filepath.Glob("/sys/fs/cgroup/*/envd-" + hex.EncodeToString(sum[:])[:12])
		for _, p := range cgs {
			_ = os.Remove(filepath.Join(p, namespace))
			_ = os.Remove(p)
		}
	}
	if left := mountsUnder(e.work); len(left) > 0 {
		errs = append(errs, fmt.Errorf("mounts left under %s: %v", e.work, left))
	}
	return errors.Join(errs...)
}

func removeHostNetwork(bridge string) {
	if bridge == "" {
		return
	}
	chain := "ENVD-IN-" + bridge
	for _, bin := range []string{"iptables", "ip6tables"} {
		for exec.Command(bin, "-w", "5", "-D", "INPUT", "-i", bridge, "-j", chain).Run() == nil {
		}
		_ = exec.Command(bin, "-w", "5", "-F", chain).Run()
		_ = exec.Command(bin, "-w", "5", "-X", chain).Run()
	}
	_ = exec.Command("ip", "link", "del", bridge).Run()
}

// mountsUnder lists mount points at or below dir, deepest first (none when
// mountinfo cannot be read).
func mountsUnder(dir string) []string {
	mps, _ := mountinfo.Under(dir)
	return mps
}

// importImage imports rootfs as imageRepo:imageTag into reg with the node
// credential.
func importImage(ctx context.Context, reg *registry.Server, rootfs string) (registry.Image, error) {
	c, err := registry.NewClient(reg.Addr(), registry.WithCredential(reg.Access().Node))
	if err != nil {
		return registry.Image{}, err
	}
	return c.ImportRootfs(ctx, rootfs, imageRepo, imageTag)
}

// runtimeParts are what the runtime benchmarks share: an embedded registry
// holding the Debian image (ref is its pullable reference) and a private
// containerd.
type runtimeParts struct {
	reg    *registry.Server
	daemon *runtime.Daemon
	img    registry.Image
	ref    string
}

// runtimeConfig is a runtime on these parts' containerd, in namespace ns
// with its state in stateDir, pulling from their registry with the node's
// credentials: what every runtime benchmark starts from.
func (p runtimeParts) runtimeConfig(ns, stateDir string, network runtime.NetworkConfig) runtime.Config {
	return runtime.Config{
		Address:             p.daemon.Address(),
		Namespace:           ns,
		StateDir:            stateDir,
		Network:             network,
		PlainHTTPRegistries: []string{p.reg.Addr()},
		RegistryCredentials: func(string) (string, string, error) {
			return p.reg.Access().Node.User, p.reg.Access().Node.Password, nil
		},
		StopGrace: 3 * time.Second,
	}
}

// startRuntimeParts resets the work dir and starts the runtimeParts; stop
// undoes both.
func startRuntimeParts(ctx context.Context, cfg config) (p runtimeParts, stop func() error, err error) {
	if err := ensureRootfs(ctx, cfg.rootfs); err != nil {
		return p, nil, err
	}
	if err := resetWork(cfg.work); err != nil {
		return p, nil, err
	}
	if p.reg, err = registry.Serve(ctx, filepath.Join(cfg.work, "registry"), "127.0.0.1:0"); err != nil {
		return p, nil, err
	}
	closeReg := func() error { return p.reg.Close(context.WithoutCancel(ctx)) }
	if p.img, err = importImage(ctx, p.reg, cfg.rootfs); err != nil {
		return p, nil, errors.Join(fmt.Errorf("import rootfs: %w", err), closeReg())
	}
	if p.daemon, err = runtime.StartDaemon(ctx, filepath.Join(cfg.work, "containerd")); err != nil {
		return p, nil, errors.Join(err, closeReg())
	}
	p.ref = p.reg.Addr() + "/" + p.img.Ref()
	return p, func() error { return errors.Join(p.daemon.Stop(context.WithoutCancel(ctx)), closeReg()) }, nil
}
