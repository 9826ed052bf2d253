package types

import "time"

// ListeningPort is a TCP port an instance listens on, as its network
// namespace shows it (/proc/net/tcp and tcp6, LISTEN state). The answer
// of GET /v1/instances/{i}/ports lists them.
type ListeningPort struct {
	// Address is the listening address: "127.0.0.1", "0.0.0.0", "::",
	// "::1", or the instance's own.
	Address  string `json:"address"`
	Port     int    `json:"port"`
	Protocol string `json:"protocol"` // "tcp" or "tcp6"
	// Public: the project marks the port public (no preview token needed).
	Public bool `json:"public"`
	// URL is the port's preview URL when the node has a preview domain.
	URL string `json:"url,omitempty"`
	// Forwarded: the project names the port among its forwarded ports
	// (a devcontainer.json's forwardPorts); Label and Scheme are its
	// attributes there.
	Forwarded bool   `json:"forwarded,omitempty"`
	Label     string `json:"label,omitempty"`
	Scheme    string `json:"scheme,omitempty"`
}

// PortList is the answer of GET /v1/instances/{i}/ports.
type PortList struct {
	Ports []ListeningPort `json:"ports"`
}

// PreviewTokenRequest is the body of POST
// /v1/instances/{i}/ports/{port}/token.
type PreviewTokenRequest struct {
	// TTL is a Go duration; "" = 1h; at most 168h.
	TTL string `json:"ttl,omitempty"`
}

// PreviewToken opens the preview (host form) of one port of an instance
// until ExpiresAt.
type PreviewToken struct {
	// URL is the preview URL with the token in its query (envd_preview_token);
	// opening it sets a cookie and redirects to the URL without it.
	// Empty when the node has no preview domain.
	URL       string    `json:"url,omitempty"`
	Token     string    `json:"token"`
	Host      string    `json:"host,omitempty"` // the preview host name, without a port
	ExpiresAt time.Time `json:"expires_at"`
}

// ProjectPorts is a project's port settings: GET and PUT
// /v1/projects/{p}/ports.
type ProjectPorts struct {
	// Public ports of the project's instances need no preview token in
	// the host form: anyone who knows the URL reaches them.
	Public []int `json:"public"`
	// Forwarded are the ports the project names for its tools, with a label
	// and the scheme a browser uses ("http" or "https"; "" = http), as a
	// devcontainer.json's forwardPorts and portsAttributes give them. In a
	// PUT, absent (null) keeps them; a list (even empty) replaces them.
	// Answers omit it when there are none. Forwarding gives no access: a
	// forwarded port that is not public needs a preview token like any.
	Forwarded []ForwardedPort `json:"forwarded,omitempty"`
}

// ForwardedPort is one of a project's forwarded ports.
type ForwardedPort struct {
	Port   int    `json:"port"`
	Label  string `json:"label,omitempty"`
	Scheme string `json:"scheme,omitempty"`
}
