package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Node-to-node authentication of forwarded requests. A node that forwards
// a request sets ForwardedHeader to "v1.UNIX.MAC": an HMAC-SHA256, with the
// cluster's key (versions.Nodes.ClusterKey), of the time, method, path and
// placement decision. Where it arrives, a header that does not verify is
// removed (with PlacementHeader) before anything reads it, so a client that
// sets it itself is placed and forwarded like any other request. The MAC
// is good for forwardSkew either way of the receiving node's clock.
const forwardSkew = 5 * time.Minute

func forwardMAC(key []byte, unix, method, path, placement string) string {
	m := hmac.New(sha256.New, key)
	for _, s := range []string{"envd-forward-v1", unix, method, path, placement} {
		m.Write([]byte(s))
		m.Write([]byte{0})
	}
	return hex.EncodeToString(m.Sum(nil))
}

// signForwarded marks r as forwarded by this node.
func signForwarded(key []byte, r *http.Request, now time.Time) {
	unix := strconv.FormatInt(now.Unix(), 10)
	r.Header.Set(ForwardedHeader, "v1."+unix+"."+forwardMAC(key, unix, r.Method, r.URL.EscapedPath(), r.Header.Get(PlacementHeader)))
}

// forwardedByNode reports whether r carries a valid node signature.
func forwardedByNode(key []byte, r *http.Request, now time.Time) bool {
	v := r.Header.Get(ForwardedHeader)
	if len(key) == 0 || v == "" {
		return false
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return false
	}
	t, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return false
	}
	if d := now.Sub(time.Unix(t, 0)); d > forwardSkew || d < -forwardSkew {
		return false
	}
	want := forwardMAC(key, parts[1], r.Method, r.URL.EscapedPath(), r.Header.Get(PlacementHeader))
	return hmac.Equal([]byte(parts[2]), []byte(want))
}

// stripUnsigned removes the forwarding headers of a request that no node
// signed.
func stripUnsigned(key []byte, r *http.Request) {
	if r.Header.Get(ForwardedHeader) != "" || r.Header.Get(PlacementHeader) != "" {
		if !forwardedByNode(key, r, time.Now()) {
			r.Header.Del(ForwardedHeader)
			r.Header.Del(PlacementHeader)
		}
	}
}

// verifyForwarded strips the forwarding headers of a request that no node
// signed, then serves it.
func verifyForwarded(key []byte, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stripUnsigned(key, r)
		next.ServeHTTP(w, r)
	})
}

// WithForwardKey sets the cluster's key: the node signs the requests it
// forwards with it and believes only forwarded requests signed with it.
// Without it, no request is taken as forwarded (a single node).
func WithForwardKey(key []byte) Option {
	return func(o *options) error {
		o.forwardKey = append([]byte(nil), key...)
		return nil
	}
}
