package stargz

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/containerd/v2/pkg/reference"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
)

// The snapshotter's registry credentials are in a file, never on its
// command line (which every user sees in ps) nor in its environment: one
// line per registry, "HOST:PORT USER:PASSWORD", mode 0600. The file is read
// again at every authentication, so credentials can be rotated, and
// registries added, without restarting the snapshotter and losing its FUSE
// mounts.

// credentialsFileName is the credentials file Start writes in its DIR.
const credentialsFileName = "registry.credentials"

// StartOption configures Start.
type StartOption func(*startOptions) error

type startOptions struct {
	creds map[string]registry.Credential
}

// WithRegistryCredential has the snapshotter authenticate to the registry
// at host ("host:port") with c. Default: every registry anonymously.
func WithRegistryCredential(host string, c registry.Credential) StartOption {
	return func(o *startOptions) error {
		if host == "" || strings.ContainsAny(host, " \n") || c.User == "" || c.Password == "" ||
			strings.ContainsAny(c.User, ": \n") || strings.Contains(c.Password, "\n") {
			return fmt.Errorf("registry credential %v for %q: want a host, a user without ':' and a password, on one line: %w",
				c, host, errdefs.ErrInvalidArgument)
		}
		o.creds[host] = c
		return nil
	}
}

// WriteCredentials writes the credentials file at path (0600, through a
// rename, so the snapshotter never reads half of it).
func WriteCredentials(path string, creds map[string]registry.Credential) error {
	var b strings.Builder
	for _, h := range slices.Sorted(maps.Keys(creds)) {
		fmt.Fprintf(&b, "%s %s:%s\n", h, creds[h].User, creds[h].Password)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("snapshotter credentials: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(b.String())
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("snapshotter credentials: %w", err)
	}
	return nil
}

// readCredential returns host's credential from the credentials file at
// path; "", "" when it has none. A file open to group or others is refused.
func readCredential(path, host string) (string, string, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("snapshotter credentials: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return "", "", fmt.Errorf("snapshotter credentials: %w", err)
	} else if st.Mode().Perm()&0o077 != 0 {
		return "", "", fmt.Errorf("snapshotter credentials %q have mode %04o, want 0600: %w", path, st.Mode().Perm(), errdefs.ErrPermissionDenied)
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		h, cred, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok || h != host {
			continue
		}
		user, pass, ok := strings.Cut(cred, ":")
		if !ok {
			return "", "", fmt.Errorf("snapshotter credentials %q: the line of %s is not HOST USER:PASSWORD: %w", path, host, errdefs.ErrInvalidArgument)
		}
		return user, pass, nil
	}
	return "", "", sc.Err()
}

// credentials answers a registry's challenge from c.CredentialsFile.
func (c Config) credentials(host string, _ reference.Spec) (string, string, error) {
	if c.CredentialsFile == "" {
		return "", "", nil
	}
	return readCredential(c.CredentialsFile, host)
}
