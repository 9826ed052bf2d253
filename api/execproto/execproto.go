// Package execproto is the wire protocol of envd's WebSocket exec stream,
// shared by the server (package api) and its clients (package client). It
// has no dependencies beyond the standard library, so clients need not import the server's.
//
// Messages are binary; the first byte is the channel, the rest the payload.
// See docs/api.md.
package execproto

import (
	"encoding/base64"
	"strings"
)

// Channels.
const (
	Stdin  byte = 0 // client -> server: input
	Stdout byte = 1 // server -> client: output (all of it with a tty)
	Stderr byte = 2 // server -> client: error output (never with a tty)
	Resize byte = 3 // client -> server: {"cols": N, "rows": N}
	Exit   byte = 4 // server -> client: {"exit_code": N[, "error": {...}]}, then close
	EOF    byte = 5 // client -> server: closes the process's stdin
)

const (
	// Subprotocol is the WebSocket subprotocol of the exec stream; the
	// server selects it when the client offers it.
	Subprotocol = "v1.exec.envd.dev"
	// BearerPrefix starts the subprotocol that carries a bearer token,
	// base64url-encoded without padding, for clients that cannot set an
	// Authorization header (browsers). The server never selects it.
	BearerPrefix = "base64url.bearer.envd.dev."
	// MaxMessage is the largest message either side reads.
	MaxMessage = 1 << 20
	// Chunk is the most payload either side puts in one message.
	Chunk = 32 << 10
)

// BearerSubprotocol returns the subprotocol that carries token; offer it
// together with Subprotocol.
func BearerSubprotocol(token string) string {
	return BearerPrefix + base64.RawURLEncoding.EncodeToString([]byte(token))
}

// BearerToken returns the token a BearerSubprotocol carries.
func BearerToken(subprotocol string) (string, bool) {
	enc, ok := strings.CutPrefix(subprotocol, BearerPrefix)
	if !ok {
		return "", false
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(b) == 0 {
		return "", false
	}
	return string(b), true
}
