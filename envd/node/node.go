// Package node is envd's composition root: it starts (or connects to) the
// parts a node needs, PostgreSQL, the registry, containerd, and serves the
// API. `envd up` runs it on embedded defaults under one data dir; `envd serve`
// takes external parts. It lives apart from package envd because it wires
// api/, which imports envd.
package node

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/envd-dev/envd/api"
	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/internal/atomicfile"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/internal/pgserver"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/snapshotter/stargz"
	"github.com/envd-dev/envd/versions"
	"github.com/envd-dev/envd/workspace"
)

// Config of a node. Empty external addresses mean "embedded, under DataDir".
type Config struct {
	DataDir string
	Listen  string // API address; default 127.0.0.1:0, the chosen one is written to DataDir/envd.url
	Node    string // default: persisted in DataDir/node

	DSN        string // external PostgreSQL; "" = private cluster in DataDir/pg
	Registry   string // external registry host:port (plain HTTP); "" = embedded in DataDir/registry
	Containerd string // external containerd socket; "" = private daemon in DataDir/containerd
	Namespace  string // containerd namespace; default "envd"

	// RegistryCredentialFile holds the credential ("user:password", a 0600
	// file) this node pulls and pushes with on the external Registry; ""
	// = anonymous. The embedded registry's are generated at first start in
	// DataDir/registry-node.credential and DataDir/registry-gc.credential
	// (copy the first to a joining node; see docs/api.md).
	RegistryCredentialFile string
	// RegistryGCCredentialFile holds the external registry's GC credential,
	// the one allowed to delete manifests; "" = deletes use
	// RegistryCredentialFile's (which the embedded registry refuses), so
	// this node's GC cannot delete.
	RegistryGCCredentialFile string
	// RegistryS3 stores the embedded registry's content in S3 instead of
	// DataDir/registry; nil = the filesystem.
	RegistryS3 *registry.S3Storage
	// S3 is the object store for volume archives (and, later, logs and
	// hibernated layers); nil = a directory under DataDir/objects.
	S3 *objstore.S3Config

	DefaultTTL     time.Duration
	MaxTTL         time.Duration
	HibernateAfter time.Duration // 0 = never
	PrefetchWindow time.Duration // 0 = envd's default (60s), negative = off
	// DisableLazy runs no lazy snapshotter: every restore pulls and unpacks
	// whole images for overlayfs (the baseline lazy restore is measured
	// against).
	DisableLazy bool
	// ReconcileInterval is how often the reconciler (and hibernation) runs;
	// 0 = envd's default (30s).
	ReconcileInterval time.Duration
	Logger            *slog.Logger
	// DefaultLimits are the resource limits of instances whose project
	// sets none of a kind; zero fields = no limit.
	DefaultLimits types.Limits
	// DisableDiskLimit ignores writable-layer size limits
	// (Limits.DiskBytes): layers stay plain directories, bounded only by
	// the node's disk.
	DisableDiskLimit bool
	// DiskReserveBytes is the node's free space that instances with a
	// writable-layer limit leave alone; 0 = the runtime's default (1 GiB).
	DiskReserveBytes int64
	// UserNS runs instances in a user namespace (runtime.Config.UserNS):
	// images are pulled in full (no lazy restore).
	UserNS bool
	// Unrestricted is for benchmarks only: it turns off hardening, limits
	// and network rules (runtime.Config.Unrestricted).
	Unrestricted bool

	// InstanceDeny are more cluster endpoints instances must never reach
	// (other nodes, say), as CIDR, IP, HOST, IP:PORT or HOST:PORT, besides
	// those the node itself uses (PostgreSQL, the registry, S3), which are
	// always denied.
	InstanceDeny []string
	// BuildEgress is build containers' egress policy (default open); see
	// envd.Config.BuildEgress.
	BuildEgress string

	// Limits bound one tenant's concurrent saves, builds, exec and event
	// streams on this node; zero fields take envd.DefaultTenantLimits.
	Limits envd.TenantLimits
}

// DefaultDataDir is /var/lib/envd for root, ~/.local/share/envd otherwise.
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/envd"
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "share", "envd")
}

// Node is a running envd node.
type Node struct {
	cfg     Config
	Service *envd.Service
	URL     string
	Token   string

	closers []func(context.Context) error
	srv     *http.Server
	ln      net.Listener

	// Embedded parts this node started; nil when external.
	pg      *pgserver.Server
	daemon  *runtime.Daemon
	stargz  *stargz.Process // the lazy snapshotter process; nil when not running
	rt      *runtime.Runtime
	vols    *workspace.Manager
	reg     *registry.Client
	regAddr string
	regCred registryFiles
	dsn     string
}

// Start brings the node up and starts serving; Wait or Close end it.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg.DataDir == "" {
		cfg.DataDir = DefaultDataDir()
	}
	if cfg.DataDir, err = filepath.Abs(cfg.DataDir); err != nil {
		return nil, err
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	for _, f := range []*string{&cfg.RegistryCredentialFile, &cfg.RegistryGCCredentialFile} {
		if *f != "" {
			if *f, err = filepath.Abs(*f); err != nil {
				return nil, err
			}
		}
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "envd"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	if cfg.Node == "" {
		if cfg.Node, err = persisted(filepath.Join(cfg.DataDir, "node"), func() string {
			h, _ := os.Hostname()
			return fmt.Sprintf("%s-%s", sanitize(h), randomHex(3))
		}); err != nil {
			return nil, err
		}
	}
	if err := rememberParts(&cfg); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg}
	defer func() {
		if err != nil {
			n.Close(context.WithoutCancel(ctx))
		}
	}()
	log := cfg.Logger
	components := map[string]string{}

	// PostgreSQL
	dsn := cfg.DSN
	if dsn == "" {
		pg, err := pgserver.Start(ctx, filepath.Join(cfg.DataDir, "pg"))
		if err != nil {
			return nil, fmt.Errorf("embedded postgresql: %w", err)
		}
		// The cluster outlives envd on purpose (restarts keep it); it is
		// stopped only by Shutdown.
		n.pg = pg
		dsn = pg.DSN()
		components["postgresql"] = "embedded " + filepath.Join(cfg.DataDir, "pg")
	} else {
		components["postgresql"] = "external"
	}
	n.dsn = dsn
	store, err := versions.Open(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("metadata store: %w", err)
	}
	n.closers = append(n.closers, func(context.Context) error { store.Close(); return nil })

	// Registry
	regAddr := cfg.Registry
	var sweeper envd.Sweeper // the embedded registry; an external one sweeps itself
	if regAddr == "" {
		addrFile := filepath.Join(cfg.DataDir, "registry.addr")
		listen := "127.0.0.1:0"
		if b, err := os.ReadFile(addrFile); err == nil {
			listen = strings.TrimSpace(string(b)) // keep the address: image refs in containerd name it
		}
		var ropts []registry.Option
		if rs := cfg.RegistryS3; rs != nil {
			// distribution's driver does not create its bucket.
			if _, err := objstore.NewS3(ctx, objstore.S3Config{Endpoint: rs.Endpoint, Bucket: rs.Bucket,
				AccessKey: rs.AccessKey, SecretKey: rs.SecretKey, Secure: rs.Secure, Region: rs.Region}); err != nil {
				return nil, fmt.Errorf("registry bucket: %w", err)
			}
			ropts = append(ropts, registry.WithS3Storage(*rs))
		}
		files := registryFiles{Node: filepath.Join(cfg.DataDir, nodeCredentialFile), GC: filepath.Join(cfg.DataDir, gcCredentialFile)}
		access, err := files.loadOrCreate()
		if err != nil {
			return nil, err
		}
		n.regCred = files
		ropts = append(ropts, registry.WithAccess(access))
		srv, err := registry.Serve(ctx, filepath.Join(cfg.DataDir, "registry"), listen, ropts...)
		if err != nil && listen != "127.0.0.1:0" {
			log.Warn("registry address taken, choosing another", "addr", listen, "err", err)
			srv, err = registry.Serve(ctx, filepath.Join(cfg.DataDir, "registry"), "127.0.0.1:0", ropts...)
		}
		if err != nil {
			return nil, fmt.Errorf("embedded registry: %w", err)
		}
		n.closers = append(n.closers, srv.Close)
		sweeper = srv
		regAddr = srv.Addr()
		if err := writeFileAtomic(addrFile, []byte(regAddr+"\n"), 0o600); err != nil {
			return nil, err
		}
		components["registry"] = "embedded distribution v3 at " + regAddr
	} else {
		components["registry"] = "external " + regAddr
		n.regCred = registryFiles{Node: cfg.RegistryCredentialFile, GC: cfg.RegistryGCCredentialFile}
	}
	n.regAddr = regAddr
	regAccess, err := n.regCred.load()
	if err != nil {
		return nil, err
	}
	reg := registry.NewClient(regAddr, registry.WithCredential(regAccess.Node), registry.WithDeleteCredential(regAccess.GC))
	n.reg = reg
	if cfg.Registry != "" {
		// A refused credential would otherwise show only at the first
		// save or restore; an unreachable registry may come back.
		if err := reg.Ping(ctx); errors.Is(err, errdefs.ErrUnauthenticated) {
			return nil, fmt.Errorf("registry %s refuses this node (give its node credential with --registry-credential-file): %w", regAddr, err)
		} else if err != nil {
			log.Warn("registry not reachable at start", "registry", regAddr, "err", err)
		}
	}

	// containerd
	ctrdAddr := cfg.Containerd
	lazy := ""
	if ctrdAddr == "" {
		// --- lazy snapshotter: its own process, started before containerd,
		// which uses it as the proxy plugin stargz.Name. Without it (no FUSE,
		// say) every restore is a full pull for overlayfs.
		var dopts []runtime.DaemonOption
		if cfg.DisableLazy {
			components["lazy snapshotter"] = "disabled"
		} else if sp, err := stargz.Start(ctx, "", filepath.Join(cfg.DataDir, "stargz"), []string{regAddr}, regAccess.stargzOptions(regAddr)...); err != nil {
			log.Warn("lazy snapshotter unavailable, restores pull images in full (overlayfs)", "err", err)
			components["lazy snapshotter"] = "unavailable: " + err.Error()
		} else {
			n.stargz = sp
			lazy = stargz.Name
			dopts = append(dopts, runtime.WithProxySnapshotter(stargz.Name, sp.Socket()))
			components["lazy snapshotter"] = "embedded stargz at " + sp.Socket()
		}
		// --- end lazy snapshotter
		d, err := runtime.StartDaemon(ctx, filepath.Join(cfg.DataDir, "containerd"), dopts...)
		if err != nil {
			return nil, fmt.Errorf("embedded containerd: %w", err)
		}
		n.daemon = d
		ctrdAddr = d.Address()
		components["containerd"] = "embedded at " + ctrdAddr
	} else {
		components["containerd"] = "external at " + ctrdAddr
	}
	rt, err := runtime.New(ctx, runtime.Config{
		Address: ctrdAddr, Namespace: cfg.Namespace, StateDir: filepath.Join(cfg.DataDir, "runtime"),
		Network:             networkFor(cfg.DataDir, clusterEndpoints(cfg, dsn, regAddr)),
		PlainHTTPRegistries: []string{regAddr},
		RegistryCredentials: regAccess.nodeFor(regAddr),
		LazySnapshotter:     lazy,
		DisableDiskLimit:    cfg.DisableDiskLimit,
		DiskReserveBytes:    cfg.DiskReserveBytes,
		UserNS:              cfg.UserNS,
		Unrestricted:        cfg.Unrestricted,
	})
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	// --- writable-layer limits
	switch err := rt.DiskLimitErr(); {
	case cfg.DisableDiskLimit:
		components["disk limit"] = "disabled"
	case err != nil:
		log.Warn("writable-layer limits cannot be honoured: instances with one fail to start", "err", err)
		components["disk limit"] = "unavailable: " + err.Error()
	default:
		components["disk limit"] = fmt.Sprintf("ext4 image per instance, default %d bytes (0 = none)", cfg.DefaultLimits.DiskBytes)
	}
	// --- end writable-layer limits
	if root, on := rt.UserNS(); on {
		components["user namespaces"] = fmt.Sprintf("on: instance root is host uid %d (%d ids); images pulled in full (no lazy restore)", root, runtime.UserNSSize)
	}
	if cfg.Unrestricted {
		log.Warn("instances run without hardening, limits or network rules (benchmarks only)")
		components["hardening"] = "off (benchmarks only)"
	}
	if err := rt.LazyErr(); err != nil {
		log.Warn("lazy snapshotter not usable, restores pull images in full (overlayfs)", "err", err)
		components["lazy snapshotter"] = "unavailable: " + err.Error()
	}
	n.rt = rt
	n.closers = append(n.closers, func(context.Context) error { return rt.Close() })

	vols, err := workspace.NewManager(filepath.Join(cfg.DataDir, "volumes"))
	if err != nil {
		return nil, fmt.Errorf("volumes: %w", err)
	}
	n.vols = vols
	var objects objstore.Store
	if cfg.S3 != nil {
		if objects, err = objstore.NewS3(ctx, *cfg.S3); err != nil {
			return nil, fmt.Errorf("object store: %w", err)
		}
		components["objects"] = "s3 " + cfg.S3.Endpoint + "/" + cfg.S3.Bucket
	} else {
		if objects, err = objstore.NewDir(filepath.Join(cfg.DataDir, "objects")); err != nil {
			return nil, fmt.Errorf("object store: %w", err)
		}
		components["objects"] = "directory " + filepath.Join(cfg.DataDir, "objects")
	}

	svc, err := envd.New(envd.Config{
		Node: cfg.Node, WorkDir: filepath.Join(cfg.DataDir, "work"), DataDir: cfg.DataDir,
		DefaultTTL: cfg.DefaultTTL, MaxTTL: cfg.MaxTTL, Components: components, Logger: log,
		Volumes: vols, Objects: objects, HibernateAfter: cfg.HibernateAfter, PrefetchWindow: cfg.PrefetchWindow, ReconcileInterval: cfg.ReconcileInterval,
		Sweeper: sweeper, DefaultLimits: cfg.DefaultLimits, BuildEgress: cfg.BuildEgress,
		Limits: cfg.Limits,
	}, store, reg, rt)
	if err != nil {
		return nil, err
	}
	n.Service = svc
	n.closers = append(n.closers, func(context.Context) error { svc.Close(); return nil })

	// The admin token is created once and kept, so envctl keeps working
	// across restarts.
	tokenFile := filepath.Join(cfg.DataDir, "admin.token")
	n.Token, err = persisted(tokenFile, func() string { return randomHex(32) })
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(tokenFile, 0o600); err != nil {
		return nil, err
	}
	if err := store.EnsureAdminToken(ctx, "admin", n.Token); err != nil {
		return nil, fmt.Errorf("admin token: %w", err)
	}
	if err := svc.Start(ctx); err != nil {
		return nil, err
	}
	n.protectFromOOM()
	n.reportCgroupLimits()

	n.ln, err = net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	n.URL = "http://" + n.ln.Addr().String()
	if err := writeFileAtomic(filepath.Join(cfg.DataDir, "envd.url"), []byte(n.URL+"\n"), 0o600); err != nil {
		return nil, err
	}
	h, err := api.New(svc)
	if err != nil {
		return nil, err
	}
	n.srv = newHTTPServer(h)
	go func() {
		if err := n.srv.Serve(n.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("api server", "err", err)
		}
	}()
	log.Info("envd node up", "node", cfg.Node, "url", n.URL, "data_dir", cfg.DataDir, "registry", regAddr, "containerd", ctrdAddr)
	return n, nil
}

// Close stops serving and releases the node's clients. Containers, the
// private containerd and PostgreSQL keep running, so a restart finds them.
func (n *Node) Close(ctx context.Context) {
	if n.srv != nil {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = n.srv.Shutdown(sctx)
		cancel()
	}
	for i := len(n.closers) - 1; i >= 0; i-- {
		if err := n.closers[i](ctx); err != nil {
			n.cfg.Logger.Warn("close", "err", err)
		}
	}
	n.closers = nil
}

// Runtime is the node's container runtime (for tests and tools that act
// behind the service's back, like a crash would).
func (n *Node) Runtime() *runtime.Runtime { return n.rt }

// DSN is the PostgreSQL connection string the node uses (so a second node
// can join it).
func (n *Node) DSN() string { return n.dsn }

// RegistryAddr is the host:port of the registry the node uses.
func (n *Node) RegistryAddr() string { return n.regAddr }

// RegistryClient is the node's client of its registry, with its credentials.
func (n *Node) RegistryClient() *registry.Client { return n.reg }

// RegistryCredentialFiles are the files holding the node's registry
// credentials: the node's (pull and push) and the GC's (also delete); ""
// for one the node has none of.
func (n *Node) RegistryCredentialFiles() (node, gc string) { return n.regCred.Node, n.regCred.GC }

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Node }

// DataDir is the directory the node keeps everything in.
func (n *Node) DataDir() string { return n.cfg.DataDir }

// Shutdown closes the node and also removes its containers and stops the
// embedded containerd and PostgreSQL: the node is gone, its data dir stays.
func (n *Node) Shutdown(ctx context.Context) {
	if n.rt != nil {
		if ids, err := n.rt.List(ctx); err == nil {
			for _, id := range ids {
				if err := n.rt.Remove(ctx, id); err != nil {
					n.cfg.Logger.Warn("remove container", "id", id, "err", err)
				}
			}
		}
	}
	if n.rt != nil {
		if err := n.rt.DestroyNetwork(); err != nil {
			n.cfg.Logger.Warn("remove network", "err", err)
		}
	}
	n.Close(ctx)
	if n.vols != nil {
		if err := n.vols.Detach(ctx); err != nil {
			n.cfg.Logger.Warn("unmount volumes", "err", err)
		}
	}
	if n.daemon != nil {
		if err := n.daemon.Stop(ctx); err != nil {
			n.cfg.Logger.Warn("stop containerd", "err", err)
		}
	}
	// After the containers: their lower layers are its FUSE mounts.
	if n.stargz != nil {
		if err := n.stargz.Stop(ctx); err != nil {
			n.cfg.Logger.Warn("stop lazy snapshotter", "err", err)
		}
	}
	if n.pg != nil {
		if err := n.pg.Stop(ctx); err != nil {
			n.cfg.Logger.Warn("stop postgresql", "err", err)
		}
	}
}

// networkFor derives a bridge and subnet from the data dir, so two nodes
// on one machine never share them.
func networkFor(dataDir string, deny []string) runtime.NetworkConfig {
	sum := sha256.Sum256([]byte(dataDir))
	return runtime.NetworkConfig{
		Bridge: "envd" + hex.EncodeToString(sum[:4]),
		Subnet: fmt.Sprintf("10.%d.%d.0/24", 200+int(sum[4])%50, sum[5]),
		Deny:   deny,
	}
}

// clusterEndpoints are the service endpoints instances must not reach: the
// PostgreSQL, registry and S3 addresses this node uses (loopback and unix
// sockets need no rule: an instance's loopback is its own), and
// cfg.InstanceDeny.
func clusterEndpoints(cfg Config, dsn, regAddr string) []string {
	var out []string
	if pc, err := pgconn.ParseConfig(dsn); err == nil && !strings.HasPrefix(pc.Host, "/") {
		out = append(out, net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port))))
		for _, fb := range pc.Fallbacks {
			if !strings.HasPrefix(fb.Host, "/") {
				out = append(out, net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))))
			}
		}
	}
	out = append(out, regAddr)
	if cfg.S3 != nil {
		out = append(out, cfg.S3.Endpoint)
	}
	if cfg.RegistryS3 != nil {
		out = append(out, cfg.RegistryS3.Endpoint)
	}
	var keep []string
	for _, e := range out {
		host, _, err := net.SplitHostPort(e)
		if err != nil {
			host = e
		}
		if ip := net.ParseIP(host); (ip != nil && ip.IsLoopback()) || host == "localhost" || e == "" || slices.Contains(keep, e) {
			continue
		}
		keep = append(keep, e)
	}
	return append(keep, cfg.InstanceDeny...)
}

func persisted(path string, make func() string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	v := make()
	return v, writeFileAtomic(path, []byte(v+"\n"), 0o600)
}

// writeFileAtomic writes path so that readers see the old or the new file.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	return atomicfile.Write(path, data, mode)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sanitize(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		return "node"
	}
	return b.String()
}

// newHTTPServer bounds what a client can hold without sending a request:
// headers must arrive within ReadHeaderTimeout and fit MaxHeaderBytes, and
// an idle keep-alive connection is closed after IdleTimeout. There is no
// ReadTimeout or WriteTimeout: they would cut exec WebSockets, event
// streams and image uploads, which last as long as their work.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}
