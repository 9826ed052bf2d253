// Package preview signs and checks preview tokens and names preview hosts:
// the host form of the port proxy, {port}-{instance}.{domain}.
//
// Terms:
//   - key: the HMAC-SHA256 key all nodes share (kept in PostgreSQL), so a
//     token made on one node opens the preview on every node;
//   - claims: what a token is good for: one instance, one port of it, the
//     tenant owning the instance, until an expiry (whole seconds, UTC);
//   - token: base64url (no padding) of the expiry (8 bytes, big-endian
//     Unix seconds) followed by the MAC (32 bytes) over the claims. The
//     instance, port and tenant are not in the token: the verifier knows
//     them from the host and the store, and a token for other claims
//     fails its MAC.
package preview

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/errdefs"
)

// KeySize is the size of a preview key in bytes.
const KeySize = 32

// Claims are what a preview token grants.
type Claims struct {
	Instance string
	Port     int
	Tenant   string
	Expires  time.Time
}

// ErrExpired is the kind of a token past its expiry (also ErrUnauthenticated).
var ErrExpired = fmt.Errorf("preview token expired: %w", errdefs.ErrUnauthenticated)

// Sign returns the token of c under key.
func Sign(key []byte, c Claims) string {
	exp := c.Expires.Unix()
	buf := make([]byte, 8, 8+sha256.Size)
	binary.BigEndian.PutUint64(buf, uint64(exp))
	buf = append(buf, mac(key, c.Instance, c.Port, c.Tenant, exp)...)
	return base64.RawURLEncoding.EncodeToString(buf)
}

// Verify checks that token was signed under key for instance, port and
// tenant and is not expired at now, and returns its expiry. Every failure
// is of kind errdefs.ErrUnauthenticated; an expired token also ErrExpired.
func Verify(key []byte, token, instance string, port int, tenant string, now time.Time) (time.Time, error) {
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) != 8+sha256.Size {
		return time.Time{}, fmt.Errorf("preview token: malformed: %w", errdefs.ErrUnauthenticated)
	}
	exp := int64(binary.BigEndian.Uint64(raw[:8]))
	if !hmac.Equal(raw[8:], mac(key, instance, port, tenant, exp)) {
		return time.Time{}, fmt.Errorf("preview token: not valid for port %d of instance %q: %w", port, instance, errdefs.ErrUnauthenticated)
	}
	expires := time.Unix(exp, 0).UTC()
	if !now.Before(expires) {
		return time.Time{}, fmt.Errorf("%w at %s", ErrExpired, expires.Format(time.RFC3339))
	}
	return expires, nil
}

// mac is the HMAC of the claims. Fields are length-prefixed, so no two
// claims share an input.
func mac(key []byte, instance string, port int, tenant string, exp int64) []byte {
	h := hmac.New(sha256.New, key)
	for _, f := range []string{"envd-preview-v1", instance, strconv.Itoa(port), tenant, strconv.FormatInt(exp, 10)} {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	return h.Sum(nil)
}

// Host is the preview host name of port of instance under domain.
func Host(port int, instance, domain string) string {
	return strconv.Itoa(port) + "-" + instance + "." + domain
}

// ParseHost splits a request's Host (a port suffix allowed) into the port
// and instance of a preview host under domain. ok is false when host is
// not under domain at all (the request is for the API); err is set when it
// is, but its first label is not {port}-{instance} with a port in 1-65535.
// Names compare case-insensitively; the instance comes back lower-case.
func ParseHost(host, domain string) (port int, instance string, ok bool, err error) {
	domain = strings.TrimSuffix(strings.ToLower(domain), ".")
	if domain == "" {
		return 0, "", false, nil
	}
	h := strings.ToLower(host)
	if i := strings.LastIndexByte(h, ':'); i >= 0 && !strings.Contains(h[i:], "]") {
		h = h[:i]
	}
	h = strings.TrimSuffix(h, ".")
	label, found := strings.CutSuffix(h, "."+domain)
	if !found {
		return 0, "", false, nil
	}
	bad := func(why string) (int, string, bool, error) {
		return 0, "", true, fmt.Errorf("preview host %q: %s: %w", host, why, errdefs.ErrNotFound)
	}
	if label == "" || strings.Contains(label, ".") {
		return bad("its first label must be {port}-{instance} directly under " + domain)
	}
	ps, inst, found := strings.Cut(label, "-")
	if !found || inst == "" {
		return bad("its first label must be {port}-{instance}")
	}
	if ps == "" || len(ps) > 5 || strings.TrimLeft(ps, "0123456789") != "" || ps[0] == '0' {
		return bad("the port must be a number from 1 to 65535")
	}
	port, _ = strconv.Atoi(ps)
	if port < 1 || port > 65535 {
		return bad("the port must be a number from 1 to 65535")
	}
	return port, inst, true, nil
}
