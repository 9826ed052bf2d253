// Package registry stores envd's environments as OCI images.
//
// Terms used throughout the package:
//
//   - addr: "host:port" of a registry spoken to over plain HTTP.
//   - repo: a repository name without host, in the distribution grammar, e.g.
//     "envd/images/busybox" (base images) or "envd/projects/p1" (versions).
//   - ref: "repo@sha256:..." (by digest) or "repo:tag"; never with a host:
//     the Client adds its own.
//   - Image: a manifest stored in a repo, identified by its digest.
//
// The package has two halves: Serve runs an embedded CNCF distribution v3
// registry on local disk, and Client assembles, pushes, resolves, verifies and
// deletes images in any OCI registry with go-containerregistry.
package registry

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"reflect"
	"sync"
	"time"

	"github.com/distribution/distribution/v3/configuration"
	"github.com/distribution/distribution/v3/registry/handlers"
	storagedriver "github.com/distribution/distribution/v3/registry/storage/driver"
	"github.com/distribution/distribution/v3/registry/storage/driver/factory"
	"github.com/sirupsen/logrus"

	// The storage drivers register themselves with the driver factory.
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/s3-aws"

	"github.com/envd-dev/envd/errdefs"
)

// Server is an embedded distribution registry serving one storage directory.
type Server struct {
	addr   string
	access Access
	app    *handlers.App
	driver storagedriver.StorageDriver // the app's storage, for GarbageCollect
	log    *logrus.Entry
	srv    *http.Server
	done   chan struct{} // closed when the HTTP server's Serve returns

	gcMu sync.Mutex // one sweep at a time: a second would delete the same blobs

	closeOnce sync.Once
	closeErr  error
}

// options configure Serve.
type options struct {
	logOut   io.Writer
	logLevel logrus.Level
	s3       *S3Storage
	access   *Access
	// distributionRanges: ranged blob GETs go to distribution too (the
	// benchmark's other side; see blobrange.go).
	distributionRanges bool
}

// S3Storage is an S3 bucket for the registry's blobs and manifests.
type S3Storage struct {
	Endpoint  string // host:port
	Region    string // default "us-east-1"
	Bucket    string
	AccessKey string
	SecretKey string
	Secure    bool
}

// WithS3Storage stores the registry's content in S3 instead of rootDir
// (distribution's s3-aws driver, path-style). Blob GETs are answered with a
// redirect to a presigned URL of the object, which clients follow, ranged
// reads included. Default: filesystem storage under rootDir.
func WithS3Storage(s S3Storage) Option {
	return func(o *options) error {
		if s.Endpoint == "" || s.Bucket == "" {
			return fmt.Errorf("s3 storage needs an endpoint and a bucket: %w", errdefs.ErrInvalidArgument)
		}
		if s.Region == "" {
			s.Region = "us-east-1"
		}
		o.s3 = &s
		return nil
	}
}

// Option configures Serve.
type Option func(*options) error

// WithLogWriter sets where the registry's own log lines go (warnings and
// errors; request failures with 4xx statuses are dropped, see
// registryFormatter). Default: os.Stderr. io.Discard silences it.
func WithLogWriter(w io.Writer) Option {
	return func(o *options) error {
		if w == nil {
			return fmt.Errorf("nil log writer: %w", errdefs.ErrInvalidArgument)
		}
		o.logOut = w
		return nil
	}
}

// withDistributionRanges is for the benchmark: ranged blob GETs are
// served by distribution, as before blobRanges.
func withDistributionRanges() Option {
	return func(o *options) error { o.distributionRanges = true; return nil }
}

// withLogLevel is for tests: they check that the logger is really used.
func withLogLevel(l logrus.Level) Option {
	return func(o *options) error { o.logLevel = l; return nil }
}

// Serve starts the embedded registry with filesystem storage under rootDir,
// deletes enabled, listening on listenAddr ("127.0.0.1:0" picks a port). It
// returns when the registry is accepting connections. Close stops it. Every
// request must carry one of the credentials of WithAccess (see Access).
func Serve(ctx context.Context, rootDir, listenAddr string, opts ...Option) (*Server, error) {
	o := options{logOut: os.Stderr, logLevel: logrus.WarnLevel}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if o.access == nil {
		a := NewAccess()
		o.access = &a
	}
	if rootDir == "" {
		return nil, fmt.Errorf("registry root directory is empty: %w", errdefs.ErrInvalidArgument)
	}
	if err := os.MkdirAll(rootDir, 0o700); err != nil {
		return nil, fmt.Errorf("create registry root %q: %w", rootDir, err)
	}

	cfg := &configuration.Configuration{
		Storage: configuration.Storage{
			"filesystem": configuration.Parameters{"rootdirectory": rootDir},
			"delete":     configuration.Parameters{"enabled": true},
			// No "cache" (blobdescriptor: inmemory): GarbageCollect sweeps
			// beside the app, and the app's cache would go on answering
			// "exists" for the blobs it deleted: a re-push skips the upload
			// and a GET answers 200, then cuts the body off. Without it a
			// blob HEAD costs a stat.
		},
	}
	if o.s3 != nil {
		delete(cfg.Storage, "filesystem")
		scheme := "http://"
		if o.s3.Secure {
			scheme = "https://"
		}
		cfg.Storage["s3"] = configuration.Parameters{
			"region": o.s3.Region, "regionendpoint": scheme + o.s3.Endpoint, "bucket": o.s3.Bucket,
			"accesskey": o.s3.AccessKey, "secretkey": o.s3.SecretKey,
			"secure": o.s3.Secure, "forcepathstyle": true, "v4auth": true,
		}
	}
	// Upload state is signed with this secret. One process serves all of
	// its uploads, so a random per-process value is enough; setting one
	// also keeps NewApp from warning about a generated secret.
	cfg.HTTP.Secret = rand.Text()

	logger := logrus.New()
	logger.SetOutput(o.logOut)
	logger.SetLevel(o.logLevel)
	logger.SetFormatter(registryFormatter{&logrus.TextFormatter{}})
	entry := logrus.NewEntry(logger).WithField("component", "registry")

	// A second driver on the same storage: the app keeps its own private.
	driver, err := factory.Create(context.WithoutCancel(ctx), cfg.Storage.Type(), cfg.Storage.Parameters())
	if err != nil {
		return nil, fmt.Errorf("registry storage driver %q: %w", cfg.Storage.Type(), err)
	}
	app, err := newApp(withRegistryLogger(context.WithoutCancel(ctx), entry), cfg)
	if err != nil {
		return nil, err
	}

	ln, err := net.Listen("tcp", listenAddr)
	if err != nil {
		_ = app.Shutdown()
		return nil, fmt.Errorf("listen on %q: %w", listenAddr, err)
	}
	var next http.Handler = app
	if o.s3 == nil && !o.distributionRanges {
		next = &blobRanges{root: rootDir, next: app}
	}
	authed := newAuthHandler(*o.access, next)
	s := &Server{
		addr:   ln.Addr().String(),
		access: *o.access,
		app:    app,
		driver: driver,
		log:    entry,
		srv: &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				authed.ServeHTTP(w, r.WithContext(withRegistryLogger(r.Context(), entry)))
			}),
			// As the API's server (envd/node newHTTPServer): headers must
			// arrive in time and fit, idle keep-alive connections end. No
			// read or write timeout: blob uploads and downloads last as long
			// as their size needs.
			ReadHeaderTimeout: 30 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		// Serve returns http.ErrServerClosed after Shutdown; any other error
		// means the listener broke, and clients will see ErrUnavailable.
		_ = s.srv.Serve(ln)
	}()
	// The listener is bound, so connections are already accepted (queued by
	// the kernel) before Serve's goroutine runs: nothing else to wait for.
	return s, nil
}

// distribution logs through logrus' process-wide standard logger at Info
// level, one line per request, and at Error level for every 4xx answer
// (including the 404s of the existence checks that precede each push). Its
// logger plumbing is the internal package dcontext, which looks the logger
// up with ctx.Value(loggerKey{}) where loggerKey is an unexported type.
// registryLoggerCtx answers that lookup with our own logger, so each Server
// logs to its own writer at its own level, without touching the global
// logrus level that containerd's client shares. The key is recognized by
// its type's package and name; if a distribution upgrade renames it, logs
// fall back to logrus' standard logger (TestServerLogger catches that).
type registryLoggerCtx struct {
	context.Context
	entry *logrus.Entry
}

const dcontextPkg = "github.com/distribution/distribution/v3/internal/dcontext"

func withRegistryLogger(ctx context.Context, entry *logrus.Entry) context.Context {
	return registryLoggerCtx{Context: ctx, entry: entry}
}

func (c registryLoggerCtx) Value(key any) any {
	if t := reflect.TypeOf(key); t != nil && t.Name() == "loggerKey" && t.PkgPath() == dcontextPkg {
		return c.entry
	}
	return c.Context.Value(key)
}

// registryFormatter drops distribution's "response completed with error"
// lines for 4xx answers: they are the normal result of a client asking
// whether a blob or manifest exists. 5xx answers are still logged.
type registryFormatter struct{ next logrus.Formatter }

func (f registryFormatter) Format(e *logrus.Entry) ([]byte, error) {
	if status, ok := e.Data["http.response.status"].(int); ok && status < 500 {
		return nil, nil
	}
	return f.next.Format(e)
}

// newApp builds the distribution handler, turning its panics (it panics on
// bad storage configuration) into errors.
func newApp(ctx context.Context, cfg *configuration.Configuration) (app *handlers.App, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("start embedded registry: %v", r)
		}
	}()
	return handlers.NewApp(ctx, cfg), nil
}

// Addr returns "127.0.0.1:PORT", the address the registry listens on.
func (s *Server) Addr() string { return s.addr }

// Access returns the credentials the registry accepts.
func (s *Server) Access() Access { return s.access }

// Close stops accepting connections, waits for in-flight requests until ctx
// ends (then closes them), and releases the registry. It is safe to call more
// than once; later calls return the first call's result.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		// In-flight requests get until ctx's deadline to finish; then they
		// are cut, which is what closing a server means, not an error.
		err := s.srv.Shutdown(ctx)
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			err = s.srv.Close()
		} else if err != nil {
			err = errors.Join(err, s.srv.Close())
		}
		<-s.done
		s.closeErr = errors.Join(err, s.app.Shutdown())
	})
	return s.closeErr
}
