// Package egress is the node-side gateway that enforces egress by host name:
// a DNS resolver the instances use and a proxy that their TCP connections to
// ports 80 and 443 are redirected to.
//
// Terms:
//   - A name pattern is a host name ("pkg.example") or a wildcard
//     ("*.pkg.example", which matches every name below pkg.example but not
//     pkg.example itself).
//   - A client is an instance attached to the gateway, known by its
//     address on the bridge (Attach). Queries and connections from any
//     other address are refused.
//   - A denial is a query or connection the gateway refused; each is
//     reported to Config.OnDeny.
//
// The resolver answers only names a client's patterns match (forwarding
// the query to the upstream resolvers) and answers REFUSED otherwise. The
// proxy reads the TLS SNI (port 443) or the HTTP Host of each request (port
// 80), and connects to the connection's original destination only when the
// name matches and the upstream resolvers resolve it to that destination:
// an allowed SNI sent to the address of another name is refused.
//
// For a host the caller has HTTPS headers for (Config.Headers with scheme
// "https", asked when the connection opens), the proxy terminates TLS
// itself with a certificate of Config.CA, adds the headers to each request
// and forwards it over its own TLS connection, which verifies the host's
// real certificate against Config.UpstreamRoots. Every other TLS
// connection passes through untouched.
package egress

import (
	"strings"
)

// Match reports whether name matches one of patterns. Names compare
// case-insensitively, without a trailing dot.
func Match(patterns []string, name string) bool {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "" {
		return false
	}
	for _, p := range patterns {
		if suffix, ok := strings.CutPrefix(p, "*."); ok {
			if strings.HasSuffix(name, "."+suffix) {
				return true
			}
			continue
		}
		if name == p {
			return true
		}
	}
	return false
}
