// Package node is envd's composition root: it starts (or connects to) the
// parts a node needs, PostgreSQL, the registry, containerd, and serves the
// API. `envd up` runs it on embedded defaults under one data dir; `envd serve`
// takes external parts. It lives apart from package envd because it wires
// api/, which imports envd.
package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"

	"github.com/envd-dev/envd/builder/buildkit"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/metrics"
	"github.com/envd-dev/envd/internal/atomicfile"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/sshd"
)

// Config of a node. Empty external addresses mean "embedded, under DataDir".
type Config struct {
	DataDir string
	Listen  string // API address; default DefaultListen, the chosen one is written to DataDir/envd.url
	Node    string // default: persisted in DataDir/node

	DSN        string // external PostgreSQL; "" = private cluster in DataDir/pg
	Registry   string // external registry host:port (plain HTTP); "" = embedded in DataDir/registry
	Containerd string // external containerd socket; "" = private daemon in DataDir/containerd
	Namespace  string // containerd namespace; default DefaultNamespace

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

	DefaultTTL     time.Duration // default DefaultTTL
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
	// Logger is where the node logs, the API's access log included; nil =
	// a logger of LogFormat on stderr, or slog.Default() when LogFormat is
	// "" too.
	Logger *slog.Logger
	// LogFormat is LogText or LogJSON (NewLogger).
	LogFormat string
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
	// DiskOvercommit provisions writable-layer limits thinly: a new
	// instance sets aside 1/DiskOvercommit of the room limited layers may
	// still fill, measured against the disk's real free space
	// (runtime.Config.DiskOvercommit), and placement offers this many
	// times the data dir's disk when Capacity.DiskBytes is not given. 0 =
	// runtime.DefaultDiskOvercommit (10); 1 = every limit fully reserved.
	DiskOvercommit float64
	// MemoryOvercommit: placement offers this many times the host's
	// memory to the memory limits of instances when Capacity.MemoryBytes
	// is not given (a limit is a ceiling, idle environments use little of
	// it; the kernel's per-instance OOM killer acts on real use). 0 =
	// DefaultMemoryOvercommit; 1 = limits fully reserved.
	MemoryOvercommit float64
	// ShimGroupSize is how many of one tenant's instances share a
	// containerd shim process at most (runtime.Config.ShimGroupSize): a
	// shim's death fails that many at most, all of one tenant. 0 =
	// runtime.DefaultShimGroupSize (1, a shim per instance; grouping is opt-in).
	ShimGroupSize int
	// UserNS runs instances in a user namespace (runtime.Config.UserNS):
	// images are pulled in full (no lazy restore).
	UserNS bool
	// RuntimeClass is the runtime class of instances that name none
	// (runtime.Config.DefaultClass): "runc" (default) or "gvisor"; Start
	// fails when the node cannot run it.
	RuntimeClass string
	// MemoryRestore is how a resume on this node gets its checkpoint's
	// memory image (envd.Config.MemoryRestore): "full" (default) or
	// "lazy".
	MemoryRestore string
	// GVisorDir holds runsc (runtime.Config.GVisorDir); default
	// $ENVD_GVISOR_DIR, else where scripts/setup.sh installs it.
	GVisorDir string
	// Unrestricted is for benchmarks only: it turns off hardening, limits
	// and network rules (runtime.Config.Unrestricted).
	Unrestricted bool
	// AllowVulnerableRunc starts the node, with a warning, on a runc
	// without the CVE-2024-21626 fix (runtime.CheckRunc); default false:
	// Start refuses it.
	AllowVulnerableRunc bool

	// InstanceDeny are more cluster endpoints instances must never reach,
	// as CIDR, IP, HOST, IP:PORT or HOST:PORT, besides those the node
	// itself uses (PostgreSQL, the registry, S3) and the other nodes of the
	// node table (envd.ClusterConfig.Peers), which are always denied.
	InstanceDeny []string
	// BuildEgress is build containers' egress policy (default open); see
	// envd.Config.BuildEgress.
	BuildEgress string
	// EgressResolvers are the upstream DNS servers (host or host:port) of
	// the egress gateway that enforces allow lists naming hosts; default:
	// the nameservers of /etc/resolv.conf.
	EgressResolvers []string
	// SecretKeyFile holds the key (64 hex digits) that seals the tenants'
	// brokered secrets; default DataDir/secret.key, made on first start.
	SecretKeyFile string
	// EgressCAFile holds the CA (certificate and private key, PEM) whose
	// certificates the egress proxy presents for hosts with an HTTPS secret
	// binding; instances trust its certificate, never see its key. Default
	// DataDir/egress-ca.pem, made on first start (mode 0600). Give every
	// node of a cluster the same file so that an instance moved or resumed
	// elsewhere keeps trusting it.
	EgressCAFile string
	// EgressUpstreamCAFile holds more roots (PEM) the egress proxy trusts,
	// beside the system's, when it verifies the real certificate of a host
	// it terminates TLS for. Default: none.
	EgressUpstreamCAFile string

	// Limits bound one tenant's concurrent saves, builds, exec and event
	// streams on this node; zero fields take envd.DefaultTenantLimits.
	Limits envd.TenantLimits

	// Dials bound connections to instances' ports being opened, per tenant
	// and per node; zero fields take envd.DefaultDialLimits.
	Dials envd.DialLimits
	// MaxThreads is the process's OS thread limit (debug.SetMaxThreads:
	// past it the Go runtime aborts the process), set by Start; 0 =
	// DefaultMaxThreads. ThreadHighWater is where the node stops admitting
	// new thread-consuming work (envd.Config.ThreadHighWater); 0 = half of
	// MaxThreads, negative = no guard.
	MaxThreads, ThreadHighWater int

	// TLSCert and TLSKey are PEM files the API serves TLS with (both or
	// neither). Without them the API is plain HTTP on a loopback Listen and
	// TLS with a self-signed certificate of the node's (DataDir/tls)
	// anywhere else (tls.go).
	TLSCert, TLSKey string
	// ShutdownGrace is how long Drain waits for requests in flight and
	// running operations; default DefaultShutdownGrace, negative = no wait.
	ShutdownGrace time.Duration
	// WrapAPI, when set, wraps the API's handler (tests validate every
	// request and answer against docs/openapi.yaml with it); nil = none.
	WrapAPI func(http.Handler) http.Handler
	// MetricsListen serves /metrics alone, without a token, on a second
	// plain-HTTP address (for a private network); "" = none. The API's
	// /metrics takes the admin token or DataDir/metrics.token either way.
	MetricsListen string
	// SSHListen is the SSH endpoint's address (ssh.go); "" = none.
	// DefaultConfig gives DefaultSSHListen.
	SSHListen string

	// Idle stop and wake (envd.Config): the default idle setting of
	// projects (0 = never), its action (stop), the wake wait (60s); the
	// idle reaper's and the activity flush's intervals (10s; tests
	// shorten them).
	IdleAfter     time.Duration
	IdleAction    string
	WakeWait      time.Duration
	IdleInterval  time.Duration
	ActivityFlush time.Duration
	// PreviewDomain serves instance ports on the API's listener at
	// {port}-{instance}.PreviewDomain (api.PreviewHosts); "" = none.
	PreviewDomain string
	// MaxFileBytes bounds one file write or archive upload of the file
	// API; 0 = envd.DefaultMaxFileBytes.
	MaxFileBytes int64
	// RolloutConcurrency is the most rollout migrations this node runs at
	// once; 0 = rollout.DefaultConcurrency (2).
	RolloutConcurrency int
	// Webhooks is how tenants' webhooks are delivered (envd.WebhookConfig;
	// zero fields take its defaults). AllowLoopback lets hooks reach
	// loopback receivers (tests, on-premises); instance subnets are always
	// refused (instanceNets adds them to DenyNets).
	Webhooks envd.WebhookConfig
	// SquashAfter is the layer depth past which versions that instances
	// build on are squashed in the background; 0 = never. DefaultConfig
	// gives DefaultSquashAfter.
	SquashAfter int
	// Cluster membership (envd.ClusterConfig): the lease (0 =
	// envd.DefaultLease, 15s), how often lost nodes are looked for (0 =
	// envd.DefaultSweepInterval, 5s), the node's labels for node_selector,
	// and its capacity (zero fields: read from the host).
	Lease         time.Duration
	SweepInterval time.Duration
	Labels        map[string]string
	Capacity      types.NodeCapacity
	// Placement is envd.PlacementSpread (default: the cluster policy) or
	// envd.PlacementLocal (the instances asked here run here whenever this
	// node can take them).
	Placement string
}

// The defaults of a node, in one place: DefaultConfig gathers them for
// cmd/envd's flags and ENVD_* variables, and Start fills zero fields from
// the same values.
const (
	// DefaultListen is the API address: loopback, a free port (the chosen
	// one is written to DataDir/envd.url).
	DefaultListen = "127.0.0.1:0"
	// DefaultNamespace is the containerd namespace of the node's images
	// and containers.
	DefaultNamespace = "envd"
	// DefaultTTL is an instance's lifetime when its client asks for none.
	DefaultTTL = envd.DefaultTTL
	// DefaultS3Bucket and DefaultRegistryS3Bucket are the buckets `envd
	// serve` names in Config.S3 and Config.RegistryS3 when given none.
	DefaultS3Bucket         = "envd"
	DefaultRegistryS3Bucket = "envd-registry"
	// DefaultLogFormat is how `envd up` and `envd serve` log.
	DefaultLogFormat = LogText
	// DefaultShutdownGrace is how long a stopping node lets requests and
	// operations in flight finish (Drain).
	DefaultShutdownGrace = 30 * time.Second
	// DefaultSquashAfter: a version deeper than this many layers is
	// squashed (docs/BENCHMARKS.md, "Squash").
	DefaultSquashAfter = 10
	// DefaultMemory is the memory limit of instances whose project sets
	// none (`envd up --default-memory`): enough for a compiler or a
	// language server, and a ceiling on what one runaway instance takes
	// from its neighbours.
	DefaultMemory = 2 << 30
	// DefaultMemoryOvercommit is Config.MemoryOvercommit's default.
	DefaultMemoryOvercommit = 10.0
)

// The formats of NewLogger.
const (
	LogText = "text" // slog's key=value lines
	LogJSON = "json" // one JSON object a line
)

// NewLogger is a node's logger: records of level Info and above written
// to w in format, LogText or LogJSON.
func NewLogger(w io.Writer, format string) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	switch format {
	case LogText:
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case LogJSON:
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q: must be %s or %s: %w", format, LogText, LogJSON, errdefs.ErrInvalidArgument)
}

// DefaultConfig is what `envd up` runs with when given no flag or ENVD_*
// variable: every part embedded under DefaultDataDir. Start fills a zero
// DataDir, Listen, Namespace and DefaultTTL from the same values; fields
// whose zero value has a meaning of its own (DefaultLimits: no limit) are
// left as given, so a Config written by hand runs without the instance
// limits the command applies.
func DefaultConfig() Config {
	return Config{
		DataDir:     DefaultDataDir(),
		Listen:      DefaultListen,
		Namespace:   DefaultNamespace,
		DefaultTTL:  DefaultTTL,
		BuildEgress: string(runtime.EgressOpen),
		LogFormat:   DefaultLogFormat,
		// What envd up gives instances whose project sets no limit.
		DefaultLimits:    types.Limits{MemoryBytes: DefaultMemory, Pids: 4096, DiskBytes: 10 << 30},
		DiskOvercommit:   runtime.DefaultDiskOvercommit,
		MemoryOvercommit: DefaultMemoryOvercommit,
		ShimGroupSize:    runtime.DefaultShimGroupSize,
		Limits:           envd.DefaultTenantLimits,
		ShutdownGrace:    DefaultShutdownGrace,
		SSHListen:        DefaultSSHListen,
		IdleAction:       types.IdleActionStop,
		WakeWait:         envd.DefaultWakeWait,
		SquashAfter:      DefaultSquashAfter,
		Lease:            envd.DefaultLease,
		SweepInterval:    envd.DefaultSweepInterval,
		Placement:        envd.PlacementSpread,
	}
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
	// ScrapeToken is the token of the API's /metrics (DataDir/metrics.token);
	// MetricsURL the URL of Config.MetricsListen's /metrics, if any.
	ScrapeToken, MetricsURL string
	metrics                 *metrics.Metrics
	egress                  egressHooks

	// What the steps of Start made, in their order (steps.go).
	db   database
	reg  registryPart
	ctrd containerdPart
	bk   *buildkit.BuildKit // nil = no Dockerfile builds on this node
	rt   *runtime.Runtime
	vols volumes
	srv  *http.Server
	tls  apiTLS // zero when the API is plain HTTP
	// peers is how the API reaches the other nodes (peers.go).
	peers *peerTransports

	components map[string]string // each part as envd info shows it
	closers    []func(context.Context) error

	ssh     *sshd.Server // ssh.go; nil = none
	sshInfo *types.SSHInfo
}

// Start brings the node up and starts serving; Close or Shutdown end it.
// Each step (steps.go) takes what the earlier ones made and registers the
// cleanup of what it starts with onClose; when a step fails, Close undoes
// the steps done so far, last first. The embedded PostgreSQL, containerd
// and lazy snapshotter are not stopped then, as on Close: a restart finds
// them, and Shutdown stops them.
func Start(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg, err = withDefaults(cfg); err != nil {
		return nil, err
	}
	if hw := cfg.threadHighWater(); hw >= cfg.maxThreads() {
		return nil, fmt.Errorf("thread high-water mark %d must be below the thread limit %d: %w", hw, cfg.maxThreads(), errdefs.ErrInvalidArgument)
	}
	debug.SetMaxThreads(cfg.maxThreads())
	n := &Node{cfg: cfg, components: map[string]string{}}
	defer func() {
		if err != nil {
			n.Close(context.WithoutCancel(ctx))
		}
	}()
	if n.db, err = n.startPostgreSQL(ctx); err != nil {
		return nil, err
	}
	if n.reg, err = n.startRegistry(ctx); err != nil {
		return nil, err
	}
	if n.ctrd, err = n.startContainerd(ctx, n.reg); err != nil {
		return nil, err
	}
	if n.rt, err = n.startRuntime(ctx, n.db, n.reg, n.ctrd); err != nil {
		return nil, err
	}
	if n.vols, err = n.openVolumes(ctx); err != nil {
		return nil, err
	}
	if n.metrics, n.ScrapeToken, err = n.newMetrics(n.db); err != nil {
		return nil, err
	}
	n.startBuildKit(ctx, n.reg)
	if n.Service, err = n.newService(n.db, n.reg, n.rt, n.vols); err != nil {
		return nil, err
	}
	if n.Token, err = n.adminToken(ctx, n.db); err != nil {
		return nil, err
	}
	if err := n.Service.Start(ctx); err != nil {
		return nil, err
	}
	n.protectFromOOM()
	n.reportCgroupLimits()
	if err := n.startSSH(ctx); err != nil {
		return nil, err
	}
	if n.URL, err = n.serveAPI(n.Service); err != nil {
		return nil, err
	}
	// Other nodes forward requests about this node's instances here.
	if err := n.Service.Parts().Cluster.RegisterNode(ctx, n.URL); err != nil {
		return nil, err
	}
	n.onClose(func(ctx context.Context) error { n.Service.Parts().Cluster.LeaveCluster(ctx); return nil })
	if n.MetricsURL, err = n.serveMetrics(); err != nil {
		return nil, err
	}
	cfg.Logger.Info("envd node up", "node", cfg.Node, "url", n.URL, "data_dir", cfg.DataDir, "registry", n.reg.addr, "containerd", n.ctrd.addr)
	return n, nil
}

// withDefaults fills cfg's zero fields (DefaultConfig), makes its paths
// absolute, names the node once (kept in DataDir/node) and takes the
// external parts an earlier start recorded (rememberParts).
func withDefaults(cfg Config) (_ Config, err error) {
	d := DefaultConfig()
	if cfg.DataDir == "" {
		cfg.DataDir = d.DataDir
	}
	if cfg.DataDir, err = filepath.Abs(cfg.DataDir); err != nil {
		return cfg, err
	}
	if cfg.Listen == "" {
		cfg.Listen = d.Listen
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return cfg, errors.New("a TLS certificate and its key go together: give both or neither")
	}
	for _, f := range []*string{&cfg.RegistryCredentialFile, &cfg.RegistryGCCredentialFile, &cfg.TLSCert, &cfg.TLSKey} {
		if *f != "" {
			if *f, err = filepath.Abs(*f); err != nil {
				return cfg, err
			}
		}
	}
	if cfg.Namespace == "" {
		cfg.Namespace = d.Namespace
	}
	if cfg.DefaultTTL == 0 {
		cfg.DefaultTTL = d.DefaultTTL
	}
	if cfg.Logger == nil && cfg.LogFormat != "" {
		if cfg.Logger, err = NewLogger(os.Stderr, cfg.LogFormat); err != nil {
			return cfg, err
		}
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = d.ShutdownGrace
	}
	if cfg.DiskOvercommit == 0 {
		cfg.DiskOvercommit = d.DiskOvercommit
	}
	if cfg.MemoryOvercommit == 0 {
		cfg.MemoryOvercommit = d.MemoryOvercommit
	}
	if cfg.ShimGroupSize < 0 {
		return cfg, fmt.Errorf("shim group size %d: 1 or more (0 = the default): %w", cfg.ShimGroupSize, errdefs.ErrInvalidArgument)
	}
	if cfg.DiskOvercommit < 1 || cfg.MemoryOvercommit < 1 {
		return cfg, fmt.Errorf("disk overcommit %g, memory overcommit %g: each 1 or more: %w", cfg.DiskOvercommit, cfg.MemoryOvercommit, errdefs.ErrInvalidArgument)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return cfg, err
	}
	if cfg.Node == "" {
		if cfg.Node, err = persisted(filepath.Join(cfg.DataDir, "node"), func() string {
			h, _ := os.Hostname()
			return fmt.Sprintf("%s-%s", sanitize(h), randomHex(3))
		}); err != nil {
			return cfg, err
		}
	}
	return cfg, rememberParts(&cfg)
}

// onClose registers the cleanup of what a step started; Close runs them
// last first.
func (n *Node) onClose(f func(context.Context) error) { n.closers = append(n.closers, f) }

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
func (n *Node) DSN() string { return n.db.dsn }

// RegistryAddr is the host:port of the registry the node uses.
func (n *Node) RegistryAddr() string { return n.reg.addr }

// RegistryClient is the node's client of its registry, with its credentials.
func (n *Node) RegistryClient() *registry.Client { return n.reg.client }

// RegistryCredentialFiles are the files holding the node's registry
// credentials: the node's (pull and push) and the GC's (also delete); ""
// for one the node has none of.
func (n *Node) RegistryCredentialFiles() (node, gc string) { return n.reg.files.Node, n.reg.files.GC }

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
	if n.vols.manager != nil {
		if err := n.vols.manager.Detach(ctx); err != nil {
			n.cfg.Logger.Warn("unmount volumes", "err", err)
		}
	}
	if n.ctrd.daemon != nil {
		if err := n.ctrd.daemon.Stop(ctx); err != nil {
			n.cfg.Logger.Warn("stop containerd", "err", err)
		}
	}
	// After the containers: their lower layers are its FUSE mounts.
	if n.ctrd.stargz != nil {
		if err := n.ctrd.stargz.Stop(ctx); err != nil {
			n.cfg.Logger.Warn("stop lazy snapshotter", "err", err)
		}
	}
	if n.db.server != nil {
		if err := n.db.server.Stop(ctx); err != nil {
			n.cfg.Logger.Warn("stop postgresql", "err", err)
		}
	}
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

// DefaultMaxThreads is the default Config.MaxThreads: the Go runtime's own
// default, now chosen rather than inherited, with the node's thread guard
// at half of it.
const DefaultMaxThreads = 10000

func (c Config) maxThreads() int {
	if c.MaxThreads > 0 {
		return c.MaxThreads
	}
	return DefaultMaxThreads
}

func (c Config) threadHighWater() int {
	if c.ThreadHighWater != 0 {
		return c.ThreadHighWater
	}
	return c.maxThreads() / 2
}
