package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/internal/proc"
)

// PIDFile is where a serving envd process records its pid.
const PIDFile = "envd.pid"

// WritePID records the calling process as the data dir's envd.
func WritePID(dataDir string) error {
	return writeFileAtomic(filepath.Join(dataDir, PIDFile), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644)
}

// Down stops everything a node under dataDir runs: the envd process (by its
// pid file), then, through a node started only for that, its containers,
// network, lazy snapshotter, private containerd and PostgreSQL. The data
// dir stays.
func Down(ctx context.Context, cfg Config) error {
	if b, err := os.ReadFile(filepath.Join(cfg.DataDir, PIDFile)); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid != os.Getpid() && isEnvd(pid) {
			// Its own drain takes up to its shutdown grace, then it closes.
			grace := cfg.ShutdownGrace
			if grace == 0 {
				grace = DefaultShutdownGrace
			}
			if err := proc.Terminate(ctx, "envd", pid, nil, max(grace, 0)+30*time.Second); err != nil {
				return err
			}
		}
		_ = os.Remove(filepath.Join(cfg.DataDir, PIDFile))
	}
	cfg.Listen = DefaultListen
	cfg.PrefetchWindow = -1
	n, err := Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("reach the node's parts to stop them: %w", err)
	}
	n.Shutdown(ctx)
	_ = os.Remove(filepath.Join(cfg.DataDir, "envd.url"))
	return nil
}

// isEnvd reports whether pid is an envd process (a stale pid file may name
// a pid reused by something else).
func isEnvd(pid int) bool {
	argv := proc.Args(pid)
	if len(argv) == 0 {
		return false
	}
	exe := argv[0]
	return filepath.Base(exe) == "envd" || strings.HasSuffix(exe, ".test")
}

// parts are the external parts a node was started with, kept in the data
// dir so that a later `envd down` (or a restart without flags) reaches the
// same PostgreSQL, registry and containerd instead of embedding new ones.
type parts struct {
	DSN        string `json:"dsn,omitempty"`
	Registry   string `json:"registry,omitempty"`
	Containerd string `json:"containerd,omitempty"`
	Namespace  string `json:"namespace,omitempty"`
	// Paths of the external registry's credential files (never their content).
	RegistryCredentialFile   string `json:"registry_credential_file,omitempty"`
	RegistryGCCredentialFile string `json:"registry_gc_credential_file,omitempty"`
}

// rememberParts fills cfg's empty external parts from the data dir's record
// and records what is given (0600: a DSN may carry a password).
func rememberParts(cfg *Config) error {
	path := filepath.Join(cfg.DataDir, "parts.json")
	var saved parts
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &saved)
	}
	if cfg.DSN == "" {
		cfg.DSN = saved.DSN
	}
	if cfg.Registry == "" {
		cfg.Registry = saved.Registry
	}
	if cfg.Containerd == "" {
		cfg.Containerd = saved.Containerd
	}
	if saved.Namespace != "" && (cfg.Namespace == "" || cfg.Namespace == DefaultNamespace) {
		cfg.Namespace = saved.Namespace // the default is not a choice
	}
	if cfg.Registry != "" && cfg.Registry == saved.Registry {
		if cfg.RegistryCredentialFile == "" {
			cfg.RegistryCredentialFile = saved.RegistryCredentialFile
		}
		if cfg.RegistryGCCredentialFile == "" {
			cfg.RegistryGCCredentialFile = saved.RegistryGCCredentialFile
		}
	}
	now := parts{DSN: cfg.DSN, Registry: cfg.Registry, Containerd: cfg.Containerd, Namespace: cfg.Namespace,
		RegistryCredentialFile: cfg.RegistryCredentialFile, RegistryGCCredentialFile: cfg.RegistryGCCredentialFile}
	if now == saved {
		return nil
	}
	b, _ := json.Marshal(now)
	return writeFileAtomic(path, b, 0o600)
}
