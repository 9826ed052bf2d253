package runtime

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/proc"
)

// maxSocketPath is the longest path a unix socket address can have on Linux
// (sun_path is 108 bytes including the terminating NUL).
const maxSocketPath = 107

// Daemon is a private containerd process whose root, state, socket, config and
// log all live under one directory. Nothing else is shared with other daemons
// on the machine: the shim sockets containerd creates under /run/containerd/s
// are named by a hash of the daemon's socket path.
type Daemon struct {
	dir     string
	address string
	pid     int
	// done is closed when the process we started has been reaped; nil when the
	// daemon was already running and we only reuse it.
	done chan struct{}
}

// DaemonOption configures StartDaemon.
type DaemonOption func(*daemonOptions) error

type daemonOptions struct {
	binDir       string
	proxyPlugins []proxyPlugin
	startTimeout time.Duration
}

type proxyPlugin struct {
	name, typ, address string
}

var pluginName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// WithProxySnapshotter adds a snapshotter served over gRPC on socket as the
// proxy plugin name (for example the stargz snapshotter). Default: none.
func WithProxySnapshotter(name, socket string) DaemonOption {
	return func(o *daemonOptions) error {
		if !pluginName.MatchString(name) {
			return fmt.Errorf("proxy snapshotter name %q: %w", name, errdefs.ErrInvalidArgument)
		}
		if !filepath.IsAbs(socket) || len(socket) > maxSocketPath {
			return fmt.Errorf("proxy snapshotter socket %q must be an absolute path of at most %d bytes: %w",
				socket, maxSocketPath, errdefs.ErrInvalidArgument)
		}
		o.proxyPlugins = append(o.proxyPlugins, proxyPlugin{name: name, typ: "snapshot", address: socket})
		return nil
	}
}

// WithBinDir sets the directory holding containerd and containerd-shim-runc-v2.
// Default: $ENVD_BIN_DIR, else /usr/local/lib/envd/bin, else the directory of
// containerd found on PATH.
func WithBinDir(dir string) DaemonOption {
	return func(o *daemonOptions) error {
		if !filepath.IsAbs(dir) {
			return fmt.Errorf("bin dir %q must be absolute: %w", dir, errdefs.ErrInvalidArgument)
		}
		o.binDir = dir
		return nil
	}
}

// WithStartTimeout bounds how long StartDaemon waits for the socket to serve.
// Default: 30s.
func WithStartTimeout(d time.Duration) DaemonOption {
	return func(o *daemonOptions) error {
		if d <= 0 {
			return fmt.Errorf("start timeout %v: %w", d, errdefs.ErrInvalidArgument)
		}
		o.startTimeout = d
		return nil
	}
}

// StartDaemon runs a private containerd with root, state and socket under dir
// (dir/root, dir/state, dir/containerd.sock; config dir/config.toml). It finds
// the containerd binary in $ENVD_BIN_DIR, /usr/local/lib/envd/bin or PATH and
// puts that directory first on the daemon's PATH so the shim is found. The
// daemon runs in its own session so it and its containers outlive the calling
// process; if a daemon already serves dir's socket it is reused. It logs to
// dir/containerd.log.
func StartDaemon(ctx context.Context, dir string, opts ...DaemonOption) (*Daemon, error) {
	o := daemonOptions{startTimeout: 30 * time.Second}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("daemon dir %q: %w", dir, errdefs.ErrInvalidArgument)
	}
	d := &Daemon{dir: dir, address: filepath.Join(dir, "containerd.sock")}
	// containerd also listens on address+".ttrpc"; that is the longest path.
	if n := len(d.address + ".ttrpc"); n > maxSocketPath {
		return nil, fmt.Errorf("daemon dir %q: socket path would be %d bytes, more than %d: %w",
			dir, n, maxSocketPath, errdefs.ErrInvalidArgument)
	}

	if pid, ok := d.serving(ctx); ok {
		d.pid = pid
		return d, nil
	}

	binDir := o.binDir
	if binDir == "" {
		if binDir, err = findBinDir(); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, fmt.Errorf("daemon dir: %w", err)
	}
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, daemonConfig(dir, d.address, o.proxyPlugins), 0o600); err != nil {
		return nil, fmt.Errorf("daemon config: %w", err)
	}
	// A stale socket from a daemon that died would make containerd fail to listen.
	_ = os.Remove(d.address)
	_ = os.Remove(d.address + ".ttrpc")

	logf, err := os.OpenFile(filepath.Join(dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("daemon log: %w", err)
	}
	defer logf.Close()
	// Not exec.CommandContext: the daemon must outlive ctx and this process.
	cmd := exec.Command(filepath.Join(binDir, "containerd"), "--config", cfgPath)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = daemonEnv(binDir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start containerd: %w", err)
	}
	d.pid = cmd.Process.Pid
	d.done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(d.done) }()
	_ = os.WriteFile(filepath.Join(dir, "containerd.pid"), []byte(strconv.Itoa(d.pid)+"\n"), 0o600)

	deadline := time.Now().Add(o.startTimeout)
	for {
		if _, ok := d.serving(ctx); ok {
			return d, nil
		}
		select {
		case <-d.done:
			return nil, fmt.Errorf("containerd exited during start (see %s): %s: %w",
				logf.Name(), proc.LogTail(logf.Name()), errdefs.ErrUnavailable)
		case <-ctx.Done():
			_ = d.Stop(context.WithoutCancel(ctx))
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = d.Stop(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("containerd not serving %s after %v (see %s): %w",
				d.address, o.startTimeout, logf.Name(), errdefs.ErrUnavailable)
		}
	}
}

// Address is the daemon's gRPC socket.
func (d *Daemon) Address() string { return d.address }

// Dir is the directory the daemon keeps everything in.
func (d *Daemon) Dir() string { return d.dir }

// Pid is the daemon's process id.
func (d *Daemon) Pid() int { return d.pid }

// Stop sends SIGTERM, waits for the daemon to exit (until ctx is done or 10s
// pass), then sends SIGKILL. Running containers are not stopped: their shims
// outlive the daemon and a new daemon on the same dir picks them up again.
func (d *Daemon) Stop(ctx context.Context) error {
	return proc.Terminate(ctx, "containerd", d.pid, d.done, 10*time.Second)
}

// serving reports whether a containerd answers on d's socket, and its pid
// from the pid file if there is one.
func (d *Daemon) serving(ctx context.Context) (int, bool) {
	if _, err := os.Stat(d.address); err != nil {
		return 0, false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := client.New(d.address, client.WithTimeout(time.Second))
	if err != nil {
		return 0, false
	}
	defer c.Close()
	if ok, err := c.IsServing(ctx); err != nil || !ok {
		return 0, false
	}
	pid := 0
	if b, err := os.ReadFile(filepath.Join(d.dir, "containerd.pid")); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return pid, true
}

// daemonConfig renders the containerd config. Plugins that would share state
// with other daemons on the machine are disabled: CRI (its own CNI config in
// /etc/cni/net.d, streaming server), NRI (socket /var/run/nri/nri.sock) and
// opt (/opt/containerd).
func daemonConfig(dir, address string, proxies []proxyPlugin) []byte {
	var b bytes.Buffer
	// containerd v2.4.2 logs "Configuration migrated from version 3" at
	// start: it migrates in memory to its newer config version; harmless.
	fmt.Fprintf(&b, "version = 3\n")
	fmt.Fprintf(&b, "root = %q\n", filepath.Join(dir, "root"))
	fmt.Fprintf(&b, "state = %q\n", filepath.Join(dir, "state"))
	fmt.Fprintf(&b, "disabled_plugins = [%q, %q, %q, %q, %q, %q]\n",
		"io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images",
		"io.containerd.podsandbox.controller.v1.podsandbox", "io.containerd.nri.v1.nri", "io.containerd.internal.v1.opt")
	fmt.Fprintf(&b, "\n[grpc]\n  address = %q\n", address)
	fmt.Fprintf(&b, "\n[ttrpc]\n  address = %q\n", address+".ttrpc")
	for _, p := range proxies {
		fmt.Fprintf(&b, "\n[proxy_plugins.%s]\n  type = %q\n  address = %q\n", p.name, p.typ, p.address)
	}
	return b.Bytes()
}

func findBinDir() (string, error) {
	var dirs []string
	if d := os.Getenv("ENVD_BIN_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, "/usr/local/lib/envd/bin")
	for _, d := range dirs {
		if fi, err := os.Stat(filepath.Join(d, "containerd")); err == nil && fi.Mode().IsRegular() {
			return d, nil
		}
	}
	p, err := exec.LookPath("containerd")
	if err != nil {
		return "", fmt.Errorf("containerd binary not found in $ENVD_BIN_DIR, /usr/local/lib/envd/bin or PATH: %w",
			errdefs.ErrUnavailable)
	}
	p, err = filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.Dir(p), nil
}

// daemonEnv is the caller's environment with binDir first on PATH (the daemon
// looks up containerd-shim-runc-v2 there) and the sbin directories present
// (runc, iptables).
func daemonEnv(binDir string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	} else if !strings.Contains(":"+path+":", ":/usr/sbin:") {
		path += ":/usr/sbin:/sbin"
	}
	env := []string{"PATH=" + binDir + ":" + path}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "NOTIFY_SOCKET=") {
			env = append(env, kv)
		}
	}
	return env
}
