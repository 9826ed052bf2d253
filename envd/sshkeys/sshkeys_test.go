package sshkeys_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"

	"github.com/envd-dev/envd/envd/sshkeys"
	"github.com/envd-dev/envd/errdefs"
)

func authorized(t *testing.T, key any) string {
	t.Helper()
	pub, err := ssh.NewPublicKey(key)
	require.NoError(t, err)
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
}

// A .pub file's content is accepted; anything else gets a clear
// invalid_argument.
func TestParseSSHKey(t *testing.T) {
	edPub, edPriv, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	ed := authorized(t, edPub)
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	require.NoError(t, err)
	signer, err := ssh.NewSignerFromKey(edPriv)
	require.NoError(t, err)
	cert := &ssh.Certificate{Key: signer.PublicKey(), CertType: ssh.UserCert, ValidBefore: ssh.CertTimeInfinity}
	require.NoError(t, cert.SignCert(rand.Reader, signer))
	certText := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(cert)))

	tests := []struct {
		name, text, comment, wantErr string
	}{
		{"a .pub line", ed + " me@laptop\n", "me@laptop", ""},
		{"without comment", ed, "", ""},
		{"empty", "  \n", "", "required"},
		{"not a key", "hello world", "", "not an OpenSSH public key"},
		{"a private key", "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n", "", "not an OpenSSH public key"},
		{"truncated base64", ed[:40], "", "not an OpenSSH public key"},
		{"options", `command="ls" ` + ed, "", "options"},
		{"two keys", ed + " a\n" + ed + " b\n", "", "one key per request"},
		{"certificate", certText, "", "certificates"},
		{"short RSA", authorized(t, &small.PublicKey), "", "1024 bits"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			key, comment, err := sshkeys.ParseSSHKey(tc.text)
			if tc.wantErr != "" {
				require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
				assert.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, ssh.FingerprintSHA256(signer.PublicKey()), ssh.FingerprintSHA256(key))
			assert.Equal(t, tc.comment, comment)
		})
	}
}
