package runtime

import (
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"

	"github.com/envd-dev/envd/errdefs"
)

// NetworkPolicy is what an instance may connect to. Terms:
//   - A group is a set of instances that may open connections to each
//     other (envd: the instances of one project). Instances of different
//     groups never can. Group "" is a group of its own: the instance reaches
//     no other instance.
//   - Egress is where an instance may open connections beyond the node's
//     instances; see Egress.
//
// Whatever the policy, an instance never reaches the node itself (any of
// its addresses, the bridge gateway included), link-local addresses, the
// cluster's endpoints (NetworkConfig.Deny), or another group's instances;
// connections into an instance are only its group's and the node's own.
type NetworkPolicy struct {
	Group string
	// Isolated forbids connections even between instances of the group.
	Isolated bool
	Egress   Egress
}

// EgressMode is the kind of an egress policy.
type EgressMode string

const (
	// EgressOpen reaches the internet: every address except the private
	// ranges (PrivateRanges). The zero Egress is open.
	EgressOpen EgressMode = "open"
	// EgressNone reaches nothing beyond the group's instances, not even a
	// DNS server: the instance's resolv.conf names none.
	EgressNone EgressMode = "none"
	// EgressAllow reaches only the listed CIDRs and host names (private
	// ranges included when listed), plus the instance's DNS servers.
	EgressAllow EgressMode = "allow"
)

// PrivateRanges are the IPv4 ranges an open egress policy drops.
var PrivateRanges = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16"}

// MaxEgressEntries bounds an allow list (each entry is a firewall rule per
// instance).
const MaxEgressEntries = 64

// Egress is an egress policy. Its text form (ParseEgress, String) is "open",
// "none" or "allow:ENTRY,ENTRY..." where an entry is an IPv4 address, an
// IPv4 CIDR or a host name. Host names are resolved (IPv4) when the
// instance starts, each time it starts; a name that does not resolve then
// allows nothing, and later changes of its addresses are not followed
// until the next start.
type Egress struct {
	Mode  EgressMode
	Allow []string // EgressAllow only: normalized entries
}

var hostnameRE = regexp.MustCompile(`^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

// ParseEgress parses the text form of an egress policy; "" is open. Errors
// are errdefs.ErrInvalidArgument naming the bad part.
func ParseEgress(s string) (Egress, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "", string(EgressOpen):
		return Egress{Mode: EgressOpen}, nil
	case string(EgressNone):
		return Egress{Mode: EgressNone}, nil
	}
	list, ok := strings.CutPrefix(s, string(EgressAllow)+":")
	if !ok {
		return Egress{}, fmt.Errorf("egress %q: must be open, none or allow:CIDR|HOST,...: %w", s, errdefs.ErrInvalidArgument)
	}
	e := Egress{Mode: EgressAllow}
	for _, entry := range strings.Split(list, ",") {
		entry = strings.ToLower(strings.TrimSpace(entry))
		if entry == "" {
			continue
		}
		norm, err := normalizeAllowEntry(entry)
		if err != nil {
			return Egress{}, err
		}
		if !slices.Contains(e.Allow, norm) {
			e.Allow = append(e.Allow, norm)
		}
	}
	if len(e.Allow) == 0 {
		return Egress{}, fmt.Errorf("egress %q: an allow list needs at least one entry (none allows nothing): %w", s, errdefs.ErrInvalidArgument)
	}
	if len(e.Allow) > MaxEgressEntries {
		return Egress{}, fmt.Errorf("egress allow list has %d entries, at most %d: %w", len(e.Allow), MaxEgressEntries, errdefs.ErrInvalidArgument)
	}
	return e, nil
}

func normalizeAllowEntry(entry string) (string, error) {
	if strings.Contains(entry, "/") {
		ip, ipnet, err := net.ParseCIDR(entry)
		if err != nil || ip.To4() == nil {
			return "", fmt.Errorf("egress entry %q: not an IPv4 CIDR (instances have no IPv6): %w", entry, errdefs.ErrInvalidArgument)
		}
		return ipnet.String(), nil
	}
	if ip := net.ParseIP(entry); ip != nil {
		if ip.To4() == nil {
			return "", fmt.Errorf("egress entry %q: not an IPv4 address (instances have no IPv6): %w", entry, errdefs.ErrInvalidArgument)
		}
		return ip.To4().String(), nil
	}
	name, wildcard := strings.CutPrefix(entry, "*.")
	if len(name) > 253 || !hostnameRE.MatchString(name) || (wildcard && !strings.Contains(name, ".")) {
		return "", fmt.Errorf("egress entry %q: not an IPv4 address, CIDR, host name or *.domain wildcard (of at least two labels): %w", entry, errdefs.ErrInvalidArgument)
	}
	return entry, nil
}

// String is the text form ParseEgress reads.
func (e Egress) String() string {
	switch e.Mode {
	case EgressNone:
		return string(EgressNone)
	case EgressAllow:
		return string(EgressAllow) + ":" + strings.Join(e.Allow, ",")
	}
	return string(EgressOpen)
}

func (p NetworkPolicy) validate() error {
	if len(p.Group) > 256 || strings.ContainsAny(p.Group, "\n\x00") {
		return fmt.Errorf("network group %q: %w", p.Group, errdefs.ErrInvalidArgument)
	}
	switch p.Egress.Mode {
	case "", EgressOpen, EgressNone, EgressAllow:
	default:
		return fmt.Errorf("egress mode %q: %w", p.Egress.Mode, errdefs.ErrInvalidArgument)
	}
	// Entries built by hand (not by ParseEgress) are checked the same way.
	_, err := ParseEgress(p.Egress.String())
	return err
}
