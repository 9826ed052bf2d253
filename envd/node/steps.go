package node

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/envd-dev/envd/api"
	apimcp "github.com/envd-dev/envd/api/mcp"
	"github.com/envd-dev/envd/builder"
	"github.com/envd-dev/envd/builder/buildkit"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/internal/pgserver"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/snapshotter/stargz"
	"github.com/envd-dev/envd/versions"
	"github.com/envd-dev/envd/workspace"
)

// The steps of Start, in its order. Each takes the node's Config (n.cfg)
// and what earlier steps returned, returns what it made, describes its part
// in n.components (envd info) and registers the cleanup of what it started
// with n.onClose.

// database is what the PostgreSQL step makes.
type database struct {
	dsn    string
	store  *versions.Store
	server *pgserver.Server // the embedded cluster; nil when external
}

// startPostgreSQL starts the embedded cluster in DataDir/pg, unless
// Config.DSN names one, and opens the metadata store.
func (n *Node) startPostgreSQL(ctx context.Context) (database, error) {
	db := database{dsn: n.cfg.DSN}
	if db.dsn == "" {
		dir := filepath.Join(n.cfg.DataDir, "pg")
		pg, err := pgserver.Start(ctx, dir)
		if err != nil {
			return db, fmt.Errorf("embedded postgresql: %w", err)
		}
		// The cluster outlives envd on purpose (restarts keep it); it is
		// stopped only by Shutdown.
		db.server, db.dsn = pg, pg.DSN()
		n.components["postgresql"] = "embedded " + dir
	} else {
		n.components["postgresql"] = "external"
	}
	store, err := versions.Open(ctx, db.dsn)
	if err != nil {
		return db, fmt.Errorf("metadata store: %w", err)
	}
	db.store = store
	n.onClose(func(context.Context) error { store.Close(); return nil })
	return db, nil
}

// registryPart is what the registry step makes.
type registryPart struct {
	addr    string // host:port
	files   registryFiles
	access  registryAccess // what files hold
	client  *registry.Client
	sweeper envd.Sweeper // the embedded registry; nil for an external one, which sweeps itself
}

// startRegistry serves the embedded registry, unless Config.Registry names
// one, and makes the node's client of it with the node's credentials.
func (n *Node) startRegistry(ctx context.Context) (r registryPart, err error) {
	if n.cfg.Registry == "" {
		if r, err = n.serveRegistry(ctx); err != nil {
			return r, err
		}
	} else {
		r = registryPart{addr: n.cfg.Registry, files: registryFiles{Node: n.cfg.RegistryCredentialFile, GC: n.cfg.RegistryGCCredentialFile}}
		n.components["registry"] = "external " + r.addr
	}
	if r.access, err = r.files.load(); err != nil {
		return r, err
	}
	if r.client, err = registry.NewClient(r.addr, registry.WithCredential(r.access.Node), registry.WithDeleteCredential(r.access.GC)); err != nil {
		return r, fmt.Errorf("registry client: %w", err)
	}
	if n.cfg.Registry != "" {
		// A refused credential would otherwise show only at the first
		// save or restore; an unreachable registry may come back.
		if err := r.client.Ping(ctx); errors.Is(err, errdefs.ErrUnauthenticated) {
			return r, fmt.Errorf("registry %s refuses this node (give its node credential with --registry-credential-file): %w", r.addr, err)
		} else if err != nil {
			n.cfg.Logger.Warn("registry not reachable at start", "registry", r.addr, "err", err)
		}
	}
	return r, nil
}

// serveRegistry serves the embedded registry on the address of its last
// start (image refs in containerd name it), with its content in
// DataDir/registry or Config.RegistryS3 and its credentials generated once
// in DataDir.
func (n *Node) serveRegistry(ctx context.Context) (registryPart, error) {
	const anyPort = "127.0.0.1:0"
	cfg := n.cfg
	addrFile := filepath.Join(cfg.DataDir, "registry.addr")
	listen := anyPort
	if b, err := os.ReadFile(addrFile); err == nil {
		listen = strings.TrimSpace(string(b))
	}
	var ropts []registry.Option
	if rs := cfg.RegistryS3; rs != nil {
		// distribution's driver does not create its bucket.
		if _, err := objstore.NewS3(ctx, objstore.S3Config{Endpoint: rs.Endpoint, Bucket: rs.Bucket,
			AccessKey: rs.AccessKey, SecretKey: rs.SecretKey, Secure: rs.Secure, Region: rs.Region}); err != nil {
			return registryPart{}, fmt.Errorf("registry bucket: %w", err)
		}
		ropts = append(ropts, registry.WithS3Storage(*rs))
	}
	files := registryFiles{Node: filepath.Join(cfg.DataDir, nodeCredentialFile), GC: filepath.Join(cfg.DataDir, gcCredentialFile)}
	access, err := files.loadOrCreate()
	if err != nil {
		return registryPart{}, err
	}
	ropts = append(ropts, registry.WithAccess(access))
	srv, err := registry.Serve(ctx, filepath.Join(cfg.DataDir, "registry"), listen, ropts...)
	if err != nil && listen != anyPort {
		cfg.Logger.Warn("registry address taken, choosing another", "addr", listen, "err", err)
		srv, err = registry.Serve(ctx, filepath.Join(cfg.DataDir, "registry"), anyPort, ropts...)
	}
	if err != nil {
		return registryPart{}, fmt.Errorf("embedded registry: %w", err)
	}
	n.onClose(srv.Close)
	r := registryPart{addr: srv.Addr(), files: files, sweeper: srv}
	if err := writeFileAtomic(addrFile, []byte(r.addr+"\n"), 0o600); err != nil {
		return r, err
	}
	n.components["registry"] = "embedded distribution v3 at " + r.addr
	return r, nil
}

// containerdPart is what the containerd and snapshotter step makes.
type containerdPart struct {
	addr   string          // containerd's socket
	lazy   string          // the lazy snapshotter containerd has; "" = overlayfs only
	daemon *runtime.Daemon // the embedded containerd; nil when external
	stargz *stargz.Process // the lazy snapshotter process; nil when not running
}

// startContainerd starts the lazy snapshotter and the embedded containerd
// that uses it, unless Config.Containerd names a containerd. Like
// PostgreSQL, both outlive envd; only Shutdown stops them.
func (n *Node) startContainerd(ctx context.Context, reg registryPart) (containerdPart, error) {
	cfg := n.cfg
	if err := n.checkRunc(ctx, "", runcChangelog); err != nil {
		return containerdPart{}, err
	}
	if cfg.Containerd != "" {
		n.components["containerd"] = "external at " + cfg.Containerd
		return containerdPart{addr: cfg.Containerd}, nil
	}
	// The lazy snapshotter is its own process, started before containerd,
	// which uses it as the proxy plugin stargz.Name. Without it (no FUSE,
	// say) every restore is a full pull for overlayfs.
	var c containerdPart
	var dopts []runtime.DaemonOption
	if cfg.DisableLazy {
		n.components["lazy snapshotter"] = "disabled"
	} else if sp, err := stargz.Start(ctx, "", filepath.Join(cfg.DataDir, "stargz"), []string{reg.addr}, reg.access.stargzOptions(reg.addr)...); err != nil {
		cfg.Logger.Warn("lazy snapshotter unavailable, restores pull images in full (overlayfs)", "err", err)
		n.components["lazy snapshotter"] = "unavailable: " + err.Error()
	} else {
		c.stargz, c.lazy = sp, stargz.Name
		dopts = append(dopts, runtime.WithProxySnapshotter(stargz.Name, sp.Socket()))
		n.components["lazy snapshotter"] = "embedded stargz at " + sp.Socket()
	}
	d, err := runtime.StartDaemon(ctx, filepath.Join(cfg.DataDir, "containerd"), dopts...)
	if err != nil {
		return c, fmt.Errorf("embedded containerd: %w", err)
	}
	c.daemon, c.addr = d, d.Address()
	n.components["containerd"] = "embedded at " + c.addr
	return c, nil
}

// runcChangelog is where Debian and Ubuntu install the changelog of their
// runc package (runtime.CheckRunc).
const runcChangelog = "/usr/share/doc/runc/changelog.Debian.gz"

// checkRunc refuses a runc without the CVE-2024-21626 fix (a warning
// instead with Config.AllowVulnerableRunc) and shows the runc in envd
// info. path "" = the runc the node's containerd runs (runtime.FindRunc;
// an external containerd is assumed to use the one on PATH too).
func (n *Node) checkRunc(ctx context.Context, path, changelog string) error {
	cfg := n.cfg
	if path == "" {
		var err error
		if path, err = runtime.FindRunc(""); err != nil {
			return err
		}
	}
	info, err := runtime.CheckRunc(ctx, path, changelog)
	if err != nil {
		return fmt.Errorf("runc: %w", err)
	}
	n.components["runc"] = fmt.Sprintf("%s %s (%s)", info.Path, info.Version, info.Why)
	if info.Fixed {
		return nil
	}
	if cfg.AllowVulnerableRunc {
		cfg.Logger.Error("runc lacks the fix of CVE-2024-21626: a tenant's image or exec can reach the host's filesystem; "+
			"starting anyway (--allow-vulnerable-runc)", "runc", info.Path, "version", info.Version, "why", info.Why)
		n.components["runc"] += "; VULNERABLE to CVE-2024-21626, allowed by --allow-vulnerable-runc"
		return nil
	}
	return fmt.Errorf("runc %s at %s lacks the fix of CVE-2024-21626 (%s): install runc %s or newer, or a distribution build that backports it "+
		"(Debian 12: 1.1.5+ds1-1+deb12u1), or start with --allow-vulnerable-runc (ENVD_ALLOW_VULNERABLE_RUNC=1) to run anyway: %w",
		info.Version, info.Path, info.Why, runtime.MinRuncVersion, errdefs.ErrFailedPrecondition)
}

// startRuntime connects the container runtime to containerd, with the
// node's network (instances never reach the node's own services) and
// registry credentials.
func (n *Node) startRuntime(ctx context.Context, db database, reg registryPart, ctrd containerdPart) (*runtime.Runtime, error) {
	cfg := n.cfg
	netCfg := networkFor(cfg.DataDir, clusterEndpoints(cfg, db.dsn, reg.addr))
	gw, err := n.egressGateway()
	if err != nil {
		return nil, err
	}
	if netCfg.Names = gw; netCfg.Names != nil {
		// Closed after the runtime (closers run last first).
		n.onClose(func(context.Context) error { return netCfg.Names.Close() })
	}
	rt, err := runtime.New(ctx, runtime.Config{
		Address: ctrd.addr, Namespace: cfg.Namespace, StateDir: filepath.Join(cfg.DataDir, "runtime"),
		Network:             netCfg,
		PlainHTTPRegistries: []string{reg.addr},
		RegistryCredentials: reg.access.nodeFor(reg.addr),
		LazySnapshotter:     ctrd.lazy,
		DisableDiskLimit:    cfg.DisableDiskLimit,
		DiskReserveBytes:    cfg.DiskReserveBytes,
		DiskOvercommit:      cfg.DiskOvercommit,
		ShimGroupSize:       cfg.ShimGroupSize,
		UserNS:              cfg.UserNS,
		DefaultClass:        runtime.Class(cfg.RuntimeClass),
		GVisorDir:           cfg.GVisorDir,
		Unrestricted:        cfg.Unrestricted,
	})
	if err != nil {
		return nil, fmt.Errorf("runtime: %w", err)
	}
	n.describeRuntime(rt)
	n.onClose(func(context.Context) error { return rt.Close() })
	return rt, nil
}

// describeRuntime reports what the runtime can and cannot do on this host:
// a feature it lacks is a warning at start, not a failure.
func (n *Node) describeRuntime(rt *runtime.Runtime) {
	cfg, log := n.cfg, n.cfg.Logger
	switch err := rt.DiskLimitErr(); {
	case cfg.DisableDiskLimit:
		n.components["disk limit"] = "disabled"
	case err != nil:
		log.Warn("writable-layer limits cannot be honoured: instances with one fail to start", "err", err)
		n.components["disk limit"] = "unavailable: " + err.Error()
	default:
		n.components["disk limit"] = fmt.Sprintf("ext4 image per instance, default %d bytes (0 = none)", cfg.DefaultLimits.DiskBytes)
	}
	if root, on := rt.UserNS(); on {
		n.components["user namespaces"] = fmt.Sprintf("on: instance root is host uid %d (%d ids); images pulled in full (no lazy restore)", root, runtime.UserNSSize)
	}
	if err := rt.AgentsOff(); err != nil {
		log.Warn("no exec agent: every command is a runc exec (about 80 ms more each)", "err", err)
		n.components["exec agent"] = "off: " + err.Error()
	} else {
		n.components["exec agent"] = "on: commands without a terminal start in the instance's agent (runc exec otherwise)"
	}
	classes := rt.Classes(context.Background())
	n.components["runtime classes"] = fmt.Sprintf("%v, default %s", classes, rt.DefaultClass())
	if err := rt.ClassErr(context.Background(), runtime.ClassGVisor); err != nil {
		log.Info("runtime class gvisor not available on this node", "err", err)
	}
	if cfg.Unrestricted {
		log.Warn("instances run without hardening, limits or network rules (benchmarks only)")
		n.components["hardening"] = "off (benchmarks only)"
	}
	if err := rt.LazyErr(); err != nil {
		log.Warn("lazy snapshotter not usable, restores pull images in full (overlayfs)", "err", err)
		n.components["lazy snapshotter"] = "unavailable: " + err.Error()
	}
}

// volumes is what the volumes step makes.
type volumes struct {
	manager *workspace.Manager
	objects objstore.Store // volume archives
}

// openVolumes opens the volume directories in DataDir/volumes and the
// object store of their archives: Config.S3, or DataDir/objects.
func (n *Node) openVolumes(ctx context.Context) (volumes, error) {
	var v volumes
	var err error
	if v.manager, err = workspace.NewManager(filepath.Join(n.cfg.DataDir, "volumes")); err != nil {
		return v, fmt.Errorf("volumes: %w", err)
	}
	if s3 := n.cfg.S3; s3 != nil {
		if v.objects, err = objstore.NewS3(ctx, *s3); err != nil {
			return v, fmt.Errorf("object store: %w", err)
		}
		n.components["objects"] = "s3 " + s3.Endpoint + "/" + s3.Bucket
	} else {
		dir := filepath.Join(n.cfg.DataDir, "objects")
		if v.objects, err = objstore.NewDir(dir); err != nil {
			return v, fmt.Errorf("object store: %w", err)
		}
		n.components["objects"] = "directory " + dir
	}
	return v, nil
}

// newService makes the core from the parts; Start starts it after the
// admin token exists.
func (n *Node) newService(db database, reg registryPart, rt *runtime.Runtime, v volumes) (*envd.Service, error) {
	cfg := n.cfg
	key, err := secretKey(cfg.DataDir, cfg.SecretKeyFile)
	if err != nil {
		return nil, err
	}
	svc, err := envd.New(envd.Config{
		Node: cfg.Node, WorkDir: filepath.Join(cfg.DataDir, "work"), DataDir: cfg.DataDir,
		DefaultTTL: cfg.DefaultTTL, MaxTTL: cfg.MaxTTL, Components: n.components, Logger: cfg.Logger,
		Volumes: v.manager, Objects: v.objects, HibernateAfter: cfg.HibernateAfter, PrefetchWindow: cfg.PrefetchWindow, ReconcileInterval: cfg.ReconcileInterval,
		Sweeper: reg.sweeper, DefaultLimits: cfg.DefaultLimits, BuildEgress: cfg.BuildEgress, BuildKit: n.buildKit(),
		Limits: cfg.Limits, Observer: n.metrics,
		Dials: cfg.Dials, ThreadHighWater: cfg.threadHighWater(),
		IdleAfter: cfg.IdleAfter, IdleAction: cfg.IdleAction, WakeWait: cfg.WakeWait, IdleInterval: cfg.IdleInterval, ActivityFlush: cfg.ActivityFlush,
		MaxFileBytes:       cfg.MaxFileBytes,
		MemoryRestore:      cfg.MemoryRestore,
		RolloutConcurrency: cfg.RolloutConcurrency,
		SquashAfter:        cfg.SquashAfter,
		Cluster:            n.clusterConfig(db, reg),
		SecretKey:          key,
		Webhooks:           webhookConfig(cfg),
	}, db.store, reg.client, rt)
	if err != nil {
		return nil, err
	}
	n.onClose(func(context.Context) error { svc.Close(); return nil })
	n.egress.svc.Store(svc)
	return svc, nil
}

// adminToken is the admin's API token: created once and kept in
// DataDir/admin.token (0600), so envctl keeps working across restarts, and
// made an admin token in the store at every start. A node that logs in
// with a node's database role (it joined with a join token) may not make
// tokens: it has none, and "" is its token.
func (n *Node) adminToken(ctx context.Context, db database) (string, error) {
	if admin, err := db.store.Nodes.AdminRole(ctx); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	} else if !admin {
		n.cfg.Logger.Info("this node uses a node's database role: it makes no admin token; use a token made on a node with the admin's role")
		return "", nil
	}
	tokenFile := filepath.Join(n.cfg.DataDir, "admin.token")
	token, err := persisted(tokenFile, func() string { return randomHex(32) })
	if err != nil {
		return "", err
	}
	if err := os.Chmod(tokenFile, 0o600); err != nil {
		return "", err
	}
	if err := db.store.Access.EnsureAdminToken(ctx, "admin", token); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	return token, nil
}

// serveAPI listens on Config.Listen, writes the URL to DataDir/envd.url
// and serves svc's API there, with TLS as setupTLS decides (tls.go);
// Drain and Close stop it.
func (n *Node) serveAPI(svc *envd.Service) (url string, err error) {
	kctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	key, err := svc.Parts().Cluster.ClusterKey(kctx)
	cancel()
	if err != nil {
		return "", fmt.Errorf("cluster key: %w", err)
	}
	n.peers = newPeerTransports(svc.Parts().Cluster.NodeCertificate)
	parts := APIParts(svc)
	h, err := api.New(parts, append(append(n.apiMetrics(), n.apiSSH()...), api.WithLogger(n.cfg.Logger), api.WithReadiness(n.readiness()),
		api.WithPreviewDomain(n.cfg.PreviewDomain), api.WithForwardKey(key), api.WithPeerTransport(n.peers.transport))...)
	if err != nil {
		return "", err
	}
	if n.cfg.WrapAPI != nil {
		h = n.cfg.WrapAPI(h)
	}
	h = apimcp.Mount(h, n.mcpClients(&url), envd.BuildVersion)                  // /mcp: MCP tools, a client of this API with the caller's token
	h = n.e2bServer(&url).Mount(h)                                              // /e2b: the E2B-compatible API, a client of this API too
	h = api.PreviewHosts(parts, n.cfg.PreviewDomain, h, key, n.peers.transport) // preview hosts are the instances', not the API's
	ln, err := net.Listen("tcp", n.cfg.Listen)
	if err != nil {
		return "", fmt.Errorf("listen %s: %w", n.cfg.Listen, err)
	}
	if n.tls, err = n.setupTLS(); err != nil {
		ln.Close()
		return "", err
	}
	url = n.apiURL(ln.Addr())
	if n.tls.config != nil {
		ln = tls.NewListener(ln, n.tls.config)
	}
	if err := writeFileAtomic(filepath.Join(n.cfg.DataDir, "envd.url"), []byte(url+"\n"), 0o600); err != nil {
		ln.Close()
		return "", err
	}
	n.srv = newHTTPServer(h)
	go func() {
		if err := n.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			n.cfg.Logger.Error("api server", "err", err)
		}
	}()
	return url, nil
}

// webhookConfig is cfg.Webhooks with every node's instance subnets denied:
// the runtime's default range and the ranges networkFor derives from data
// dirs (10.200.0.0/16 to 10.249.0.0/16), so that no hook reaches an
// instance of this node or another.
func webhookConfig(cfg Config) envd.WebhookConfig {
	wc := cfg.Webhooks
	wc.DenyNets = append(slices.Clone(wc.DenyNets), netip.MustParsePrefix("10.89.0.0/16"))
	for b := 200; b < 250; b++ {
		wc.DenyNets = append(wc.DenyNets, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(b), 0, 0}), 16))
	}
	return wc
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

// startBuildKit starts buildkitd for Dockerfile builds, its cache in
// DataDir/buildkit (kept between builds and restarts). Without it the node
// runs and refuses Dockerfile builds with the reason (Info's components).
func (n *Node) startBuildKit(ctx context.Context, reg registryPart) {
	cfg := buildkit.Config{Dir: filepath.Join(n.cfg.DataDir, "buildkit"), Bin: buildkitBin,
		Registry: reg.addr, PlainHTTP: n.cfg.Registry == "", Credential: reg.access.Node, Log: n.cfg.Logger}
	if n.rt != nil && n.rt.AgentBinary() != "" {
		cfg.Network, cfg.Plugin = buildNetwork{n.rt}, n.rt.AgentBinary()
	}
	bk, err := buildkit.Start(ctx, cfg)
	if err != nil {
		n.cfg.Logger.Warn("BuildKit unavailable: Dockerfile builds are refused", "err", err)
		n.components["buildkit"] = "unavailable: " + err.Error()
		return
	}
	if cfg.Network != nil {
		// Start stopped the BuildKit of an earlier life of this node, if
		// one was left: its RUN steps' attachments are stale.
		if err := n.rt.DetachStaleNetNS(ctx, buildkit.StepIDPrefix); err != nil {
			n.cfg.Logger.Warn("remove the network of an earlier BuildKit's steps", "err", err)
		}
	}
	n.bk = bk
	n.components["buildkit"] = "buildkitd at " + bk.Socket()
	n.onClose(bk.Stop)
}

// buildNetwork attaches BuildKit's RUN steps like instances: on the
// runtime's bridge, behind its firewall, each step alone (Isolated).
type buildNetwork struct{ rt *runtime.Runtime }

func (b buildNetwork) Attach(ctx context.Context, id, netns string, g buildkit.Grant) ([]byte, error) {
	eg, err := runtime.ParseEgress(g.Egress)
	if err != nil {
		return nil, err
	}
	return b.rt.AttachNetNS(ctx, id, netns, runtime.NetworkPolicy{Group: g.Group, Isolated: true, Egress: eg})
}

func (b buildNetwork) Detach(ctx context.Context, id, netns string) error {
	return b.rt.DetachNetNS(ctx, id, netns)
}

// buildkitBin is where scripts/setup.sh installs buildkitd and buildctl.
const buildkitBin = "/usr/local/lib/envd/bin"

// buildKit is the node's BuildKit as the builder takes it: nil, not a nil
// pointer, when there is none.
func (n *Node) buildKit() builder.BuildKit {
	if n.bk == nil {
		return nil
	}
	return n.bk
}
