package main

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/envd/node"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/registry"
)

// registryCmd serves the embedded registry alone, the shared registry of a
// cluster: its content in S3, its two credentials (node, GC) read from
// files, so every node is given the node credential with
// --registry-credential-file and one node the GC credential.
func registryCmd() *cobra.Command {
	var (
		listen, dataDir, nodeCred, gcCred string
		s3                                registry.S3Storage
		grace                             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "registry",
		Short: "serve envd's registry alone (the shared registry of several nodes), its content in S3",
		Long: `Serves the CNCF distribution registry envd embeds, without a node: the shared
registry of a cluster (docs/deploy.md). Its content is in S3 (--s3-endpoint; without it,
DATA_DIR/registry). Every request carries one of two credentials, read from 0600 files
("user:password"): the node credential (pull and push; give it to every node with
--registry-credential-file) and the GC credential (also delete; give it to the nodes that run
the GC with --registry-gc-credential-file). Missing files are generated. The registry does
not sweep unreferenced blobs itself: that is the GC's.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s3.AccessKey, s3.SecretKey = os.Getenv("ENVD_REGISTRY_S3_ACCESS_KEY"), os.Getenv("ENVD_REGISTRY_S3_SECRET_KEY")
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return serveRegistryAlone(ctx, listen, dataDir, nodeCred, gcCred, s3, grace)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&listen, "listen", env("ENVD_REGISTRY_LISTEN", "127.0.0.1:5000"), "address the registry listens on, plain HTTP (ENVD_REGISTRY_LISTEN)")
	fl.StringVar(&dataDir, "data-dir", env("ENVD_DATA_DIR", node.DefaultDataDir()), "directory of the filesystem storage when no S3 is given, and of generated credential files (ENVD_DATA_DIR)")
	fl.StringVar(&nodeCred, "node-credential-file", env("ENVD_REGISTRY_CREDENTIAL_FILE", ""), "file (0600) of the node credential, user:password; generated when missing; default DATA_DIR/registry-node.credential (ENVD_REGISTRY_CREDENTIAL_FILE)")
	fl.StringVar(&gcCred, "gc-credential-file", env("ENVD_REGISTRY_GC_CREDENTIAL_FILE", ""), "file (0600) of the GC credential, user:password; generated when missing; default DATA_DIR/registry-gc.credential (ENVD_REGISTRY_GC_CREDENTIAL_FILE)")
	fl.StringVar(&s3.Endpoint, "s3-endpoint", env("ENVD_REGISTRY_S3_ENDPOINT", ""), "S3 host:port of the registry's content; empty = DATA_DIR/registry; keys from ENVD_REGISTRY_S3_ACCESS_KEY and ENVD_REGISTRY_S3_SECRET_KEY (ENVD_REGISTRY_S3_ENDPOINT)")
	fl.StringVar(&s3.Bucket, "s3-bucket", env("ENVD_REGISTRY_S3_BUCKET", node.DefaultRegistryS3Bucket), "S3 bucket, created when missing (ENVD_REGISTRY_S3_BUCKET)")
	fl.StringVar(&s3.Region, "s3-region", env("ENVD_REGISTRY_S3_REGION", ""), "S3 region; empty = us-east-1 (ENVD_REGISTRY_S3_REGION)")
	fl.BoolVar(&s3.Secure, "s3-tls", envBool("ENVD_REGISTRY_S3_TLS", false), "use TLS for S3 (ENVD_REGISTRY_S3_TLS=1)")
	fl.DurationVar(&grace, "shutdown-grace", 30*time.Second, "on SIGTERM, how long requests in flight (uploads) may finish")
	return cmd
}

func serveRegistryAlone(ctx context.Context, listen, dataDir, nodeCred, gcCred string, s3 registry.S3Storage, grace time.Duration) error {
	if nodeCred == "" {
		nodeCred = filepath.Join(dataDir, "registry-node.credential")
	}
	if gcCred == "" {
		gcCred = filepath.Join(dataDir, "registry-gc.credential")
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	nc, err := registry.LoadOrCreateCredentialFile(nodeCred, registry.NodeUser)
	if err != nil {
		return err
	}
	gc, err := registry.LoadOrCreateCredentialFile(gcCred, registry.GCUser)
	if err != nil {
		return err
	}
	opts := []registry.Option{registry.WithAccess(registry.Access{Node: nc, GC: gc})}
	if s3.Endpoint != "" {
		// distribution's driver does not create its bucket.
		if _, err := objstore.NewS3(ctx, objstore.S3Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket,
			AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Secure: s3.Secure, Region: s3.Region}); err != nil {
			return fmt.Errorf("registry bucket: %w", err)
		}
		opts = append(opts, registry.WithS3Storage(s3))
		if host, _, err := net.SplitHostPort(s3.Endpoint); err == nil {
			if ip, err := netip.ParseAddr(host); err == nil && (ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast()) {
				// Blob GETs redirect to S3; go-containerregistry (envd's
				// registry client) refuses a redirect to a private IP
				// literal on another host than the registry's.
				fmt.Fprintf(os.Stderr, "envd registry: warning: S3 endpoint %s is a private IP address: nodes refuse the registry's redirects to it unless it is the registry's own host; name it by DNS\n", s3.Endpoint)
			}
		}
	}
	srv, err := registry.Serve(ctx, filepath.Join(dataDir, "registry"), listen, opts...)
	if err != nil {
		return err
	}
	where := filepath.Join(dataDir, "registry")
	if s3.Endpoint != "" {
		where = "s3 " + s3.Endpoint + "/" + s3.Bucket
	}
	fmt.Printf("envd registry is up: %s (content in %s)\n", srv.Addr(), where)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	return srv.Close(sctx)
}
