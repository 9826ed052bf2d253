// Package stargz serves the stargz snapshotter
// (github.com/containerd/stargz-snapshotter/service) as a containerd proxy
// snapshotter over gRPC on a unix socket, and starts it as its own process
// (`envd snapshotter`) for the embedded default.
//
// Terms:
//   - A lazy layer is an eStargz layer mounted with FUSE from the registry:
//     its files are fetched (in ranged blob GETs) when first read, and the
//     whole layer is also fetched in the background into a local cache.
//     Lazy layers are mounted at ROOT/snapshotter/snapshots/ID/fs; an
//     instance's active snapshot is an overlay whose lowerdirs are those
//     mounts and whose upperdir is ROOT/snapshotter/snapshots/ID/fs of the
//     active snapshot (a plain directory, as with containerd's overlayfs).
//   - A layer that is not eStargz is unpacked normally into the same
//     snapshotter by containerd (the snapshotter's fallback).
//   - FUSE mounts live exactly as long as the process serving them: that is
//     why the snapshotter runs in its own session, apart from the API
//     process.
package stargz

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/contrib/snapshotservice"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/reference"
	"github.com/containerd/log"
	fsconfig "github.com/containerd/stargz-snapshotter/fs/config"
	"github.com/containerd/stargz-snapshotter/fs/source"
	"github.com/containerd/stargz-snapshotter/service"
	"github.com/containerd/stargz-snapshotter/service/resolver"
	"github.com/containerd/stargz-snapshotter/snapshot"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/envd-dev/envd/errdefs"
)

// Name is the proxy plugin name envd gives the stargz snapshotter in
// containerd's config.
const Name = "stargz"

// maxSocketPath is the longest unix socket path on Linux.
const maxSocketPath = 107

// Config of the snapshotter. Zero values get the defaults below, chosen so
// that when the registry goes away (connections refused, or a registry that
// accepts and never answers) a read of a file that is not cached yet keeps
// retrying for FetchTimeout and then fails with EIO, never hangs and never
// takes a multiple of FetchTimeout (outage.go); see docs/notes/lazy-restore.md.
type Config struct {
	// PlainHTTP are registry host:port served over plain HTTP (the
	// embedded registry). Loopback hosts always use plain HTTP.
	PlainHTTP []string
	// CredentialsFile holds the registries' credentials (see
	// credentials.go); "" = every registry anonymously.
	CredentialsFile string
	// FetchTimeout bounds one on-demand fetch of a layer range, retries
	// included: the longest a read waits for a registry that is gone.
	// Default 20s (the library's default is 300 s, far beyond what a shell
	// user waits for a read to fail).
	FetchTimeout time.Duration
	// RequestTimeout bounds each HTTP request to the registry, body
	// included. Default 15s.
	RequestTimeout time.Duration
	// MaxRetries caps how many times a failed request is retried, with
	// exponential backoff from MinRetryWait to MaxRetryWait; retries also
	// end with the fetch's FetchTimeout. Defaults: as many as fit in
	// FetchTimeout at MinRetryWait, 250ms, 2s (library defaults: 5
	// retries, up to 300 s apart).
	MaxRetries   int
	MinRetryWait time.Duration
	MaxRetryWait time.Duration
	// RefetchAfter is how long a layer's fetched size may stand still
	// before the layer is fetched again by reading every file through its
	// mount, retrying until it succeeds. The library's own background fetch
	// runs only once per layer and gives up for good when the registry is
	// unreachable; this is what makes an instance stop depending on the
	// registry once the registry is back. Default 15s.
	RefetchAfter time.Duration
}

func (c *Config) setDefaults() {
	if c.FetchTimeout <= 0 {
		c.FetchTimeout = 20 * time.Second
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = 15 * time.Second
	}
	if c.MinRetryWait <= 0 {
		c.MinRetryWait = 250 * time.Millisecond
	}
	if c.MaxRetries <= 0 {
		c.MaxRetries = int(c.FetchTimeout/c.MinRetryWait) + 1
	}
	if c.MaxRetryWait <= 0 {
		c.MaxRetryWait = 2 * time.Second
	}
	if c.RefetchAfter <= 0 {
		c.RefetchAfter = 15 * time.Second
	}
}

// serviceConfig turns c into the library's configuration.
func (c Config) serviceConfig() *service.Config {
	return &service.Config{
		Config: fsconfig.Config{
			// Background fetch on (the default): every mounted layer is
			// fetched whole into the local cache.
			NoBackgroundFetch: false,
			// A layer's prefetch range (the files its save put first) is
			// fetched from the mount on, in the background: a container
			// start does not wait for it. The library waits for any
			// prefetch up to 10 s by default ("prefetch larger than this
			// runs in the background", 0 = never); an install's own
			// files, 90 MB before the landmark, held every lazy start of
			// its version about 5 s. What a start needs is made local by
			// envd before it reports Running (lifecycle's warm), and the
			// project's first reads are read ahead then.
			PrefetchAsyncSize: 1,
			BlobConfig: fsconfig.BlobConfig{
				FetchTimeoutSec: int64(max(1, c.FetchTimeout/time.Second)),
				MaxRetries:      c.MaxRetries,
				MinWaitMSec:     int(c.MinRetryWait / time.Millisecond),
				MaxWaitMSec:     int(c.MaxRetryWait / time.Millisecond),
			},
		},
		ResolverConfig: service.ResolverConfig{
			RequestTimeoutSec: int(max(1, c.RequestTimeout/time.Second)),
		},
	}
}

// registryHosts resolves every registry to one host entry (no https
// fallback after http, which would double the time a failing read takes),
// with plain HTTP for c.PlainHTTP and loopback hosts. The HTTP client is
// the library's retrying one under outageTransport, which sets the retry
// settings.
func (c Config) registryHosts() source.RegistryHosts {
	base := resolver.RegistryHostsFromConfig(resolver.Config{
		RequestTimeoutSec: int(max(1, c.RequestTimeout/time.Second)),
	}, c.credentials)
	return func(ref reference.Spec) ([]docker.RegistryHost, error) {
		hosts, err := base(ref)
		if err != nil || len(hosts) == 0 {
			return hosts, err
		}
		h := hosts[len(hosts)-1] // the registry itself, after (no) mirrors
		if slices.Contains(c.PlainHTTP, h.Host) {
			h.Scheme = "http"
		}
		if h.Client != nil {
			hc := *h.Client
			hc.Transport = newOutageTransport(h.Client, c.MaxRetries, c.MinRetryWait, c.MaxRetryWait)
			// The library reads the per-request timeout from here for
			// requests through a transport it does not know.
			hc.Timeout = c.RequestTimeout
			h.Client = &hc
		}
		return []docker.RegistryHost{h}, nil
	}
}

// Serve runs the stargz snapshotter with its state under root, serving the
// containerd snapshots API on the unix socket until ctx is done. It then
// stops serving and closes the snapshotter, which unmounts every FUSE mount
// it made (a new Serve on the same root mounts the layers of existing
// snapshots again). It fails at once when FUSE or overlayfs is unusable.
func Serve(ctx context.Context, root, socket string, cfg Config) error {
	cfg.setDefaults()
	if !filepath.IsAbs(root) || !filepath.IsAbs(socket) || len(socket) > maxSocketPath {
		return fmt.Errorf("snapshotter root %q and socket %q must be absolute, the socket at most %d bytes: %w",
			root, socket, maxSocketPath, errdefs.ErrInvalidArgument)
	}
	if err := Supported(root); err != nil {
		return err
	}
	sn, err := newSnapshotter(ctx, root, cfg)
	if err != nil {
		return err
	}
	defer func() {
		if err := sn.Close(); err != nil {
			log.G(ctx).WithError(err).Warn("close stargz snapshotter")
		}
	}()

	if err := os.MkdirAll(filepath.Dir(socket), 0o711); err != nil {
		return fmt.Errorf("snapshotter socket dir: %w", err)
	}
	_ = os.Remove(socket) // stale, from a process that died
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", socket, err)
	}
	srv := grpc.NewServer()
	snapshotsapi.RegisterSnapshotsServer(srv, snapshotservice.FromSnapshotter(sn))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", socket, err)
	case <-ctx.Done():
	}
	stopped := make(chan struct{})
	go func() { srv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		srv.Stop()
	}
	return nil
}

// Supported reports whether this machine can run the snapshotter with its
// state under root: /dev/fuse must be openable and overlayfs usable there.
func Supported(root string) error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("lazy snapshotter needs FUSE: %w: %w", errdefs.ErrUnavailable, err)
	}
	f.Close()
	if err := os.MkdirAll(filepath.Join(root, "snapshotter"), 0o700); err != nil {
		return fmt.Errorf("snapshotter root: %w", err)
	}
	if err := service.Supported(root); err != nil {
		return fmt.Errorf("lazy snapshotter needs overlayfs under %s: %w: %w", root, errdefs.ErrUnavailable, err)
	}
	return nil
}

// newSnapshotter is service.NewStargzSnapshotterService with its
// FileSystem wrapped by the refetcher.
func newSnapshotter(ctx context.Context, root string, cfg Config) (snapshots.Snapshotter, error) {
	fs, err := service.NewFileSystem(ctx, root, cfg.serviceConfig(), service.WithCustomRegistryHosts(cfg.registryHosts()))
	if err != nil {
		return nil, fmt.Errorf("stargz filesystem: %w", err)
	}
	rfs := newRefetchFS(fs, cfg.RefetchAfter)
	// The same directory layout as the service package (ROOT/snapshotter,
	// ROOT/stargz), so the library's own tools read it.
	sn, err := snapshot.NewSnapshotter(ctx, filepath.Join(root, "snapshotter"), rfs, snapshot.AsynchronousRemove)
	if err != nil {
		rfs.close()
		return nil, fmt.Errorf("stargz snapshotter: %w", err)
	}
	return &closingSnapshotter{Snapshotter: sn, close: rfs.close}, nil
}

type closingSnapshotter struct {
	snapshots.Snapshotter
	close func()
}

func (s *closingSnapshotter) Close() error {
	s.close() // stop refetchers first: they read through the mounts
	return s.Snapshotter.Close()
}

// WaitReady waits until a snapshotter answers on socket, or ctx ends.
func WaitReady(ctx context.Context, socket string) error {
	for {
		err := ping(ctx, socket)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("snapshotter on %s not ready: %w: %w", socket, errdefs.ErrUnavailable, errors.Join(ctx.Err(), err))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ping asks the snapshotter on socket about a snapshot that does not exist:
// any answer from the service (not found, or an empty store's error) means
// it serves.
func ping(ctx context.Context, socket string) error {
	if _, err := os.Stat(socket); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = snapshotsapi.NewSnapshotsClient(conn).Stat(ctx, &snapshotsapi.StatSnapshotRequest{Snapshotter: Name, Key: "envd-ping"})
	switch status.Code(err) {
	case codes.OK, codes.NotFound, codes.Unknown, codes.FailedPrecondition, codes.Internal:
		return nil
	}
	return err
}
