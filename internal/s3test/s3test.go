// Package s3test starts a real S3 server (versitygw, posix backend) for
// tests.
//
// versitygw v1.8.0 is built by scripts/setup.sh into
// /usr/local/lib/envd/bin. It is started as
//
//	ROOT_ACCESS_KEY=... ROOT_SECRET_KEY=... versitygw --port 127.0.0.1:PORT posix DIR
//
// (--port is a global flag and goes before the backend command; the root
// credentials may also be given as --access/--secret). Without an IAM
// service it runs in single-account mode. The posix backend keeps object
// metadata in xattrs, so DIR must be on a file system with user xattrs
// (ext4 here; t.TempDir() qualifies). It answers unauthenticated requests
// with 403, which is how Start knows it is up.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/envd-dev/envd/internal/objstore"
)

// DefaultBinDir is where scripts/setup.sh installs versitygw.
const DefaultBinDir = "/usr/local/lib/envd/bin"

// Binary returns the path of versitygw: $ENVD_BIN_DIR, then DefaultBinDir,
// then PATH.
func Binary() (string, error) {
	var dirs []string
	if d := os.Getenv("ENVD_BIN_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, DefaultBinDir)
	for _, d := range dirs {
		p := filepath.Join(d, "versitygw")
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath("versitygw")
	if err != nil {
		return "", fmt.Errorf("versitygw not found in $ENVD_BIN_DIR, %s or PATH: run scripts/setup.sh (it builds versitygw v1.8.0)", DefaultBinDir)
	}
	return p, nil
}

// Start runs a versitygw on a free loopback port with its storage in a test
// temp dir and returns a configuration for a fresh bucket (created by
// objstore.NewS3). The server is killed when the test ends. A missing binary
// fails the test; it is never skipped.
func Start(t testing.TB) objstore.S3Config {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatalf("s3test: %v", err)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatalf("s3test: %v", err)
	}
	access, secret := randHex(8), randHex(16)

	// The free port is found by listening on :0 and closing; another process
	// may take it before versitygw binds, so a start that exits is retried.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		addr, err := freeAddr()
		if err != nil {
			t.Fatalf("s3test: %v", err)
		}
		srv, err := start(bin, addr, data, access, secret, filepath.Join(dir, fmt.Sprintf("versitygw-%d.log", attempt)))
		if err != nil {
			lastErr = err
			continue
		}
		t.Cleanup(srv.stop)
		return objstore.S3Config{
			Endpoint:  addr,
			AccessKey: access,
			SecretKey: secret,
			Bucket:    "envd-test",
			Region:    "us-east-1",
		}
	}
	t.Fatalf("s3test: start versitygw: %v", lastErr)
	return objstore.S3Config{}
}

type server struct {
	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
}

func (s *server) stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
		}
	})
}

func start(bin, addr, data, access, secret, logPath string) (*server, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(bin, "--port", addr, "--quiet", "posix", data)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+access, "ROOT_SECRET_KEY="+secret)
	cmd.Stdout, cmd.Stderr = logf, logf
	// No Pdeathsig: it fires when the OS thread that forked the child ends,
	// and Go ends every thread a goroutine locked and never unlocked, which
	// runtime.newNetNSAt does for each instance it creates. With Pdeathsig
	// the server was killed at a random instance creation, and lazy reads
	// through the registry on it failed with EIO. Cleanup stops it.
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{cmd: cmd, done: make(chan struct{})}
	var exitErr error
	go func() { exitErr = cmd.Wait(); close(s.done) }()

	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			out, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("versitygw exited (%v): %s", exitErr, bytes.TrimSpace(out))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		resp, err := client.Do(req)
		cancel()
		if err == nil {
			resp.Body.Close()
			// versitygw answers an unsigned request with 403 and names
			// itself; anything else on the port is another process.
			if resp.Header.Get("Server") == "VERSITYGW" {
				return s, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.stop()
	out, _ := os.ReadFile(logPath)
	return nil, errors.New("versitygw did not answer within 20s: " + string(bytes.TrimSpace(out)))
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
