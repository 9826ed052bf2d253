// Package buildkit runs Dockerfile builds with BuildKit: a pinned buildkitd
// the node starts (OCI worker, runc, its cache under the node's data dir,
// kept between builds) and its buildctl client, both installed by
// scripts/setup.sh. envd interprets no Dockerfile instruction itself: the
// frontend is BuildKit's own dockerfile.v0.
//
// The daemon reaches only the node's registry: base images come from it by
// digest (named contexts), results go to it as eStargz, and any other
// registry or URL a Dockerfile names goes to a closed loopback proxy and
// fails instead of leaving the machine.
package buildkit

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/envd-dev/envd/builder/buildkit/netplugin"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
)

// Binaries are the executables this package runs, looked up in Config.Bin
// and then PATH.
const (
	Daemon = "buildkitd"
	Client = "buildctl"
)

// Config is how a node starts its buildkitd.
type Config struct {
	// Dir holds the daemon's root (its build cache), socket, config and log.
	Dir string
	// Bin is where buildkitd and buildctl are when not on PATH.
	Bin string
	// Registry is the host:port of the node's registry; PlainHTTP when it
	// speaks HTTP (the embedded one).
	Registry  string
	PlainHTTP bool
	// Credential is the node's credential there (pull and push).
	Credential registry.Credential
	// CNIBinDir holds the CNI loopback plugin ("" = /usr/lib/cni).
	CNIBinDir string
	// Network attaches RUN steps of builds with a Spec.Network to the
	// instances' bridge under that policy; Plugin is the static
	// envd-agent binary, the CNI plugin that asks for it (netplugin).
	// Without both, RUN steps have loopback only.
	Network Network
	Plugin  string
	Log     *slog.Logger
}

// Network is what RUN steps' network namespaces are attached with: the
// node's runtime, the same bridge and firewall as instances.
type Network interface {
	// Attach attaches the namespace at netns under grant, as id, and
	// answers the CNI result.
	Attach(ctx context.Context, id, netns string, grant Grant) ([]byte, error)
	// Detach undoes Attach; idempotent.
	Detach(ctx context.Context, id, netns string) error
}

// Grant is the network of a build's RUN steps: the egress policy (text
// form, runtime.ParseEgress) and the group their rules are keyed by.
type Grant struct {
	Group  string
	Egress string
}

// BuildKit is a running buildkitd.
type BuildKit struct {
	cfg      Config
	sock     string
	buildctl string
	cmd      *exec.Cmd
	done     chan struct{}
	// net serves the CNI plugin (nil: RUN steps have loopback only).
	net *netServer
}

// maxSocketPath is the longest unix socket path Linux takes.
const maxSocketPath = 107

// Find answers the path of name: on PATH, else in dir.
func Find(dir, name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	if dir != "" {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not installed (scripts/setup.sh installs it): %w", name, errdefs.ErrFailedPrecondition)
}

// Start starts buildkitd and waits until it answers.
func Start(ctx context.Context, cfg Config) (*BuildKit, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	daemon, err := Find(cfg.Bin, Daemon)
	if err != nil {
		return nil, err
	}
	ctl, err := Find(cfg.Bin, Client)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, err
	}
	cfg.Dir = dir
	b := &BuildKit{cfg: cfg, sock: filepath.Join(dir, "buildkitd.sock"), buildctl: ctl, done: make(chan struct{})}
	if len(b.sock) > maxSocketPath {
		return nil, fmt.Errorf("buildkitd socket %q is longer than %d bytes: %w", b.sock, maxSocketPath, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(filepath.Join(dir, "client"), 0o700); err != nil {
		return nil, err
	}
	if cfg.Network != nil && cfg.Plugin != "" {
		if b.net, err = listenNet(filepath.Join(dir, "net.sock"), cfg.Network, cfg.Log); err != nil {
			return nil, err
		}
	}
	if err := b.writeConfig(); err != nil {
		b.net.close()
		return nil, err
	}
	proxy, err := closedPort()
	if err != nil {
		return nil, err
	}
	stopStale(filepath.Join(dir, "buildkitd.pid"), dir)
	_ = os.Remove(b.sock)
	logf, err := os.OpenFile(filepath.Join(dir, "buildkitd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	args := []string{"--root", filepath.Join(dir, "root"), "--addr", "unix://" + b.sock,
		"--config", filepath.Join(dir, "buildkitd.toml"), "--group", "0"}
	// Not CommandContext: the daemon lives as long as the node, not ctx.
	cmd := exec.Command(daemon, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Registries other than the node's and URLs of ADD go to a port
	// nothing listens on: a Dockerfile naming docker.io fails here rather
	// than sending traffic off the machine.
	cmd.Env = append(cleanEnv(os.Environ()), "HTTP_PROXY=http://"+proxy, "HTTPS_PROXY=http://"+proxy,
		"NO_PROXY="+hostOf(cfg.Registry), "PATH="+pathWith(cfg.Bin))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		b.net.close()
		return nil, fmt.Errorf("start buildkitd: %w", err)
	}
	b.cmd = cmd
	go func() { _ = cmd.Wait(); close(b.done) }()
	_ = os.WriteFile(filepath.Join(dir, "buildkitd.pid"), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if c, err := net.Dial("unix", b.sock); err == nil {
			_ = c.Close()
			if out, err := b.ctl(wctx, "debug", "workers").CombinedOutput(); err == nil {
				return b, nil
			} else if wctx.Err() != nil {
				_ = b.Stop(context.Background())
				return nil, fmt.Errorf("buildkitd: no workers: %v: %s", err, out)
			}
		}
		select {
		case <-b.done:
			b.net.close()
			return nil, fmt.Errorf("buildkitd exited at start (see %s): %w", filepath.Join(dir, "buildkitd.log"), errdefs.ErrUnavailable)
		case <-wctx.Done():
			_ = b.Stop(context.Background())
			return nil, fmt.Errorf("buildkitd did not answer within a minute (see %s): %w", filepath.Join(dir, "buildkitd.log"), errdefs.ErrUnavailable)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopStale ends the buildkitd of an earlier envd of this data dir that
// did not stop it (killed): it holds the root's lock.
func stopStale(pidFile, dir string) {
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || pid <= 1 {
		return
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), Daemon) || !strings.Contains(string(cmdline), dir) {
		return // gone, or the pid is another process's now
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 200; i++ {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}

// Stop ends the daemon (its cache stays in Dir).
func (b *BuildKit) Stop(ctx context.Context) error {
	// The plugin server stops after the daemon: the daemon's last
	// releases of namespaces go through it.
	defer b.net.close()
	if b.cmd == nil || b.cmd.Process == nil {
		return nil
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
	case <-time.After(20 * time.Second):
	}
	_ = b.cmd.Process.Kill()
	<-b.done
	return nil
}

// Socket is the daemon's address.
func (b *BuildKit) Socket() string { return b.sock }

// Registry is the host:port images are pulled from and pushed to.
func (b *BuildKit) Registry() string { return b.cfg.Registry }

// writeConfig writes buildkitd.toml (the OCI worker with runc, RUN steps
// on a bridge of their own, the node's registry over plain HTTP) and the
// client's credentials for that registry.
func (b *BuildKit) writeConfig() error {
	cni := b.cfg.CNIBinDir
	if cni == "" {
		cni = "/usr/lib/cni"
	}
	// Without a Network, RUN steps get a network namespace with loopback
	// only: a bridge of BuildKit's own would not have the instance
	// firewall (runtime's firewall.go) that keeps hostile code from the
	// node's ports and private ranges.
	conf := filepath.Join(b.cfg.Dir, "loopback.conflist")
	body := `{"cniVersion": "1.0.0", "name": "envd-build-none", "plugins": [{"type": "loopback"}]}`
	if b.net != nil {
		// With one, every namespace goes through netplugin, which asks
		// this node (b.net) to attach it to the instances' bridge under
		// its build's grant, or leaves it with loopback only.
		var err error
		if cni, err = b.pluginDir(cni); err != nil {
			return err
		}
		conf = filepath.Join(b.cfg.Dir, "build-net.conflist")
		raw, _ := json.Marshal(map[string]any{"cniVersion": "1.0.0", "name": "envd-build-net",
			"plugins": []any{map[string]string{"type": netplugin.Type, "socket": b.net.path}}})
		body = string(raw)
	}
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return err
	}
	var s strings.Builder
	fmt.Fprintf(&s, "[otel]\n  socketPath = %q\n", filepath.Join(b.cfg.Dir, "otel.sock"))
	fmt.Fprintf(&s, "[worker.oci]\n  enabled = true\n  binary = \"runc\"\n  snapshotter = \"overlayfs\"\n  gc = true\n")
	fmt.Fprintf(&s, "  networkMode = \"cni\"\n  cniConfigPath = %q\n  cniBinaryPath = %q\n", conf, cni)
	fmt.Fprintf(&s, "[worker.containerd]\n  enabled = false\n")
	fmt.Fprintf(&s, "[registry.%q]\n  http = %t\n", b.cfg.Registry, b.cfg.PlainHTTP)
	if err := os.WriteFile(filepath.Join(b.cfg.Dir, "buildkitd.toml"), []byte(s.String()), 0o600); err != nil {
		return err
	}
	auths := map[string]any{}
	if !b.cfg.Credential.IsZero() {
		auths[b.cfg.Registry] = map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(b.cfg.Credential.User + ":" + b.cfg.Credential.Password))}
	}
	cfg, err := json.Marshal(map[string]any{"auths": auths})
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.cfg.Dir, "client", "config.json"), cfg, 0o600)
}

// ctl is a buildctl command against the daemon, with the node's registry
// credential.
func (b *BuildKit) ctl(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, b.buildctl, append([]string{"--addr", "unix://" + b.sock}, args...)...)
	cmd.Env = append(cleanEnv(os.Environ()), "DOCKER_CONFIG="+filepath.Join(b.cfg.Dir, "client"))
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// Spec is one build.
type Spec struct {
	// Context is the build context directory; Dockerfile the directory
	// holding the Dockerfile, named "Dockerfile".
	Context, Dockerfile string
	Target              string
	Args                map[string]string
	// Bases map the images the Dockerfile names (FROM, COPY --from,
	// RUN --mount from=) to repo@digest in the node's registry.
	Bases map[string]string
	// Repo is the registry repository the result is pushed to.
	Repo string
	// CacheNamespace scopes RUN --mount=type=cache: BuildKit shares cache
	// mounts by id across all builds of a daemon, so without it one
	// project's build would read and write another's.
	CacheNamespace string
	// Network is the network of the RUN steps; nil (or a node whose
	// BuildKit has no Network): loopback only.
	Network *Grant
}

// ReservedArgs are build arguments Build sets itself, or that would
// change what it set (the sandbox host name names a build's grant).
var ReservedArgs = []string{"BUILDKIT_CACHE_MOUNT_NS", "BUILDKIT_SYNTAX", "BUILDKIT_SANDBOX_HOSTNAME"}

// Build runs s and pushes the result, its layers as eStargz, by digest;
// BuildKit's progress (a line per step, "CACHED" for steps its cache
// served) goes to log. It answers the pushed manifest's digest. A failed
// build is ErrFailedPrecondition carrying the end of the output.
func (b *BuildKit) Build(ctx context.Context, s Spec, log io.Writer) (string, error) {
	meta, err := os.CreateTemp(b.cfg.Dir, "metadata-")
	if err != nil {
		return "", err
	}
	_ = meta.Close()
	defer os.Remove(meta.Name())
	args := []string{"build", "--progress", "plain", "--frontend", "dockerfile.v0",
		"--local", "context=" + s.Context, "--local", "dockerfile=" + s.Dockerfile,
		"--output", "type=image,name=" + b.cfg.Registry + "/" + s.Repo +
			",push=true,push-by-digest=true,oci-mediatypes=true,compression=estargz,force-compression=true",
		"--metadata-file", meta.Name()}
	if s.Target != "" {
		args = append(args, "--opt", "target="+s.Target)
	}
	for _, k := range sortedKeys(s.Args) {
		args = append(args, "--opt", "build-arg:"+k+"="+s.Args[k])
	}
	if s.CacheNamespace == "" {
		return "", fmt.Errorf("buildkit: a build without a cache namespace: %w", errdefs.ErrInvalidArgument)
	}
	args = append(args, "--opt", "build-arg:BUILDKIT_CACHE_MOUNT_NS="+s.CacheNamespace,
		// The Dockerfile frontend of this BuildKit, never the image a
		// "# syntax=" line names (it would come from a registry outside).
		"--opt", "cmdline=")
	for _, k := range sortedKeys(s.Bases) {
		args = append(args, "--opt", "context:"+k+"=docker-image://"+b.cfg.Registry+"/"+s.Bases[k])
	}
	if s.Network != nil && b.net == nil {
		// Closed, not refused: a Dockerfile that needs no network builds.
		fmt.Fprintf(log, "envd: RUN steps have loopback only on this node (no runtime or no envd-agent binary for their network)\n")
	}
	if s.Network != nil && b.net != nil {
		// The host name of the RUN steps names the grant (netServer.grant);
		// BuildKit passes it to the CNI plugin, and gives named steps
		// fresh namespaces (never its pool's).
		host, release := b.net.grant(*s.Network)
		defer release()
		args = append(args, "--opt", "hostname="+host)
	}
	cmd := b.ctl(ctx, args...)
	tail := &tailWriter{max: 4000}
	w := io.MultiWriter(log, tail)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", errdefs.WithDetails(fmt.Errorf("dockerfile build failed: %s: %w", lastError(tail.String()), errdefs.ErrFailedPrecondition),
				map[string]any{"output": tail.String()})
		}
		return "", fmt.Errorf("buildctl: %w", err)
	}
	raw, err := os.ReadFile(meta.Name())
	if err != nil {
		return "", err
	}
	var m struct {
		Digest string `json:"containerimage.digest"`
	}
	if err := json.Unmarshal(raw, &m); err != nil || m.Digest == "" {
		return "", fmt.Errorf("buildctl metadata %q: no image digest: %v", raw, err)
	}
	return m.Digest, nil
}

// lastError is BuildKit's error line of a failed build ("ERROR: ..." or
// "error: ..."), else its last line.
func lastError(out string) string {
	var last, errLine string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" {
			continue
		}
		last = l
		if strings.HasPrefix(l, "error: ") || strings.HasPrefix(l, "ERROR: ") {
			errLine = l
		}
	}
	if errLine != "" {
		return errLine
	}
	return last
}

type tailWriter struct {
	buf []byte
	max int
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string { return string(t.buf) }

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// cleanEnv drops proxy settings of envd's own environment: the daemon's
// are set by Start, and buildctl talks to a unix socket.
func cleanEnv(env []string) []string {
	out := env[:0:0]
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "PATH", "DOCKER_CONFIG":
			continue
		}
		out = append(out, e)
	}
	return append(out, "PATH="+os.Getenv("PATH"))
}

func pathWith(dir string) string {
	if dir == "" {
		return os.Getenv("PATH")
	}
	return dir + ":" + os.Getenv("PATH")
}

func hostOf(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// closedPort is a loopback address nothing listens on: a port that was
// free a moment ago. Were something to take it, it would see only
// requests for registries outside, over loopback.
func closedPort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}
