package types

import "time"

// SSHKey is a public key a tenant registered for the SSH endpoint
// (POST /v1/ssh-keys); it logs in to every instance of the tenant.
type SSHKey struct {
	ID          int64     `json:"id"`
	Name        string    `json:"name"`
	Fingerprint string    `json:"fingerprint"` // SHA256:<base64>, as ssh-keygen -l shows it
	PublicKey   string    `json:"public_key"`  // authorized_keys form, without comment
	CreatedAt   time.Time `json:"created_at"`
}

// AddSSHKeyRequest is the body of POST /v1/ssh-keys.
type AddSSHKeyRequest struct {
	// PublicKey is one key in authorized_keys form ("ssh-ed25519 AAAA...
	// comment"); options before the type are refused.
	PublicKey string `json:"public_key"`
	// Name labels the key; "" = the key's comment, else its fingerprint.
	Name string `json:"name,omitempty"`
}

// SSHInfo is where a node's SSH endpoint listens and the fingerprint of
// its host key (Info.SSH; absent when the node serves no SSH).
type SSHInfo struct {
	Addr               string `json:"addr"`                 // host:port
	HostKeyFingerprint string `json:"host_key_fingerprint"` // SHA256:<base64>
	HostKey            string `json:"host_key"`             // authorized_keys form, for known_hosts
}

// SSHSubprotocol is the WebSocket subprotocol of GET
// /v1/instances/{i}/ssh: binary messages carry an SSH connection's bytes.
const SSHSubprotocol = "ssh.envd.dev"
