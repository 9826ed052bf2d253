// Command envd runs an envd node: `envd up` on embedded defaults (private
// containerd, registry and PostgreSQL under one data dir), `envd serve` with
// external parts given by flag or ENVD_* environment variable.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/snapshotter/stargz"
)

func main() {
	if err := root().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "envd:", err)
		os.Exit(1)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// envBool is whether the environment variable name is "1", def when unset.
func envBool(name string, def bool) bool {
	if v := os.Getenv(name); v != "" {
		return v == "1"
	}
	return def
}

func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// envInt is the integer in the environment variable name, def when unset;
// a value that is not a number is remembered and reported by run.
func (f *flags) envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		f.envErrs = append(f.envErrs, fmt.Errorf("%s=%q: not an integer", name, v))
		return def
	}
	return n
}

// envDuration is the duration in the environment variable name, def when
// unset; a value that is not a duration is remembered and reported by run.
func (f *flags) envDuration(name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		f.envErrs = append(f.envErrs, fmt.Errorf("%s=%q: not a duration", name, v))
		return def
	}
	return d
}

func root() *cobra.Command {
	cmd := &cobra.Command{Use: "envd", Short: "keeps per-project development environments alive and versioned", SilenceUsage: true, SilenceErrors: true}
	cmd.AddCommand(upCmd(), serveCmd(), downCmd(), snapshotterCmd(), &cobra.Command{
		Use: "version", Short: "print the version",
		Run: func(*cobra.Command, []string) { fmt.Println(envd.BuildVersion) },
	})
	cmd.AddCommand(registryCmd(), mcpCmd())
	return cmd
}

// flags turn the command line and ENVD_* variables into a node.Config;
// every default comes from node.DefaultConfig.
type flags struct {
	cfg     node.Config
	s3      objstore.S3Config
	regS3   registry.S3Storage
	limits  limitFlags
	envErrs []error
	cluster clusterFlags
	join    joinFlags

	fs         *pflag.FlagSet // the command's flags, which the config file sets
	configFile string
}

func (f *flags) register(cmd *cobra.Command, external bool) {
	fl := cmd.Flags()
	d := node.DefaultConfig()
	f.cfg = d // fields without a flag here (up's Namespace) keep the default
	fl.StringVar(&f.cfg.DataDir, "data-dir", env("ENVD_DATA_DIR", d.DataDir), "data directory (ENVD_DATA_DIR)")
	fl.StringVar(&f.cfg.Listen, "listen", env("ENVD_LISTEN", d.Listen), "API listen address; the chosen one is written to DATA_DIR/envd.url (ENVD_LISTEN)")
	fl.StringVar(&f.cfg.LogFormat, "log-format", env("ENVD_LOG_FORMAT", d.LogFormat), "log format: text (key=value lines) or json (one object a line) (ENVD_LOG_FORMAT)")
	fl.StringVar(&f.cfg.Node, "node", env("ENVD_NODE", d.Node), "node name (default: generated once, kept in DATA_DIR/node) (ENVD_NODE)")
	fl.StringVar(&f.cfg.MetricsListen, "metrics-listen", env("ENVD_METRICS_LISTEN", d.MetricsListen), "also serve /metrics alone, without a token, on this plain-HTTP address (a private network's); the API's /metrics takes the admin token or DATA_DIR/metrics.token (ENVD_METRICS_LISTEN)")
	fl.DurationVar(&f.cfg.DefaultTTL, "default-ttl", f.envDuration("ENVD_DEFAULT_TTL", d.DefaultTTL), "instance lifetime when none is asked (ENVD_DEFAULT_TTL)")
	fl.DurationVar(&f.cfg.MaxTTL, "max-ttl", f.envDuration("ENVD_MAX_TTL", d.MaxTTL), "longest instance lifetime a client may ask, 0 = no limit (ENVD_MAX_TTL)")
	fl.StringSliceVar(&f.cfg.InstanceDeny, "instance-deny", splitList(env("ENVD_INSTANCE_DENY", strings.Join(d.InstanceDeny, ","))), "cluster endpoints instances never reach besides PostgreSQL, the registry, S3 and the other nodes in the node table (denied by themselves): CIDR, IP, HOST, IP:PORT or HOST:PORT, comma-separated (ENVD_INSTANCE_DENY)")
	fl.StringSliceVar(&f.cfg.EgressResolvers, "egress-resolver", splitList(env("ENVD_EGRESS_RESOLVER", "")), "upstream DNS servers (HOST or HOST:PORT, comma-separated) of the egress gateway that enforces egress by host name; default: the nameservers of /etc/resolv.conf (ENVD_EGRESS_RESOLVER)")
	fl.StringVar(&f.cfg.SecretKeyFile, "secret-key-file", env("ENVD_SECRET_KEY_FILE", ""), "file holding the key (64 hex digits) that seals brokered secrets; the same on every node of a cluster; default DATA/secret.key, made on first start (ENVD_SECRET_KEY_FILE)")
	fl.StringVar(&f.cfg.EgressCAFile, "egress-ca-file", env("ENVD_EGRESS_CA_FILE", ""), "file holding the CA (certificate and private key, PEM) whose certificates the egress proxy presents for hosts with an HTTPS secret binding; the same on every node of a cluster; default DATA/egress-ca.pem, made on first start (ENVD_EGRESS_CA_FILE)")
	fl.StringVar(&f.cfg.EgressUpstreamCAFile, "egress-upstream-ca-file", env("ENVD_EGRESS_UPSTREAM_CA_FILE", ""), "file of more root certificates (PEM) the egress proxy trusts, beside the system's, when it verifies hosts it terminates TLS for (ENVD_EGRESS_UPSTREAM_CA_FILE)")
	fl.StringVar(&f.cfg.BuildEgress, "build-egress", env("ENVD_BUILD_EGRESS", d.BuildEgress), "egress policy of build containers, whatever their project's: open, none or allow:CIDR|HOST,... (ENVD_BUILD_EGRESS)")
	fl.DurationVar(&f.cfg.HibernateAfter, "hibernate-after", f.envDuration("ENVD_HIBERNATE_AFTER", d.HibernateAfter), "save and free the layer of a retained instance stopped this long, 0 = never (ENVD_HIBERNATE_AFTER)")
	f.limits.register(fl, d.DefaultLimits)
	f.limits.registerDensity(fl, d)
	fl.BoolVar(&f.cfg.UserNS, "userns", envBool("ENVD_USERNS", d.UserNS), "run instances in a user namespace (root inside is an unprivileged host id); costs: images are pulled in full (no lazy restore) and chowned once per image on the node; see docs/notes/isolation.md (ENVD_USERNS=1)")
	fl.StringVar(&f.cfg.RuntimeClass, "runtime-class", env("ENVD_RUNTIME_CLASS", d.RuntimeClass), "runtime class of instances: runc (the node's kernel) or gvisor (gVisor's user-space kernel; runsc from scripts/setup.sh in /usr/local/lib/envd/gvisor or $ENVD_GVISOR_DIR); the node does not start when it cannot run it; see docs/gvisor.md (ENVD_RUNTIME_CLASS)")
	fl.StringVar(&f.cfg.MemoryRestore, "memory-restore", env("ENVD_MEMORY_RESTORE", d.MemoryRestore), "how a resume with memory gets its checkpoint's memory image: full (pull it whole, then restore) or lazy (restore at once from a FUSE file whose chunks are fetched as read and in the background; gvisor class); see docs/notes/running-state.md (ENVD_MEMORY_RESTORE)")
	fl.BoolVar(&f.cfg.AllowVulnerableRunc, "allow-vulnerable-runc", envBool("ENVD_ALLOW_VULNERABLE_RUNC", d.AllowVulnerableRunc), "start even when runc lacks the fix of CVE-2024-21626 (older than 1.1.12 and no distribution backport in its changelog), with an error in the log; never on a node tenants use (ENVD_ALLOW_VULNERABLE_RUNC=1)")
	fl.BoolVar(&f.cfg.DisableDiskLimit, "no-disk-limit", envBool("ENVD_NO_DISK_LIMIT", d.DisableDiskLimit), "ignore writable-layer limits: layers are bounded only by the node's disk (ENVD_NO_DISK_LIMIT=1)")
	fl.IntVar(&f.cfg.Limits.Saves, "max-saves-per-tenant", f.envInt("ENVD_MAX_SAVES_PER_TENANT", d.Limits.Saves), "concurrent save operations per tenant on this node, past them 429; negative = unlimited (ENVD_MAX_SAVES_PER_TENANT)")
	fl.IntVar(&f.cfg.Limits.Builds, "max-builds-per-tenant", f.envInt("ENVD_MAX_BUILDS_PER_TENANT", d.Limits.Builds), "concurrent build operations per tenant on this node; negative = unlimited (ENVD_MAX_BUILDS_PER_TENANT)")
	fl.IntVar(&f.cfg.Limits.Exec, "max-exec-per-tenant", f.envInt("ENVD_MAX_EXEC_PER_TENANT", d.Limits.Exec), "concurrent exec requests and exec WebSockets per tenant on this node; negative = unlimited (ENVD_MAX_EXEC_PER_TENANT)")
	fl.IntVar(&f.cfg.Limits.Events, "max-event-streams-per-tenant", f.envInt("ENVD_MAX_EVENT_STREAMS_PER_TENANT", d.Limits.Events), "open operation event streams per tenant on this node; negative = unlimited (ENVD_MAX_EVENT_STREAMS_PER_TENANT)")
	fl.IntVar(&f.cfg.Dials.PerTenant, "max-dials-per-tenant", f.envInt("ENVD_MAX_DIALS_PER_TENANT", d.Dials.PerTenant), "connections to instances' ports (port proxy, tunnels, SSH -L) being opened at once per tenant on this node; 0 = 32, negative = unlimited (ENVD_MAX_DIALS_PER_TENANT)")
	fl.IntVar(&f.cfg.Dials.PerNode, "max-dials", f.envInt("ENVD_MAX_DIALS", d.Dials.PerNode), "connections to instances' ports being opened at once on this node, all tenants together; 0 = 512, negative = unlimited (ENVD_MAX_DIALS)")
	fl.IntVar(&f.cfg.MaxThreads, "max-threads", f.envInt("ENVD_MAX_THREADS", d.MaxThreads), "OS threads the process may have, past which the Go runtime aborts it; 0 = 10000 (ENVD_MAX_THREADS)")
	fl.IntVar(&f.cfg.ThreadHighWater, "thread-high-water", f.envInt("ENVD_THREAD_HIGH_WATER", d.ThreadHighWater), "OS threads past which new streams, saves, builds and port connections are refused with 429; 0 = half of --max-threads, negative = never (ENVD_THREAD_HIGH_WATER)")
	fl.BoolVar(&f.cfg.Webhooks.AllowLoopback, "webhooks-allow-loopback", envBool("ENVD_WEBHOOKS_ALLOW_LOOPBACK", d.Webhooks.AllowLoopback), "let tenants' webhooks reach loopback addresses (127.0.0.0/8, ::1): for tests and receivers on the node; link-local, metadata and instance addresses stay refused (ENVD_WEBHOOKS_ALLOW_LOOPBACK=1)")
	fl.IntVar(&f.cfg.RolloutConcurrency, "rollout-concurrency", f.envInt("ENVD_ROLLOUT_CONCURRENCY", d.RolloutConcurrency), "rollout migrations this node runs at once; 0 = 2 (ENVD_ROLLOUT_CONCURRENCY)")
	fl.IntVar(&f.cfg.SquashAfter, "squash-after", f.envInt("ENVD_SQUASH_AFTER", d.SquashAfter), "squash a version deeper than this many layers, that instances build on, into its base plus one layer in the background; 0 = never (ENVD_SQUASH_AFTER)")
	fl.StringVar(&f.cfg.TLSCert, "tls-cert", env("ENVD_TLS_CERT", d.TLSCert), "PEM certificate (chain) the API serves TLS with, with --tls-key; without them a loopback --listen is plain HTTP and any other gets a self-signed certificate in DATA_DIR/tls (ENVD_TLS_CERT)")
	fl.StringVar(&f.cfg.TLSKey, "tls-key", env("ENVD_TLS_KEY", d.TLSKey), "PEM private key of --tls-cert (ENVD_TLS_KEY)")
	fl.DurationVar(&f.cfg.ShutdownGrace, "shutdown-grace", f.envDuration("ENVD_SHUTDOWN_GRACE", d.ShutdownGrace), "on SIGTERM or SIGINT, how long requests and operations in flight may finish (0 = none); the rest are cancelled, and the next start resumes or settles them (ENVD_SHUTDOWN_GRACE)")
	fl.StringVar(&f.cfg.SSHListen, "ssh-listen", envKept("ENVD_SSH_LISTEN", d.SSHListen), "SSH endpoint address (ssh INSTANCE@HOST -p PORT); the chosen one is written to DATA_DIR/ssh.addr and shown by envctl info; empty = no SSH (ENVD_SSH_LISTEN)")
	fl.IntVar(&f.cfg.Limits.SFTP, "max-sftp-per-tenant", f.envInt("ENVD_MAX_SFTP_PER_TENANT", d.Limits.SFTP), "open SFTP sessions per tenant on this node; past them a session is refused at its start; negative = unlimited (ENVD_MAX_SFTP_PER_TENANT)")
	fl.IntVar(&f.cfg.Limits.SFTPPerNode, "max-sftp-per-node", f.envInt("ENVD_MAX_SFTP_PER_NODE", d.Limits.SFTPPerNode), "open SFTP sessions on this node, all tenants together; negative = unlimited (ENVD_MAX_SFTP_PER_NODE)")
	fl.IntVar(&f.cfg.Limits.Archives, "max-archives-per-tenant", f.envInt("ENVD_MAX_ARCHIVES_PER_TENANT", d.Limits.Archives), "file API archive downloads and uploads in progress per tenant on this node, past them 429; negative = unlimited (ENVD_MAX_ARCHIVES_PER_TENANT)")
	fl.IntVar(&f.cfg.Limits.ArchivesPerNode, "max-archives-per-node", f.envInt("ENVD_MAX_ARCHIVES_PER_NODE", d.Limits.ArchivesPerNode), "file API archive transfers in progress on this node, all tenants together, past them 429; negative = unlimited (ENVD_MAX_ARCHIVES_PER_NODE)")
	fl.DurationVar(&f.cfg.IdleAfter, "idle-after", f.envDuration("ENVD_IDLE_AFTER", d.IdleAfter), "idle setting of projects that set none: a Running instance without activity this long is stopped (a non-retained one saved first), 0 = never; a tenant's max_idle_after cuts it (ENVD_IDLE_AFTER)")
	fl.StringVar(&f.cfg.IdleAction, "idle-action", env("ENVD_IDLE_ACTION", d.IdleAction), "idle action of projects that set none: stop (a retained instance keeps its layer on the node) or hibernate (saved as a version, layer freed) (ENVD_IDLE_ACTION)")
	fl.DurationVar(&f.cfg.WakeWait, "wake-wait", f.envDuration("ENVD_WAKE_WAIT", d.WakeWait), "how long a request that wakes a stopped or hibernated instance waits for it before answering 503 waking with Retry-After (ENVD_WAKE_WAIT)")
	fl.StringVar(&f.cfg.PreviewDomain, "preview-domain", env("ENVD_PREVIEW_DOMAIN", d.PreviewDomain), "serve instance ports at {port}-{instance}.DOMAIN on the API's listener (wildcard DNS and certificate are the operator's; docs/api.md); empty = no host form (ENVD_PREVIEW_DOMAIN)")
	fl.Int64Var(&f.cfg.MaxFileBytes, "max-file-bytes", int64(f.envInt("ENVD_MAX_FILE_BYTES", int(d.MaxFileBytes))), "largest file write or archive upload of the file API, past it 413 too_large; 0 = 1 GiB (ENVD_MAX_FILE_BYTES)")
	f.cluster.register(f, fl)
	f.registerConfig(fl)
	if external {
		fl.StringVar(&f.s3.Endpoint, "s3-endpoint", env("ENVD_S3_ENDPOINT", ""), "S3 host:port for volume archives; empty = a directory in the data dir (ENVD_S3_ENDPOINT)")
		fl.StringVar(&f.s3.Bucket, "s3-bucket", env("ENVD_S3_BUCKET", node.DefaultS3Bucket), "S3 bucket (ENVD_S3_BUCKET)")
		fl.BoolVar(&f.s3.Secure, "s3-tls", envBool("ENVD_S3_TLS", false), "use TLS for S3 (ENVD_S3_TLS=1)")
		f.s3.AccessKey, f.s3.SecretKey = os.Getenv("ENVD_S3_ACCESS_KEY"), os.Getenv("ENVD_S3_SECRET_KEY")
		fl.StringVar(&f.regS3.Endpoint, "registry-s3-endpoint", env("ENVD_REGISTRY_S3_ENDPOINT", ""), "S3 host:port for the embedded registry's storage; empty = DATA_DIR/registry (ENVD_REGISTRY_S3_ENDPOINT)")
		fl.StringVar(&f.regS3.Bucket, "registry-s3-bucket", env("ENVD_REGISTRY_S3_BUCKET", node.DefaultRegistryS3Bucket), "S3 bucket of the embedded registry (ENVD_REGISTRY_S3_BUCKET)")
		fl.BoolVar(&f.regS3.Secure, "registry-s3-tls", envBool("ENVD_REGISTRY_S3_TLS", false), "use TLS for the registry's S3 (ENVD_REGISTRY_S3_TLS=1)")
		f.regS3.AccessKey, f.regS3.SecretKey = os.Getenv("ENVD_REGISTRY_S3_ACCESS_KEY"), os.Getenv("ENVD_REGISTRY_S3_SECRET_KEY")
		fl.StringVar(&f.cfg.DSN, "database", env("ENVD_DATABASE_URL", d.DSN), "PostgreSQL DSN; empty = private cluster in the data dir (ENVD_DATABASE_URL)")
		fl.StringVar(&f.cfg.Registry, "registry", env("ENVD_REGISTRY", d.Registry), "registry host:port (plain HTTP); empty = embedded (ENVD_REGISTRY)")
		fl.StringVar(&f.cfg.RegistryCredentialFile, "registry-credential-file", env("ENVD_REGISTRY_CREDENTIAL_FILE", d.RegistryCredentialFile),
			"file (0600) with the --registry credential as user:password, e.g. a copy of the first node's DATA_DIR/registry-node.credential; empty = anonymous (ENVD_REGISTRY_CREDENTIAL_FILE)")
		fl.StringVar(&f.cfg.RegistryGCCredentialFile, "registry-gc-credential-file", env("ENVD_REGISTRY_GC_CREDENTIAL_FILE", d.RegistryGCCredentialFile),
			"file (0600) with the --registry credential allowed to delete, for a node that runs the GC; empty = this node's GC cannot delete manifests (ENVD_REGISTRY_GC_CREDENTIAL_FILE)")
		fl.StringVar(&f.cfg.Containerd, "containerd", env("ENVD_CONTAINERD", d.Containerd), "containerd socket; empty = private daemon in the data dir (ENVD_CONTAINERD)")
		fl.StringVar(&f.cfg.Namespace, "namespace", env("ENVD_NAMESPACE", d.Namespace), "containerd namespace (ENVD_NAMESPACE)")
		f.join.register(fl)
	}
}

// config is the node.Config the flags and variables give.
func (f *flags) config() (node.Config, error) {
	if err := errors.Join(f.envErrs...); err != nil {
		return node.Config{}, err
	}
	if err := f.applyConfigFile(); err != nil {
		return node.Config{}, err
	}
	cfg := f.cfg
	var err error
	if cfg.DefaultLimits, err = f.limits.limits(); err != nil {
		return node.Config{}, err
	}
	if err := f.limits.density(&cfg); err != nil {
		return node.Config{}, err
	}
	if err := f.cluster.apply(&cfg); err != nil {
		return node.Config{}, err
	}
	if cfg.ShutdownGrace == 0 {
		cfg.ShutdownGrace = -1 // on the command line 0 is no wait; node.Config's 0 is its default
	}
	if f.regS3.Endpoint != "" {
		cfg.RegistryS3 = &f.regS3 // credentials from the environment only
	}
	if f.s3.Endpoint != "" {
		cfg.S3 = &f.s3 // credentials from ENVD_S3_ACCESS_KEY / ENVD_S3_SECRET_KEY only, never flags
	}
	if err := f.join.apply(&cfg, f.fs); err != nil {
		return node.Config{}, err
	}
	return cfg, nil
}

func (f *flags) run(cmd *cobra.Command) error {
	cfg, err := f.config()
	if err != nil {
		return err
	}
	if cfg.Logger, err = node.NewLogger(os.Stderr, cfg.LogFormat); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := node.Start(ctx, cfg)
	if err != nil {
		return err
	}
	if err := node.WritePID(cfg.DataDir); err != nil {
		return err
	}
	fmt.Printf("envd is up: %s (data dir %s)\n", n.URL, cfg.DataDir)
	if fp := n.TLSFingerprint(); fp != "" {
		fmt.Printf("TLS certificate SHA-256 fingerprint: %s\n", fp)
		if c := n.SelfSignedCert(); c != "" {
			fmt.Printf("self-signed: %s (envctl trusts it through the data dir; give it to other clients as their CA)\n", c)
		}
	}
	if n.MetricsURL != "" {
		fmt.Printf("metrics: %s\n", n.MetricsURL)
	}
	if s := n.SSH(); s != nil {
		fmt.Printf("ssh: %s, host key %s\n", s.Addr, s.HostKeyFingerprint)
	}
	<-ctx.Done()
	stop() // a second signal ends the process at once
	return shutdown(n, cfg)
}

func upCmd() *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "run envd on embedded defaults under one data dir",
		Long: `Runs a whole envd node under one data directory: a private PostgreSQL cluster,
an embedded OCI registry and a private containerd. The admin token is written to
DATA_DIR/admin.token and the API address to DATA_DIR/envd.url, where envctl finds them.
Two data dirs on one machine are two independent nodes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	f.register(cmd, false)
	return cmd
}

func serveCmd() *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "run envd with external PostgreSQL, registry or containerd",
		Long: `Like up, but any part can be an external one, so a second node can join the first
node's PostgreSQL and registry. Parts left empty are embedded under the data dir.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd) },
	}
	f.register(cmd, true)
	return cmd
}

func snapshotterCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "snapshotter --root DIR --socket PATH [--plain-http HOST:PORT]...",
		Short: "serve the stargz lazy snapshotter to containerd (started by envd up)",
		Long: `Serves the stargz snapshotter as a containerd proxy snapshotter on a unix socket,
with its snapshots, FUSE mounts and layer cache under --root. envd up starts it in its
own session under DATA_DIR/stargz, so its FUSE mounts outlive restarts of envd.`,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if code := stargz.Main(cmd.Context(), args, os.Stderr); code != 0 {
				os.Exit(code)
			}
			return nil
		},
	}
}

func downCmd() *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "down",
		Short: "stop a node: envd, its containers, its private containerd, snapshotter and PostgreSQL",
		Long: `Stops everything "envd up" or "envd serve" started under the data dir, removing the
node's containers (unsaved changes in them are lost; saved versions, volumes and the
data dir stay). The parts a node was started with are remembered in DATA_DIR/parts.json.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.applyConfigFile(); err != nil {
				return err
			}
			f.cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute+max(f.cfg.ShutdownGrace, 0))
			defer cancel()
			if err := node.Down(ctx, f.cfg); err != nil {
				return err
			}
			fmt.Printf("envd is down (data dir %s)\n", f.cfg.DataDir)
			return nil
		},
	}
	f.register(cmd, true)
	return cmd
}
