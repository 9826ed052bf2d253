package registry

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/atomicfile"
)

// Credential is a user name and password for HTTP Basic authentication to
// a registry. Its String never shows the password, so a Credential can be
// logged or wrapped in an error by accident without leaking.
type Credential struct {
	User     string
	Password string
}

// IsZero reports whether c has neither user nor password.
func (c Credential) IsZero() bool { return c.User == "" && c.Password == "" }

func (c Credential) String() string { return c.User + ":<redacted>" }
func (c Credential) GoString() string {
	return fmt.Sprintf("registry.Credential{User: %q, Password: <redacted>}", c.User)
}

// The user names of the two credentials a node generates. Any names work:
// the server tells them apart by the whole credential, not the name.
const (
	NodeUser = "envd-node"
	GCUser   = "envd-gc"
)

// NewCredential returns user with a random password of 130 bits.
func NewCredential(user string) Credential {
	return Credential{User: user, Password: rand.Text()}
}

// ReadCredentialFile reads a credential file: one line "user:password".
// The file must not be readable or writable by group or others (like
// ssh's keys, a credential shared with the whole machine is refused, not
// used). Errors: errdefs.ErrNotFound (no file), errdefs.ErrInvalidArgument
// (bad format), errdefs.ErrPermissionDenied (mode too open).
func ReadCredentialFile(path string) (Credential, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Credential{}, fmt.Errorf("registry credential file %q: %w", path, errdefs.ErrNotFound)
	}
	if err != nil {
		return Credential{}, fmt.Errorf("registry credential file %q: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Credential{}, fmt.Errorf("registry credential file %q: %w", path, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return Credential{}, fmt.Errorf("registry credential file %q has mode %04o, want 0600 or stricter: %w",
			path, st.Mode().Perm(), errdefs.ErrPermissionDenied)
	}
	buf := make([]byte, 4096)
	n, _ := f.Read(buf)
	line, _, _ := strings.Cut(string(buf[:n]), "\n")
	user, pass, ok := strings.Cut(strings.TrimRight(line, "\r"), ":")
	if !ok || user == "" || pass == "" {
		return Credential{}, fmt.Errorf("registry credential file %q: want one line \"user:password\": %w", path, errdefs.ErrInvalidArgument)
	}
	return Credential{User: user, Password: pass}, nil
}

// WriteCredentialFile writes c to path (mode 0600) through a temp file and a
// rename, so a reader never sees half a credential.
func WriteCredentialFile(path string, c Credential) error {
	if c.User == "" || c.Password == "" || strings.ContainsAny(c.User, ":\n") || strings.Contains(c.Password, "\n") {
		return fmt.Errorf("registry credential for %q: user and password must be non-empty, without ':' in the user or newlines: %w",
			c.User, errdefs.ErrInvalidArgument)
	}
	return atomicfile.Write(path, []byte(c.User+":"+c.Password+"\n"), 0o600)
}

// LoadOrCreateCredentialFile reads the credential at path, or, when there
// is none, generates one for user and writes it there (0600). A file open
// to group or others is an error (see ReadCredentialFile), not repaired:
// its password may already be known.
func LoadOrCreateCredentialFile(path, user string) (Credential, error) {
	c, err := ReadCredentialFile(path)
	if !errors.Is(err, errdefs.ErrNotFound) {
		return c, err
	}
	c = NewCredential(user)
	if err := WriteCredentialFile(path, c); err != nil {
		return Credential{}, err
	}
	return c, nil
}
