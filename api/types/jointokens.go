package types

import "time"

// JoinTokenRequest asks for a join token (POST /v1/cluster/join-tokens).
type JoinTokenRequest struct {
	// TTL is how long the token may be used, a Go duration from 1m to
	// 168h; "" = 1h.
	TTL string `json:"ttl,omitempty"`
}

// JoinToken is a new join token: shown once, stored hashed, used at most
// once before ExpiresAt (the database's clock).
type JoinToken struct {
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	// Command is the short join line: `envd serve --join URL --token T`
	// with the flags the new node sets itself; Args is it as words.
	Command string   `json:"command"`
	Args    []string `json:"args"`
}

// JoinRequest is what a joining node sends with its join token (POST
// /v1/cluster/join, the token as the bearer token).
type JoinRequest struct {
	Node string `json:"node"`
}

// JoinS3 is an S3 endpoint with its keys.
type JoinS3 struct {
	Endpoint  string `json:"endpoint"`
	Bucket    string `json:"bucket"`
	Region    string `json:"region,omitempty"`
	Secure    bool   `json:"secure,omitempty"`
	AccessKey string `json:"access_key"`
	SecretKey string `json:"secret_key"`
}

// JoinConfig is the cluster's shared settings, answered once per join
// token: what `envd serve` otherwise takes from --database, --registry,
// --registry-credential-file, --registry-s3-*, --s3-* and --lease.
type JoinConfig struct {
	Database string `json:"database"`
	// Registry is the shared registry's host:port, RegistryCredential its
	// node credential (user:password); or RegistryS3, the bucket each node
	// serves its embedded registry from.
	Registry           string  `json:"registry,omitempty"`
	RegistryCredential string  `json:"registry_credential,omitempty"`
	RegistryS3         *JoinS3 `json:"registry_s3,omitempty"`
	// S3 holds volume archives and logs; nil when the cluster has none.
	S3    *JoinS3 `json:"s3,omitempty"`
	Lease string  `json:"lease,omitempty"`
	// Notes: what does not work across machines (loopback addresses).
	Notes []string `json:"notes,omitempty"`
}
