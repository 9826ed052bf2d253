package types

import "time"

// EgressDenial is one query or connection of a project's instance that the
// node's egress gateway refused (egress by host name).
type EgressDenial struct {
	ID       int64     `json:"id"`
	Time     time.Time `json:"time"`
	Instance string    `json:"instance"`
	// Kind is "dns" (a query), "tls" (a connection by SNI), "http" (a
	// request by Host) or "connect" (a connection without a readable name).
	Kind   string `json:"kind"`
	Name   string `json:"name,omitempty"`
	Dest   string `json:"dest,omitempty"` // ip:port, "" for queries
	Reason string `json:"reason"`
}

// SetSecretRequest stores (or rotates) a brokered secret. The value is
// write-only: no answer carries it.
type SetSecretRequest struct {
	Value string `json:"value"`
}

// SecretBinding binds a secret to a host: requests of the tenant's
// instances to Host over Scheme get the header Header set to Format with
// "{{value}}" replaced by the secret, at the node's egress proxy.
type SecretBinding struct {
	// Host is a host name or a *.wildcard.
	Host string `json:"host"`
	// Header defaults to "Authorization", Format to "Bearer {{value}}".
	Header string `json:"header,omitempty"`
	Format string `json:"format,omitempty"`
	// Scheme is "http" (plain HTTP requests; the default) or "https"
	// (HTTPS requests: the node's egress proxy terminates TLS for Host with
	// a certificate of the node's egress CA, which the instance trusts, and
	// verifies the host's real certificate upstream). A binding applies to
	// its scheme only, so an HTTPS secret never goes out in clear text.
	Scheme string `json:"scheme,omitempty"`
}

// Secret describes a stored secret, never its value.
type Secret struct {
	Name      string         `json:"name"`
	Binding   *SecretBinding `json:"binding,omitempty"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt time.Time      `json:"updated_at"`
}
