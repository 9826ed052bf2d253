package registry

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"path"

	"github.com/envd-dev/envd/errdefs"
)

// Access says who may use the embedded registry. Every request needs one of
// the two credentials, by HTTP Basic; there is no anonymous access.
//
//   - Node pulls and pushes: what envd, containerd and the lazy snapshotter
//     of every node need.
//   - GC also deletes manifests and blobs: only the garbage collector
//     removes content, so a leaked node credential cannot destroy versions.
//
// Nobody lists the catalog (GET /v2/_catalog answers 404 once
// authenticated): envd never needs it, and it would name every tenant's
// repositories to anyone holding a node credential.
//
// distribution's own htpasswd auth cannot say this (every user it accepts
// has every right), hence a handler of ours in front of its app.
type Access struct {
	Node Credential
	GC   Credential
}

// NewAccess returns an Access with fresh random credentials.
func NewAccess() Access {
	return Access{Node: NewCredential(NodeUser), GC: NewCredential(GCUser)}
}

func (a Access) validate() error {
	for _, c := range []Credential{a.Node, a.GC} {
		if c.User == "" || c.Password == "" {
			return fmt.Errorf("registry access: credential %v needs a user and a password: %w", c, errdefs.ErrInvalidArgument)
		}
	}
	if a.Node == a.GC {
		return fmt.Errorf("registry access: the node and GC credentials must differ: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// WithAccess sets the credentials the embedded registry accepts. Default:
// fresh random ones for this Server only (see Server.Access).
func WithAccess(a Access) Option {
	return func(o *options) error {
		if err := a.validate(); err != nil {
			return err
		}
		o.access = &a
		return nil
	}
}

// Realm is the realm of the registry's Basic challenge.
const Realm = "envd"

type role int

const (
	roleNone role = iota
	roleNode
	roleGC
)

// credDigest holds SHA-256 digests of a credential's parts, so that the
// comparison takes the same time whatever the length of what was sent.
type credDigest struct{ user, pass [32]byte }

func digestOf(c Credential) credDigest {
	return credDigest{user: sha256.Sum256([]byte(c.User)), pass: sha256.Sum256([]byte(c.Password))}
}

// match is 1 when user and pass are c's, in constant time.
func (c credDigest) match(user, pass [32]byte) int {
	return subtle.ConstantTimeCompare(user[:], c.user[:]) & subtle.ConstantTimeCompare(pass[:], c.pass[:])
}

// authHandler authenticates and authorizes every request before
// distribution's app sees it.
type authHandler struct {
	next     http.Handler
	node, gc credDigest
}

func newAuthHandler(a Access, next http.Handler) *authHandler {
	return &authHandler{next: next, node: digestOf(a.Node), gc: digestOf(a.GC)}
}

func (h *authHandler) role(r *http.Request) role {
	u, p, ok := r.BasicAuth()
	if !ok {
		return roleNone
	}
	uh, ph := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
	// Both credentials are always compared, so the time taken does not
	// tell which one came close.
	isNode, isGC := h.node.match(uh, ph), h.gc.match(uh, ph)
	switch {
	case isGC == 1:
		return roleGC
	case isNode == 1:
		return roleNode
	}
	return roleNone
}

func (h *authHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rl := h.role(r)
	if rl == roleNone {
		w.Header().Set("WWW-Authenticate", `Basic realm="`+Realm+`"`)
		writeRegistryError(w, http.StatusUnauthorized, "UNAUTHORIZED", "authentication required")
		return
	}
	// distribution's router matches the cleaned path (a path that is not
	// clean gets a redirect to the clean one), so the clean path is what
	// is checked.
	if p := path.Clean(r.URL.Path); p == "/v2/_catalog" {
		writeRegistryError(w, http.StatusNotFound, "UNSUPPORTED", "the catalog is not served")
		return
	}
	if r.Method == http.MethodDelete && rl != roleGC {
		writeRegistryError(w, http.StatusForbidden, "DENIED", "only the garbage collector deletes")
		return
	}
	h.next.ServeHTTP(w, r)
}

// writeRegistryError answers in the distribution spec's error format.
func writeRegistryError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"errors":[{"code":%q,"message":%q,"detail":null}]}`+"\n", code, message)
}
