package stargz

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/proc"
	"github.com/envd-dev/envd/registry"
)

// reexecEnv makes any binary that links this package run the snapshotter
// command (Main) with its arguments instead of its own main. Start sets it,
// so the process it starts is the snapshotter whether os.Executable() is
// envd (where `envd snapshotter` is the same command) or a test binary that
// runs a node in process.
const reexecEnv = "ENVD_REEXEC_SNAPSHOTTER"

func init() {
	if os.Getenv(reexecEnv) == "1" && len(os.Args) > 1 && os.Args[1] == "snapshotter" {
		os.Exit(Main(context.Background(), os.Args[2:], os.Stderr))
	}
}

// Main runs the snapshotter command: `snapshotter --root DIR --socket PATH
// [--plain-http HOST:PORT]... [--credentials FILE]` serving until SIGINT or
// SIGTERM. It returns the exit code.
func Main(ctx context.Context, args []string, stderr io.Writer) int {
	fl := flag.NewFlagSet("snapshotter", flag.ContinueOnError)
	fl.SetOutput(stderr)
	root := fl.String("root", "", "state directory (snapshots, FUSE mounts, layer cache)")
	socket := fl.String("socket", "", "unix socket to serve the containerd snapshots API on")
	var plain listFlag
	fl.Var(&plain, "plain-http", "registry host:port to reach over plain HTTP (repeatable)")
	credFile := fl.String("credentials", "", "0600 file of registry credentials, lines \"HOST:PORT USER:PASSWORD\", read at each authentication")
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *root == "" || *socket == "" || fl.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: snapshotter --root DIR --socket PATH [--plain-http HOST:PORT]... [--credentials FILE]")
		return 2
	}
	// ENVD_SNAPSHOTTER_LOG=debug shows the library's own steps (resolving,
	// resolved, verified, prefetch) in snapshotter.log, with times.
	if lv := os.Getenv("ENVD_SNAPSHOTTER_LOG"); lv != "" {
		if err := log.SetLevel(lv); err != nil {
			fmt.Fprintln(stderr, "envd snapshotter: ENVD_SNAPSHOTTER_LOG:", err)
			return 2
		}
		_ = log.SetFormat(log.TextFormat) // times to the nanosecond
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Serve(ctx, *root, *socket, Config{PlainHTTP: plain, CredentialsFile: *credFile}); err != nil {
		fmt.Fprintln(stderr, "envd snapshotter:", err)
		return 1
	}
	return 0
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// Process is a snapshotter process serving DIR/stargz.sock with its state
// in DIR/root, logging to DIR/snapshotter.log.
type Process struct {
	dir    string
	socket string
	pid    int
	// done is closed when the process we started has been reaped; nil when
	// we reuse one that was already running.
	done chan struct{}
}

// Socket is the unix socket the snapshotter serves.
func (p *Process) Socket() string { return p.socket }

// Root is the snapshotter's state directory.
func (p *Process) Root() string { return filepath.Join(p.dir, "root") }

// CredentialsFile is the file the snapshotter reads registry credentials
// from (see WriteCredentials).
func (p *Process) CredentialsFile() string { return filepath.Join(p.dir, credentialsFileName) }

// Pid is the process id (0 if unknown for a reused process).
func (p *Process) Pid() int { return p.pid }

// Ping returns nil when the snapshotter answers on its socket (within 2 s).
func (p *Process) Ping(ctx context.Context) error {
	if err := ping(ctx, p.socket); err != nil {
		return fmt.Errorf("snapshotter on %s: %w", p.socket, err)
	}
	return nil
}

// Start runs `EXE snapshotter --root DIR/root --socket DIR/stargz.sock
// [--plain-http H]... --credentials DIR/registry.credentials` in its own
// session, so that it and its FUSE mounts outlive the calling process, and
// waits until it serves (at most 30 s). If a snapshotter already answers on
// the socket it is reused. exe "" means os.Executable(). The pid is written
// to DIR/snapshotter.pid. The credentials file is written (0600) first, so
// a reused snapshotter also authenticates with the credentials given now.
func Start(ctx context.Context, exe, dir string, plainHTTP []string, opts ...StartOption) (*Process, error) {
	o := startOptions{creds: map[string]registry.Credential{}}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	p := &Process{dir: dir, socket: filepath.Join(dir, "stargz.sock")}
	if len(p.socket) > maxSocketPath {
		return nil, fmt.Errorf("snapshotter socket %q is longer than %d bytes: %w", p.socket, maxSocketPath, errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	if err := WriteCredentials(p.CredentialsFile(), o.creds); err != nil {
		return nil, err
	}
	if ping(ctx, p.socket) == nil {
		p.pid = p.pidFromFile()
		return p, nil
	}
	if err := Supported(p.Root()); err != nil {
		return nil, err
	}
	if exe == "" {
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find envd executable: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "snapshotter.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("snapshotter log: %w", err)
	}
	defer logf.Close()
	args := []string{"snapshotter", "--root", p.Root(), "--socket", p.socket, "--credentials", p.CredentialsFile()}
	for _, h := range plainHTTP {
		args = append(args, "--plain-http", h)
	}
	// Not CommandContext: the process must outlive ctx and this process.
	cmd := exec.Command(exe, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), reexecEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start snapshotter: %w", err)
	}
	p.pid = cmd.Process.Pid
	p.done = make(chan struct{})
	go func() { _ = cmd.Wait(); close(p.done) }()
	_ = os.WriteFile(p.pidFile(), []byte(strconv.Itoa(p.pid)+"\n"), 0o600)

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- WaitReady(wctx, p.socket) }()
	select {
	case err := <-ready:
		if err == nil {
			return p, nil
		}
		_ = p.Stop(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("snapshotter (log %s): %s: %w", logPath, proc.LogTail(logPath), err)
	case <-p.done:
		cancel()
		return nil, fmt.Errorf("snapshotter exited during start (log %s): %s: %w", logPath, proc.LogTail(logPath), errdefs.ErrUnavailable)
	}
}

func (p *Process) pidFile() string { return filepath.Join(p.dir, "snapshotter.pid") }

func (p *Process) pidFromFile() int {
	b, err := os.ReadFile(p.pidFile())
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	// Only a process that is our snapshotter: the pid may have been reused.
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "snapshotter\x00--root\x00"+p.Root()) {
		return 0
	}
	return pid
}

// Stop sends SIGTERM, on which the snapshotter unmounts its FUSE mounts and
// exits; after 20 s it is killed. Mounts still left under its root are then
// detached. Call it only when no container uses the snapshotter's snapshots:
// their lower layers go away with it.
func (p *Process) Stop(ctx context.Context) error {
	if p.pid <= 0 {
		p.pid = p.pidFromFile()
	}
	var errs []error
	if err := proc.Terminate(ctx, "snapshotter", p.pid, p.done, 20*time.Second); err != nil {
		errs = append(errs, err)
	}
	if err := unmountAll(p.Root()); err != nil {
		errs = append(errs, fmt.Errorf("unmount snapshotter mounts: %w", err))
	}
	_ = os.Remove(p.socket)
	_ = os.Remove(p.pidFile())
	return errors.Join(errs...)
}

func unmount(target string) error {
	for {
		err := unix.Unmount(target, unix.MNT_DETACH)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EINVAL || err == unix.ENOENT { // not a mount point (any more)
			return nil
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", target, err)
		}
		return nil
	}
}
