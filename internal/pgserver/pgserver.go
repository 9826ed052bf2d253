// Package pgserver runs a private PostgreSQL cluster for envd's embedded
// default (`envd up`) and for tests.
//
// Terms:
//
//   - dir: the cluster's home. dir/data is the data directory (PGDATA),
//     dir/run holds the unix socket (dir/run/.s.PGSQL.5432) and dir/log the
//     server log. Everything lives under dir, so two dirs are two independent
//     clusters; no TCP port is opened (listen_addresses is empty).
//   - reuse: a cluster already running on dir (valid postmaster.pid whose
//     socket answers) is adopted, never restarted: envd restarts must not
//     restart PostgreSQL.
//
// The postmaster runs in its own session (Setsid), so it outlives the process
// that started it; Stop stops it explicitly. When the caller is root, the
// cluster is owned by and runs as the "postgres" OS user (PostgreSQL refuses to
// run as root); that user must be able to traverse every parent of dir.
package pgserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// DatabaseName is the database Start creates for envd.
const DatabaseName = "envd"

// superuser is the bootstrap role initdb creates; local connections are trusted.
const superuser = "postgres"

// maxSocketPath is the usable length of sun_path on Linux (108 bytes with the NUL).
const maxSocketPath = 107

// Server is a running private cluster. It holds no resources of its own: the
// postmaster is a separate process, and dropping a Server leaves it running.
type Server struct {
	dir    string
	bin    string
	cred   *syscall.Credential
	reused bool
}

// Option configures Start.
type Option func(*options) error

type options struct {
	noSync  bool
	timeout time.Duration
}

// WithNoSync trades durability for speed, for tests only: initdb --no-sync and
// fsync, synchronous_commit and full_page_writes off. Default: durable.
func WithNoSync() Option {
	return func(o *options) error { o.noSync = true; return nil }
}

// WithStartTimeout bounds how long Start waits for the server to accept
// connections. Default: 60s.
func WithStartTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("start timeout %s: %w", d, errdefs.ErrInvalidArgument)
		}
		o.timeout = d
		return nil
	}
}

// Start initialises (once) and starts a private cluster in dir, or adopts the
// one already running there. On return the database DatabaseName exists and
// DSN connects to it.
func Start(ctx context.Context, dir string, opts ...Option) (*Server, error) {
	o := options{timeout: 60 * time.Second}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("pgserver dir %q: %w", dir, errdefs.ErrInvalidArgument)
	}
	if sock := filepath.Join(dir, "run", ".s.PGSQL.5432"); len(sock) > maxSocketPath {
		return nil, fmt.Errorf("pgserver socket path %q is %d bytes, longer than %d: %w",
			sock, len(sock), maxSocketPath, errdefs.ErrInvalidArgument)
	}
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	s := &Server{dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		if s.cred, err = lookupCredential(superuser); err != nil {
			return nil, err
		}
	}
	if err := s.prepareDirs(); err != nil {
		return nil, err
	}
	// Two starters on one dir (two envd processes racing) take turns: the
	// second finds the first one's server running and adopts it.
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	// Reuse a running server: pg_ctl status checks postmaster.pid and that
	// the process lives; waitReady checks the socket answers.
	if s.pgctl(ctx, "status", "-D", s.dataDir()) == nil {
		if err := s.waitReady(ctx, o.timeout); err == nil {
			s.reused = true
			return s, s.ensureDatabase(ctx)
		}
		// A live postmaster that does not answer: starting another would
		// fail on the lock file anyway; report it.
		return nil, fmt.Errorf("postgres running on %s does not answer on its socket: %w", dir, errdefs.ErrUnavailable)
	}

	if _, err := os.Stat(filepath.Join(s.dataDir(), "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := s.initdb(ctx, o.noSync); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("pgserver data dir: %w", err)
	}
	if err := s.writeConf(o.noSync); err != nil {
		return nil, err
	}
	// pg_ctl -w waits until the server accepts connections. The log file
	// keeps the postmaster's output off our pipes (it would otherwise hold
	// them open and make Wait hang).
	if err := s.pgctl(ctx, "start", "-D", s.dataDir(), "-w", "-t", strconv.Itoa(int(o.timeout.Seconds())),
		"-l", filepath.Join(dir, "log", "postgres.log")); err != nil {
		return nil, fmt.Errorf("start postgres in %s (see %s): %v: %w",
			dir, filepath.Join(dir, "log", "postgres.log"), err, errdefs.ErrUnavailable)
	}
	if err := s.waitReady(ctx, o.timeout); err != nil {
		return nil, err
	}
	return s, s.ensureDatabase(ctx)
}

// Dir is the cluster's home directory.
func (s *Server) Dir() string { return s.dir }

// SocketDir is the directory holding the unix socket.
func (s *Server) SocketDir() string { return filepath.Join(s.dir, "run") }

// Reused reports whether Start adopted an already running server.
func (s *Server) Reused() bool { return s.reused }

// DSN returns the keyword/value connection string of the envd database.
func (s *Server) DSN() string { return s.DSNFor(DatabaseName) }

// DSNFor returns the keyword/value connection string of database db.
func (s *Server) DSNFor(db string) string {
	return fmt.Sprintf("host=%s dbname=%s user=%s sslmode=disable", quoteDSN(s.SocketDir()), quoteDSN(db), superuser)
}

// Stop stops the server (pg_ctl stop -m fast: disconnect clients, roll back
// open transactions, checkpoint) and waits for it to exit. Stopping a server
// that is not running is not an error.
func (s *Server) Stop(ctx context.Context) error {
	if s.pgctl(ctx, "status", "-D", s.dataDir()) != nil {
		return nil
	}
	if err := s.pgctl(ctx, "stop", "-D", s.dataDir(), "-m", "fast", "-w"); err != nil {
		return fmt.Errorf("stop postgres in %s: %v: %w", s.dir, err, errdefs.ErrUnavailable)
	}
	return nil
}

func (s *Server) dataDir() string { return filepath.Join(s.dir, "data") }

// prepareDirs creates dir, dir/run, dir/log (and leaves dir/data to initdb)
// and hands them to the postgres user when running as root.
func (s *Server) prepareDirs() error {
	for _, d := range []string{s.dir, filepath.Join(s.dir, "run"), filepath.Join(s.dir, "log")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		if s.cred != nil {
			if err := os.Chown(d, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
				return fmt.Errorf("pgserver: %w", err)
			}
		}
	}
	if s.cred != nil {
		// A parent the postgres user cannot traverse makes initdb fail
		// with a bare "permission denied"; say which one.
		for p := filepath.Dir(s.dir); ; p = filepath.Dir(p) {
			fi, err := os.Stat(p)
			if err != nil {
				return fmt.Errorf("pgserver: %w", err)
			}
			st, ok := fi.Sys().(*syscall.Stat_t)
			if ok && fi.Mode().Perm()&0o001 == 0 && st.Uid != s.cred.Uid {
				return fmt.Errorf("pgserver: the postgres user cannot traverse %s (mode %s): %w",
					p, fi.Mode().Perm(), errdefs.ErrFailedPrecondition)
			}
			if p == filepath.Dir(p) {
				break
			}
		}
	}
	return nil
}

func (s *Server) initdb(ctx context.Context, noSync bool) error {
	args := []string{"-D", s.dataDir(), "-U", superuser, "--auth=trust", "-E", "UTF8", "--locale=C"}
	if noSync {
		args = append(args, "--no-sync")
	}
	if err := s.run(ctx, "initdb", args...); err != nil {
		return fmt.Errorf("initdb in %s: %v: %w", s.dir, err, errdefs.ErrUnavailable)
	}
	// Settings that depend on where the cluster lives go to envd.conf,
	// rewritten at every start, so a moved dir still works.
	f, err := os.OpenFile(filepath.Join(s.dataDir(), "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	_, err = f.WriteString("\n# envd: settings written by pgserver at each start\ninclude_if_exists = 'envd.conf'\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

func (s *Server) writeConf(noSync bool) error {
	var b strings.Builder
	b.WriteString("# Written by envd pgserver at each start; edits are lost.\n")
	b.WriteString("listen_addresses = ''\n")
	fmt.Fprintf(&b, "unix_socket_directories = %s\n", quoteConf(s.SocketDir()))
	b.WriteString("unix_socket_permissions = 0700\n")
	if noSync {
		b.WriteString("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n")
	}
	p := filepath.Join(s.dataDir(), "envd.conf")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	if s.cred != nil {
		if err := os.Chown(p, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
	}
	return nil
}

// waitReady polls the socket until a connection succeeds.
func (s *Server) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		c, err := s.connect(ctx, "postgres")
		if err == nil {
			return c.Close(ctx)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres in %s not answering: %v: %w", s.dir, last, errdefs.ErrUnavailable)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Server) connect(ctx context.Context, db string) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return pgx.Connect(cctx, s.DSNFor(db))
}

func (s *Server) ensureDatabase(ctx context.Context) error {
	c, err := s.connect(ctx, "postgres")
	if err != nil {
		return fmt.Errorf("connect to postgres in %s: %v: %w", s.dir, err, errdefs.ErrUnavailable)
	}
	defer c.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := c.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", DatabaseName).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %q: %v: %w", DatabaseName, err, errdefs.ErrUnavailable)
	}
	if exists {
		return nil
	}
	if _, err := c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{DatabaseName}.Sanitize()); err != nil {
		// Two starters racing: the loser sees duplicate_database (42P04).
		if strings.Contains(err.Error(), "42P04") {
			return nil
		}
		return fmt.Errorf("create database %q: %v: %w", DatabaseName, err, errdefs.ErrUnavailable)
	}
	return nil
}

func (s *Server) pgctl(ctx context.Context, args ...string) error {
	return s.run(ctx, "pg_ctl", args...)
}

// lockDir takes an exclusive flock on dir/start.lock, waiting for ctx.
func lockDir(ctx context.Context, dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "start.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = f.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("pgserver: lock %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("pgserver: waiting for another starter on %s: %w", dir, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// run runs a PostgreSQL binary as the cluster owner in a new session, its
// output in a temporary file (not a pipe: a postmaster inheriting a pipe
// would keep Wait from returning).
func (s *Server) run(ctx context.Context, name string, args ...string) error {
	out, err := os.CreateTemp("", "pgserver-*.log")
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer os.Remove(out.Name())
	defer out.Close()

	cmd := exec.CommandContext(ctx, filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = cleanEnv()
	// pg_ctl already setsid()s the postmaster it forks (checked: the
	// postmaster survives its starter's process group being killed even
	// without this); Setsid here also keeps initdb and pg_ctl themselves
	// out of a terminal's Ctrl-C.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Credential: s.cred}
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	if runErr == nil {
		return nil
	}
	msg, _ := os.ReadFile(out.Name())
	return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), runErr, strings.TrimSpace(string(msg)))
}

// cleanEnv drops PG* variables (PGDATA, PGHOST...) that would redirect the
// tools, and sets a HOME the postgres user can read.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME=/", "LC_ALL=C")
}

// findBin returns $ENVD_PG_BIN, or the highest /usr/lib/postgresql/N/bin
// that holds pg_ctl.
func findBin() (string, error) {
	if d := os.Getenv("ENVD_PG_BIN"); d != "" {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err != nil {
			return "", fmt.Errorf("ENVD_PG_BIN=%s: no pg_ctl: %w", d, errdefs.ErrFailedPrecondition)
		}
		return d, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pg_ctl")
	type cand struct {
		ver float64
		dir string
	}
	var cs []cand
	for _, m := range matches {
		d := filepath.Dir(m)
		v, err := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		if err != nil {
			continue
		}
		cs = append(cs, cand{v, d})
	}
	if len(cs) == 0 {
		return "", fmt.Errorf("no PostgreSQL binaries in /usr/lib/postgresql/*/bin (set ENVD_PG_BIN): %w", errdefs.ErrFailedPrecondition)
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].ver > cs[j].ver })
	return cs[0].dir, nil
}

func lookupCredential(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root needs the %q OS user: %v: %w", name, err, errdefs.ErrFailedPrecondition)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("user %q has a non-numeric uid/gid: %w", name, errdefs.ErrFailedPrecondition)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// quoteDSN quotes a keyword/value connection string value.
func quoteDSN(v string) string {
	if v != "" && !strings.ContainsAny(v, ` '\`) {
		return v
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// quoteConf quotes a postgresql.conf string value.
func quoteConf(v string) string {
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}

// readPID returns the postmaster pid recorded in dir's postmaster.pid, 0 if none.
func (s *Server) readPID() int {
	f, err := os.Open(filepath.Join(s.dataDir(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(sc.Text()))
	return pid
}

// PID returns the postmaster's process id, 0 when it is not running.
func (s *Server) PID() int {
	pid := s.readPID()
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}
