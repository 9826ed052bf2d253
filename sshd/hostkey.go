package sshd

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/atomicfile"
)

// LoadOrCreateHostKey reads the host key at path (OpenSSH private key
// format), creating an ed25519 key there (mode 0600) when there is none.
// A key file readable by others is refused, as OpenSSH's sshd does.
func LoadOrCreateHostKey(path string) (ssh.Signer, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		_, priv, gerr := ed25519.GenerateKey(rand.Reader)
		if gerr != nil {
			return nil, gerr
		}
		block, merr := ssh.MarshalPrivateKey(priv, "envd host key")
		if merr != nil {
			return nil, merr
		}
		if werr := atomicfile.Write(path, pem.EncodeToMemory(block), 0o600); werr != nil {
			return nil, fmt.Errorf("ssh host key: %w", werr)
		}
		return ssh.NewSignerFromKey(priv)
	}
	if err != nil {
		return nil, fmt.Errorf("ssh host key: %w", err)
	}
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("ssh host key %s: mode %v: others must not read it (chmod 600)", path, st.Mode().Perm())
	}
	signer, err := ssh.ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("ssh host key %s: %w", path, err)
	}
	return signer, nil
}

// HostKeyInfo is what GET /v1/info shows of an endpoint at addr with key.
func HostKeyInfo(addr string, key ssh.PublicKey) *types.SSHInfo {
	return &types.SSHInfo{Addr: addr, HostKeyFingerprint: ssh.FingerprintSHA256(key),
		HostKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))}
}
